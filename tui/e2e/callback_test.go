package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs/runstest"
	"rlhfstation/internal/testref"
)

// TestWatchCallbackRunInTmux: `rlhfstation watch` on the run folder that
// examples/rlhfstation_callback.py writes while a (stand-in) TRL trainer runs: space asks a
// pause, the trainer acknowledges it and holds (the step counter stops), space resumes it,
// and q then y stops it after a save; the trainer prints where it ended.
func TestWatchCallbackRunInTmux(t *testing.T) {
	bin := build(t)
	py := testref.Python3(t)
	tmp := t.TempDir()
	hist := filepath.Join(tmp, "trainer_state.json")
	if err := runstest.TrainerState(hist, runstest.Plan{Steps: 200, Seed: 5}, 200); err != nil {
		t.Fatal(err)
	}
	runDir, outDir := filepath.Join(tmp, "runs", "my-grpo"), filepath.Join(tmp, "out")
	trainer := exec.Command(py, filepath.Join(testref.RepoRoot(), "engine", "control", "testdata", "standin_trainer.py"),
		"--history", hist, "--run-dir", runDir, "--output-dir", outDir, "--max-steps", "200", "--step-seconds", "0.2",
		"--rlhfstation", bin)
	stdout, _ := trainer.StdoutPipe()
	trainer.Stderr = os.Stderr
	if err := trainer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trainer.Process.Kill(); trainer.Wait() })
	deadline := time.Now().Add(screenWait)
	for _, err := os.Stat(filepath.Join(runDir, "events.jsonl")); err != nil; _, err = os.Stat(filepath.Join(runDir, "events.jsonl")) {
		if time.Now().After(deadline) {
			t.Fatal("the callback wrote no events.jsonl")
		}
		time.Sleep(50 * time.Millisecond)
	}

	tm := newTmux(t, 120, 36, fmt.Sprintf("NO_COLOR=1 %s watch %s; echo EXIT=$?; sleep 60", bin, runDir))
	tm.waitFor("● running", "/200")
	tm.keys("Space")
	paused := tm.waitFor("paused after step", "❚❚ paused")
	t.Logf("after space:\n%s", paused)
	held := stepOf(t, paused)
	time.Sleep(time.Second)
	if now := stepOf(t, tm.screen(false)); now != held {
		t.Errorf("the trainer went on while paused: step %d, then %d", held, now)
	}
	tm.keys("Space")
	tm.waitFor("resumed after step", "● running")
	tm.waitGone(fmt.Sprintf("step %d/200", held))
	tm.keys("q")
	tm.waitFor("Stop the trainer?")
	tm.keys("y")
	tm.waitFor("EXIT=0")
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	trainer.Wait()
	last := lines[len(lines)-1]
	var end int
	if _, err := fmt.Sscanf(last, "ended at %d", &end); err != nil || end >= 200 || end <= held ||
		!strings.Contains(strings.Join(lines, "\n"), fmt.Sprintf("saved %d", end)) {
		t.Errorf("the trainer printed %q", lines)
	}
}

var stepRe = regexp.MustCompile(`step (\d+)/200`)

func stepOf(t *testing.T, screen string) int {
	t.Helper()
	m := stepRe.FindStringSubmatch(screen)
	if m == nil {
		t.Fatalf("no step counter on screen:\n%s", screen)
	}
	return atoi(m[1])
}

// TestCallbackGuardStopsOnAlert: with stop_on=["kl_spike"] and the binary on PATH, the callback
// starts `rlhfstation watch --summary` as its guard; with no dashboard open, the KL spike stops
// the trainer after a save, and each checkpoint event carries the health `inspect` reported.
func TestCallbackGuardStopsOnAlert(t *testing.T) {
	bin := build(t)
	py := testref.Python3(t)
	tmp := t.TempDir()
	hist, adapter := filepath.Join(tmp, "trainer_state.json"), filepath.Join(tmp, "adapter")
	if err := runstest.TrainerState(hist, runstest.Plan{Steps: 60, Seed: 3, KLSpike: 32}, 60); err != nil {
		t.Fatal(err)
	}
	if err := runstest.Adapter(adapter, runstest.AdapterOptions{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(tmp, "runs", "my-grpo")
	out, err := exec.Command(py, filepath.Join(testref.RepoRoot(), "engine", "control", "testdata", "standin_trainer.py"),
		"--history", hist, "--run-dir", runDir, "--output-dir", filepath.Join(tmp, "out"), "--max-steps", "60",
		"--save-steps", "10", "--step-seconds", "0.1", "--rlhfstation", bin, "--adapter", adapter, "--stop-on", "kl_spike").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	evs, err := events.ReadFile(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	end := evs[len(evs)-1]
	if end.Type != events.RunEnd || end.Status != "stopped" || end.Reason != "stop_on kl_spike: kl_high on kl at step 33" || end.Step >= 60 {
		t.Fatalf("run_end %+v\ntrainer: %s", end, out)
	}
	var health []float64
	for _, e := range evs {
		if e.Type == events.Checkpoint {
			if e.Health == nil || !(e.Health.Score > 0 && e.Health.Score <= 1) {
				t.Errorf("checkpoint of step %d without health: %+v", e.Step, e.Health)
				continue
			}
			health = append(health, e.Health.Score)
		}
	}
	if len(health) != 4 { // steps 10, 20, 30 and the stop's
		t.Errorf("checkpoint health %v, want 4 checkpoints\n%s", health, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("ended at %d", end.Step)) {
		t.Errorf("trainer printed %s", out)
	}
}
