package control_test

import (
	"bufio"
	"context"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/control"
	"rlhfstation/engine/events"
	"rlhfstation/engine/runs"
	"rlhfstation/engine/runs/runstest"
	"rlhfstation/internal/testref"
)

// plan is the run the stand-in trainer replays: TRL's GRPO metrics with KL at 0.8 on steps 32
// and 33, so that the kl_high rule (above 0.30 for 2 steps) fires at step 33.
var plan = runstest.Plan{Steps: 60, Seed: 3, KLSpike: 32}

// trainer starts examples/rlhfstation_callback.py inside the stand-in of transformers'
// Trainer loop (testdata/standin_trainer.py), replaying a trainer_state.json as transformers
// writes it. It returns the run folder, the checkpoints' folder and the process, whose
// standard output the caller reads.
func trainer(t *testing.T, stepSeconds string, extra ...string) (runDir, outDir string, cmd *exec.Cmd, stdout io.Reader) {
	t.Helper()
	py := testref.Python3(t)
	tmp := t.TempDir()
	hist := filepath.Join(tmp, "trainer_state.json")
	if err := runstest.TrainerState(hist, plan, plan.Steps); err != nil {
		t.Fatal(err)
	}
	runDir, outDir = filepath.Join(tmp, "runs", "my-grpo"), filepath.Join(tmp, "out")
	args := append([]string{filepath.Join("testdata", "standin_trainer.py"), "--history", hist, "--run-dir", runDir,
		"--output-dir", outDir, "--max-steps", "60", "--step-seconds", stepSeconds}, extra...)
	cmd = exec.Command(py, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return runDir, outDir, cmd, out
}

// follow waits for the callback's events.jsonl and follows it as `watch` does.
func follow(t *testing.T, ctx context.Context, runDir string) *runs.Run {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(runDir, "events.jsonl")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the callback wrote no events.jsonl")
		}
		time.Sleep(20 * time.Millisecond)
	}
	run, err := runs.Detect(runDir)
	if err != nil {
		t.Fatal(err)
	}
	if run.Kind != runs.KindOwn {
		t.Fatalf("the callback's folder reads as %s", run.Kind)
	}
	return run
}

