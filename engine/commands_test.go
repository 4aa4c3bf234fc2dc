package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/internal/testref"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// lengthReward is a command reward in Python: shorter completions score higher; it logs the
// step and how many completions came with the "level" column set to "hard", and from the step
// in the file named by its first argument on (if any) it crashes every time.
const lengthReward = `
import json, os, sys
crash_from = None
if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
    crash_from = int(open(sys.argv[1]).read())
for line in sys.stdin:
    req = json.loads(line)
    if crash_from is not None and req["step"] >= crash_from:
        print("Traceback (most recent call last):", file=sys.stderr)
        print("ValueError: cannot score step %d" % req["step"], file=sys.stderr)
        sys.exit(3)
    print("scoring step", req["step"], file=sys.stderr)
    rewards = [-len(c) / 10.0 for c in req["completions"]]
    hard = sum(1 for v in req.get("level", []) if v == "hard")
    ids = all(len(i) >= 1 for i in req["completion_ids"])
    print(json.dumps({"rewards": rewards, "metrics": {"step": req["step"], "hard": hard, "ids": int(ids)}}), flush=True)
`

func commandConfig(t *testing.T, steps int, crashFile string) *config.Config {
	t.Helper()
	py := testref.Python3(t)
	script := filepath.Join(t.TempDir(), "length.py")
	if err := os.WriteFile(script, []byte(lengthReward), 0o644); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, "story", steps)
	c.SaveSteps = 1
	c.Rewards = []presets.CommandReward{{Name: "short", Command: []string{py, script, crashFile}, Weight: 1, Timeout: rewards.DefaultCommandTimeout}}
	return c
}

func hardPrompts(t *testing.T) []data.Example {
	ps := prompts(t, "story")
	for i := range ps {
		if i%2 == 0 {
			ps[i].Extra = map[string]any{"level": "hard"}
		}
	}
	return ps
}

func runWith(t *testing.T, c *config.Config, resume string, ps []data.Example) ([]events.Event, *Engine, error) {
	t.Helper()
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: ps, Resume: resume})
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	for ev := range e.Events() {
		evs = append(evs, ev)
	}
	return evs, e, <-done
}

func TestCommandRewardInARun(t *testing.T) {
	c := commandConfig(t, 2, "")
	evs, e, err := runWith(t, c, "", hardPrompts(t))
	if err != nil {
		t.Fatal(err)
	}
	for step, m := range stepMetrics(evs) {
		if m["rewards/short/step"] != float64(step) || m["rewards/short/ids"] != 1 || m["rewards/short/mean"] >= 0 || m["rewards/ppl/mean"] != m["rewards/ppl/mean"] {
			t.Errorf("step %d metrics: %v", step, m)
		}
		// Two prompts a step, four completions each: the hard ones are those of even prompts.
		if h := m["rewards/short/hard"]; h != 0 && h != 4 && h != 8 {
			t.Errorf("step %d: %v completions with the hard column", step, h)
		}
	}
	for _, ev := range evs {
		if ev.Type == events.Samples {
			for _, s := range ev.Samples {
				// Invalid UTF-8 reaches the command as U+FFFD, one per byte.
				want := -float64(utf8.RuneCountInString(s.Completion)) / 10
				if r, ok := s.Rewards["short"]; !ok || r != want {
					t.Errorf("sample reward %v (present %v), want %v for %q", r, ok, want, s.Completion)
				}
			}
		}
		if ev.Type == events.Anomaly && ev.Rule == "reward_command" {
			t.Errorf("unexpected anomaly %s", ev.Message)
		}
	}
	log, err := os.ReadFile(filepath.Join(e.RunDir(), "rewards", "short.stderr"))
	if err != nil || !strings.Contains(string(log), "scoring step 2") {
		t.Errorf("stderr copy %q, %v", log, err)
	}
	cfg, err := config.Load(filepath.Join(e.RunDir(), "config.toml"))
	if err != nil || len(cfg.Rewards) != 1 || cfg.Rewards[0].Name != "short" {
		t.Errorf("config.toml rewards %+v, %v", cfg, err)
	}
}

