package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
)

func TestBatchRunsAndResumes(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := testmodel.Dir(t)
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--model", dir, "--out", out, "--steps", "3", "--batch-size", "2",
		"--num-generations", "4", "--max-completion-length", "8", "--save-steps", "2", "--run-name", "r", "--preset", "math")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"step 1/3 reward=", "step 3/3", "checkpoint ", "run r completed after 3 steps", "ntl/digit_accuracy"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	run := filepath.Join(out, "r")
	// Resume to 5 steps: steps 4 and 5 are appended to the same events.jsonl.
	code, stdout, stderr = runCaptured(t, "--batch", "--resume", run, "--steps", "5", "--model", dir)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, stdout, stderr)
	}
	evs, err := events.ReadFile(filepath.Join(run, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, e := range evs {
		if e.Type == events.Step {
			steps++
		}
	}
	if steps != 5 {
		t.Errorf("events.jsonl holds %d steps after the resume, want 5", steps)
	}
	list, _ := checkpoint.List(filepath.Join(run, "checkpoints"))
	if len(list) == 0 || list[len(list)-1].Step != 5 {
		t.Errorf("checkpoints %v", list)
	}
	// Bad configuration is a usage error naming the key and line.
	cfg := filepath.Join(t.TempDir(), "run.toml")
	os.WriteFile(cfg, []byte("max_steps = 3\nnum_generaitons = 4\n"), 0o644)
	code, _, stderr = runCaptured(t, "--batch", "--model", dir, "--config", cfg, "--out", out)
	if code != 2 || !strings.Contains(stderr, "run.toml:2") || !strings.Contains(stderr, "num_generaitons") {
		t.Errorf("bad key: exit %d, %s", code, stderr)
	}
	// --device cuda is refused clearly.
	code, _, stderr = runCaptured(t, "--batch", "--model", dir, "--device", "cuda", "--out", out)
	if code != 1 || !strings.Contains(stderr, "CUDA") {
		t.Errorf("cuda: exit %d, %s", code, stderr)
	}
}

func TestWorkstationNeedsATerminal(t *testing.T) {
	code, _, stderr := runCaptured(t)
	if code != 2 || !strings.Contains(stderr, "--batch") {
		t.Fatalf("exit %d, %s", code, stderr)
	}
}