// TestCallbackWatched: while the stand-in trainer runs with the callback, watch's follow
// reader and monitor see each logged step within a second, with TRL's values under DESIGN
// §5's names; the planted KL spike raises kl_high at its step; a pause holds the trainer
// until resume, and `control save` makes it save a checkpoint off its schedule; each request
// is acknowledged in the events.
func TestCallbackWatched(t *testing.T) {
	runDir, outDir, cmd, stdout := trainer(t, "0.04")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := follow(t, ctx, runDir)
	var (
		lastStep, savedAt, pausedAt int
		worst                       time.Duration
		acks                        []string
		klAlert                     events.Event
		end                         events.Event
		saveAsked, pauseAsked       bool
		stepsWhilePaused            int
		samples                     int
		checkpoints                 = map[int]string{}
	)
	for e := range run.Stream(ctx, runs.Options{Follow: true, Poll: 250 * time.Millisecond}) {
		switch e.Type {
		case events.RunStart:
			if e.Source != "TRL / Hugging Face Trainer" || e.TotalSteps != 60 || e.Config["args_class"] != "Args" {
				t.Errorf("run_start %+v", e)
			}
		case events.Step:
			if lat := time.Since(e.Time); lat > worst {
				worst = lat
			}
			want := plan.Metrics(e.Step)
			for _, name := range []string{"kl", "reward", "entropy", "grad_norm", "rewards/accuracy_reward/mean", "completions/mean_length"} {
				if got := e.Metrics[name]; math.Abs(got-want[name]) > 1e-12*math.Max(1, math.Abs(want[name])) {
					t.Errorf("step %d: %s = %v, logged %v", e.Step, name, got, want[name])
				}
			}
			if e.Metrics["mem/rss_bytes"] <= 0 {
				t.Errorf("step %d: no host memory", e.Step)
			}
			if pausedAt > 0 && pauseAsked {
				stepsWhilePaused++
			}
			lastStep = e.Step
			if e.Step == 10 && !saveAsked {
				saveAsked = true
				if _, err := control.Send(runDir, control.Save, "test", ""); err != nil {
					t.Fatal(err)
				}
			}
			if e.Step == 20 && !pauseAsked {
				pauseAsked = true
				control.Send(runDir, control.Pause, "test", "")
			}
		case events.Samples:
			samples++
			if len(e.Samples) != 4 || !strings.HasPrefix(e.Samples[0].Prompt, "Question ") {
				t.Errorf("samples at step %d: %+v", e.Step, e.Samples)
			}
		case events.Log:
			if e.Control == "" {
				continue
			}
			acks = append(acks, e.Control)
			switch e.Control {
			case "save":
				savedAt = e.Step
			case "pause":
				pausedAt = e.Step
				// Held: nothing more is logged while paused.
				time.Sleep(time.Second)
				stepsWhilePaused = 0
				go func() {
					time.Sleep(300 * time.Millisecond)
					control.Send(runDir, control.Resume, "test", "")
				}()
			case "resume":
				if stepsWhilePaused != 0 {
					t.Errorf("%d steps logged while paused", stepsWhilePaused)
				}
			}
		case events.Anomaly:
			if e.Metric == "kl" && klAlert.Rule == "" {
				klAlert = e
			}
		case events.Checkpoint:
			checkpoints[e.Step] = e.Path
		case events.RunEnd:
			end = e
		}
	}
	if worst > time.Second {
		t.Errorf("a step reached the reader %v after it was logged", worst)
	}
	t.Logf("slowest step to reach the reader: %v; acks %v; saved at %d; paused at %d", worst, acks, savedAt, pausedAt)
	if lastStep != 60 || end.Status != "completed" {
		t.Errorf("the run ended at step %d with %+v", lastStep, end)
	}
	if strings.Join(acks, " ") != "save pause resume" {
		t.Errorf("acknowledgements %v, want save pause resume", acks)
	}
	if klAlert.Rule != "kl_high" || klAlert.Step != plan.KLSpike+1 {
		t.Errorf("KL alert %+v, want kl_high at step %d", klAlert, plan.KLSpike+1)
	}
	// The save was asked after step 10 was read: the trainer saved a few steps later (the
	// reader polls every 250 ms, a step takes 40 ms), at the step it acknowledged, off its
	// schedule (save_steps is 0: only the end saves otherwise).
	if savedAt < 10 || savedAt > 40 || checkpoints[savedAt] == "" {
		t.Errorf("save acknowledged at step %d; checkpoints %v", savedAt, checkpoints)
	}
	if _, err := os.Stat(filepath.Join(outDir, "checkpoint-"+itoa(savedAt), "trainer_state.json")); err != nil {
		t.Errorf("the asked-for checkpoint is not on disk: %v", err)
	}
	if pausedAt < 20 || pausedAt > 50 {
		t.Errorf("paused at step %d, asked after step 20", pausedAt)
	}
	if samples != 60 {
		t.Errorf("%d samples events, want one a step", samples)
	}
	printed, _ := io.ReadAll(stdout)
	if err := cmd.Wait(); err != nil || !strings.Contains(string(printed), "saved "+itoa(savedAt)+"\n") || !strings.Contains(string(printed), "ended at 60") {
		t.Errorf("trainer: %v\n%s", err, printed)
	}
}