// A command that fails twice in a row stops the run after saving its last complete step; a
// fixed command then resumes it.
func TestCommandFailingTwiceStopsWithACheckpoint(t *testing.T) {
	crash := filepath.Join(t.TempDir(), "crash-from")
	if err := os.WriteFile(crash, []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := commandConfig(t, 4, crash)
	evs, e, err := runWith(t, c, "", hardPrompts(t))
	var stop *RewardStopError
	var ce *rewards.CommandError
	if !errors.As(err, &stop) || !errors.As(err, &ce) {
		t.Fatalf("run returned %v, want a *RewardStopError", err)
	}
	ckpt := filepath.Join(e.RunDir(), "checkpoints", "step-000002")
	if stop.Checkpoint != ckpt || !strings.Contains(err.Error(), "--resume "+e.RunDir()) || !strings.Contains(err.Error(), "failed twice") {
		t.Errorf("error %q, checkpoint %q", err, stop.Checkpoint)
	}
	var anomalies []events.Event
	var end events.Event
	for _, ev := range evs {
		switch {
		case ev.Type == events.Anomaly && ev.Rule == "reward_command":
			anomalies = append(anomalies, ev)
		case ev.Type == events.RunEnd:
			end = ev
		case ev.Type == events.Step && ev.Step > 2:
			t.Errorf("step %d completed", ev.Step)
		}
	}
	if len(anomalies) != 2 || anomalies[0].Severity != events.Warning || anomalies[1].Severity != events.Critical ||
		!strings.Contains(anomalies[1].Message, "ValueError: cannot score step 3") || anomalies[0].Step != 3 || !strings.HasPrefix(anomalies[1].Message, "reward short: exited with status 3") {
		t.Fatalf("anomalies %+v", anomalies)
	}
	if end.Status != "failed" || end.Path != ckpt || end.Reason != err.Error() {
		t.Errorf("run_end %+v", end)
	}
	if _, err := checkpoint.Load(ckpt); err != nil {
		t.Fatal(err)
	}
	// The events on disk say the same.
	back, _ := events.ReadFile(filepath.Join(e.RunDir(), "events.jsonl"))
	if n := len(back); n == 0 || back[n-1].Type != events.RunEnd || back[n-1].Status != "failed" {
		t.Errorf("events.jsonl ends with %+v", back[n-1])
	}

	// Fixed, the command lets the run continue from step 2 to its end.
	os.Remove(crash)
	more := commandConfig(t, 4, crash)
	more.OutputDir = c.OutputDir
	evs, _, err = runWith(t, more, e.RunDir(), hardPrompts(t))
	if err != nil {
		t.Fatal(err)
	}
	m := stepMetrics(evs)
	if len(m) != 2 || m[3] == nil || m[4] == nil {
		t.Errorf("resumed run's steps: %v", m)
	}
}

func TestCommandRewardSetUpErrors(t *testing.T) {
	c := commandConfig(t, 1, "")
	c.Rewards[0].Command = []string{filepath.Join(t.TempDir(), "no-such-reward")}
	if _, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")}); err == nil || !strings.Contains(err.Error(), "no-such-reward") {
		t.Errorf("missing program: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.OutputDir, "run")); !os.IsNotExist(err) {
		t.Errorf("a run folder was made for a run that could not start: %v", err)
	}
	c = commandConfig(t, 1, "")
	ps := prompts(t, "story")
	ps[1].Extra = map[string]any{"completions": "x"}
	if _, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: ps}); err == nil || !strings.Contains(err.Error(), `column "completions"`) {
		t.Errorf("reserved column: %v", err)
	}
}

// An interrupt during a reward command's batch does not wait for its reply: the run saves its
// last complete step and ends as interrupted, with no anomaly for the command.
func TestInterruptDuringACommandReward(t *testing.T) {
	py := testref.Python3(t)
	script := filepath.Join(t.TempDir(), "hang.py")
	src := "import json, sys, time\nfor line in sys.stdin:\n    req = json.loads(line)\n    if req['step'] >= 2:\n        time.sleep(600)\n    print(json.dumps({'rewards': [0.0] * len(req['completions'])}), flush=True)\n"
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c := tinyConfig(t, "story", 4)
	c.SaveSteps = 10
	c.Rewards = []presets.CommandReward{{Name: "hang", Command: []string{py, script}, Weight: 1, Timeout: rewards.DefaultCommandTimeout}}
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var evs []events.Event
	var cancelled time.Time
	for ev := range e.Events() {
		evs = append(evs, ev)
		if ev.Type == events.Step && ev.Step == 1 {
			time.Sleep(300 * time.Millisecond) // step 2's batch is with the command
			cancelled = time.Now()
			cancel()
		}
	}
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("run returned %v", err)
	}
	// Waiting for the reply would take the command's timeout (a minute).
	if d := time.Since(cancelled); d > 20*time.Second {
		t.Errorf("the interrupt waited %s", d)
	}
	for _, ev := range evs {
		if ev.Type == events.Anomaly && ev.Rule == "reward_command" {
			t.Errorf("anomaly %s", ev.Message)
		}
	}
	if _, err := checkpoint.Load(filepath.Join(e.RunDir(), "checkpoints", "step-000001")); err != nil {
		t.Errorf("no checkpoint of step 1: %v", err)
	}
}