// TestCallbackStopOn: with stop_on = ["kl_spike"] in the callback's configuration, the guard
// of a follower (watch's, control.Guard) asks for a stop at the KL alert; the trainer saves,
// stops, and its run_end names the rule and the alert's step.
func TestCallbackStopOn(t *testing.T) {
	runDir, outDir, cmd, stdout := trainer(t, "0.06", "--stop-on", "kl_spike")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := follow(t, ctx, runDir)
	var end, ack events.Event
	last := 0
	for e := range control.Guard(runDir, nil, run.Stream(ctx, runs.Options{Follow: true, Poll: 250 * time.Millisecond})) {
		switch {
		case e.Type == events.Step:
			last = e.Step
		case e.Type == events.Log && e.Control == "stop":
			ack = e
		case e.Type == events.RunEnd:
			end = e
		}
	}
	want := "stop_on kl_spike: kl_high on kl at step 33"
	if end.Status != "stopped" || end.Reason != want || !strings.Contains(ack.Message, want) {
		t.Fatalf("run_end %+v, acknowledgement %+v; want stopped: %s", end, ack, want)
	}
	if last < 33 || last >= 60 || end.Step != last || ack.Step != last {
		t.Errorf("stopped at step %d (last logged %d, acknowledged %d)", end.Step, last, ack.Step)
	}
	if _, err := os.Stat(filepath.Join(outDir, "checkpoint-"+itoa(end.Step))); err != nil {
		t.Errorf("no checkpoint of the stop's step: %v", err)
	}
	st, _ := control.Read(runDir)
	if st.Stops != 1 || st.By != "stop_on" {
		t.Errorf("control file %+v", st)
	}
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	cmd.Wait()
	if got := strings.Join(lines, "\n"); !strings.Contains(got, "saved "+itoa(end.Step)+"\nended at "+itoa(end.Step)) {
		t.Errorf("trainer printed:\n%s", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCallbackNeverRaises: a callback that cannot write (its run folder is a file) warns once
// and the trainer runs to its end; with several processes training (WORLD_SIZE=2) it writes
// its events but applies no request, saying so.
func TestCallbackNeverRaises(t *testing.T) {
	py := testref.Python3(t)
	tmp := t.TempDir()
	hist := filepath.Join(tmp, "trainer_state.json")
	if err := runstest.TrainerState(hist, plan, plan.Steps); err != nil {
		t.Fatal(err)
	}
	blocked := filepath.Join(tmp, "a-file")
	os.WriteFile(blocked, []byte("x"), 0o644)
	out, err := exec.Command(py, filepath.Join("testdata", "standin_trainer.py"), "--history", hist, "--run-dir", blocked,
		"--output-dir", filepath.Join(tmp, "out"), "--step-seconds", "0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ended at 60") || strings.Count(string(out), "RuntimeWarning: RLHFStationCallback stopped writing") != 1 {
		t.Errorf("%v\n%s", err, out)
	}

	runDir := filepath.Join(tmp, "ddp")
	os.MkdirAll(runDir, 0o755)
	control.Send(runDir, control.Pause, "test", "") // before the run: counts as handled
	cmd := exec.Command(py, filepath.Join("testdata", "standin_trainer.py"), "--history", hist, "--run-dir", runDir,
		"--output-dir", filepath.Join(tmp, "out2"), "--step-seconds", "0.02")
	cmd.Env = append(os.Environ(), "WORLD_SIZE=2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	control.Send(runDir, control.Stop, "test", "")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	evs, err := events.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1]
	if end.Type != events.RunEnd || end.Status != "completed" || end.Step != 60 {
		t.Errorf("run_end %+v", end)
	}
	warned := false
	for _, e := range evs {
		warned = warned || (e.Type == events.Log && strings.Contains(e.Message, "2 processes train without torch.distributed: pause, save and stop from rlhfstation are not applied"))
		if e.Control != "" {
			t.Errorf("a request was applied: %+v", e)
		}
	}
	if !warned {
		t.Error("no warning that steering is off")
	}
}

// TestCallbackDistributed: two processes joined by torch.distributed (gloo), with the
// all-reduce of DDP at every step. The main process reads the control file and broadcasts it,
// so both act at the same step: both hold on a pause, a save asked while paused is written and
// the trainer holds again, and a stop ends both at the same step (one that stopped alone would
// hang in the all-reduce).
func TestCallbackDistributed(t *testing.T) {
	py := testref.Python(t)
	tmp := t.TempDir()
	hist := filepath.Join(tmp, "trainer_state.json")
	if err := runstest.TrainerState(hist, plan, plan.Steps); err != nil {
		t.Fatal(err)
	}
	runDir, outDir := filepath.Join(tmp, "run"), filepath.Join(tmp, "out")
	cmd := exec.Command(py, filepath.Join("testdata", "standin_trainer.py"), "--history", hist, "--run-dir", runDir,
		"--output-dir", outDir, "--step-seconds", "0.05", "--world", "2")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := follow(t, ctx, runDir)
	var acks []string
	var end events.Event
	var saved []int
	for e := range run.Stream(ctx, runs.Options{Follow: true, Poll: 100 * time.Millisecond}) {
		switch e.Type {
		case events.Step:
			if e.Step == 5 && len(acks) == 0 {
				control.Send(runDir, control.Pause, "test", "")
			}
		case events.Checkpoint:
			saved = append(saved, e.Step)
		case events.RunEnd:
			end = e
		case events.Log:
			if e.Control == "" {
				continue
			}
			acks = append(acks, e.Control)
			switch strings.Join(acks, " ") {
			case "pause":
				control.Send(runDir, control.Save, "test", "")
			case "pause save pause":
				control.Send(runDir, control.Stop, "test", "")
			}
		}
	}
	cmd.Wait()
	if strings.Join(acks, " ") != "pause save pause stop" || end.Status != "stopped" || end.Step < 5 || end.Step >= 60 {
		t.Fatalf("acknowledgements %v, run_end %+v\n%s", acks, end, out.String())
	}
	want := "rank 0 ended at " + itoa(end.Step)
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "rank 1 ended at "+itoa(end.Step)) {
		t.Errorf("the ranks did not end together at step %d:\n%s", end.Step, out.String())
	}
	// Paused after the step: the save asked while paused and the stop's save are of that step.
	if len(saved) != 1 || saved[0] != end.Step {
		t.Errorf("checkpoints %v, want one of step %d", saved, end.Step)
	}
}
