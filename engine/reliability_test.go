package engine

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/internal/runlock"
)

// A run folder has one writer: resuming a run another engine still holds is refused at once,
// naming the holder, and accepted once that run has ended.
func TestResumeOfARunBeingWrittenIsRefused(t *testing.T) {
	c := tinyConfig(t, "story", 2)
	first, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	second := tinyConfig(t, "story", 4)
	_, err = New(second, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story"), Resume: first.RunDir()})
	if !errors.Is(err, runlock.ErrHeld) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("resume while the run is open: %v, want a refusal naming this process", err)
	}
	drain(t, first)
	evs, _, err := run(t, second, first.RunDir(), "story")
	if err != nil {
		t.Fatalf("resume after the run ended: %v", err)
	}
	if n := len(stepMetrics(evs)); n != 2 {
		t.Errorf("resumed run made %d steps, want 2", n)
	}
}

func drain(t *testing.T, e *Engine) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Run(t.Context()) }()
	for range e.Events() {
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// --resume RUN --steps N past the plan keeps the learning-rate schedule: the rate goes on
// from its last value instead of jumping to a re-planned one, and the log lists the change.
func TestExtendingARunKeepsItsLearningRate(t *testing.T) {
	c := tinyConfig(t, "story", 4)
	c.WarmupRatio = 0.25
	evsA, eA, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	more := tinyConfig(t, "story", 8)
	more.WarmupRatio = 0.25
	evsB, _, err := run(t, more, eA.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	a, b := stepMetrics(evsA), stepMetrics(evsB)
	last := a[4]["learning_rate"]
	if want := c.LearningRate / 3; abs(last-want) > 1e-12 {
		t.Fatalf("step 4 rate %g, want %g (linear decay after one warm-up step)", last, want)
	}
	for s := 5; s <= 8; s++ {
		if got := b[s]["learning_rate"]; got != last {
			t.Errorf("step %d rate %g, want %g: the rate must continue from step 4", s, got, last)
		}
	}
	var listed bool
	for _, ev := range evsB {
		if ev.Type == events.Log && strings.Contains(ev.Message, "max_steps: 4 → 8") {
			listed = true
		}
	}
	if !listed {
		t.Error("no log line lists max_steps: 4 → 8")
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A resume removes what a save killed half way left behind, and refuses a trainer state no
// run writes (a negative global step) by falling back to the checkpoint before it.
func TestResumeCleansLeftoversAndRefusesABadTrainerState(t *testing.T) {
	c := tinyConfig(t, "story", 4)
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	ckpts := filepath.Join(e.RunDir(), "checkpoints")
	junk := filepath.Join(ckpts, ".step-000005.tmp-123")
	if err := os.MkdirAll(junk, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(ckpts, "step-000004", checkpoint.TrainerStateFile)
	b, _ := os.ReadFile(state)
	os.WriteFile(state, []byte(strings.Replace(string(b), `"global_step": 4`, `"global_step": -5`, 1)), 0o644)
	more := tinyConfig(t, "story", 6)
	evs, _, err := run(t, more, e.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(junk); !os.IsNotExist(err) {
		t.Error("the leftover temporary checkpoint folder survived the resume")
	}
	steps := stepMetrics(evs)
	if _, ok := steps[3]; !ok || len(steps) != 4 {
		t.Errorf("resumed steps %v: want 3..6, from step-000002 (step-000004's state is refused)", keysOf(steps))
	}
	var named bool
	for _, ev := range evs {
		named = named || (ev.Type == events.Log && strings.Contains(ev.Message, "global_step -5"))
	}
	if !named {
		t.Error("no log line names the refused global_step -5")
	}
}

func keysOf(m map[int]events.Metrics) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A full disk stops the run: on a 2 MB file system that holds two checkpoints, the third and
// fourth saves fail (each an anomaly event), the run ends with exit status 1's error naming
// the last good checkpoint, and no temporary folder is left.
func TestFullDiskStopsTheRunAfterTwoFailedSaves(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "disk")
	os.MkdirAll(disk, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 2 MB tmpfs here (%v: %s)", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(disk, syscall.MNT_DETACH) })
	c := tinyConfig(t, "story", 10)
	c.OutputDir = disk
	c.SaveSteps = 1
	c.LoRA.R, c.LoRA.Alpha = 64, 64 // about 850 kB a checkpoint: two fit, a third does not
	evs, e, err := run(t, c, "", "story")
	if err == nil || !strings.Contains(err.Error(), "2 checkpoint saves failed in a row") || !strings.Contains(err.Error(), "step-000002") {
		t.Fatalf("run on a full disk returned %v", err)
	}
	failed := 0
	var end *events.Event
	for i, ev := range evs {
		if ev.Type == events.Anomaly && ev.Rule == "checkpoint_failed" {
			failed++
		}
		if ev.Type == events.RunEnd {
			end = &evs[i]
		}
	}
	if failed != 2 || end == nil || end.Status != "failed" || filepath.Base(end.Path) != "step-000002" {
		t.Fatalf("%d checkpoint_failed anomalies, run_end %+v", failed, end)
	}
	if n := len(stepMetrics(evs)); n != 4 {
		t.Errorf("the run made %d steps, want 4 (it stops at the second failed save)", n)
	}
	list, _ := checkpoint.List(filepath.Join(e.RunDir(), "checkpoints"))
	if len(list) != 2 {
		t.Errorf("checkpoints %v, want step-000001 and step-000002", list)
	}
	for _, l := range list {
		if _, err := checkpoint.Load(l.Path); err != nil {
			t.Errorf("good checkpoint does not load: %v", err)
		}
	}
	hidden, _ := filepath.Glob(filepath.Join(e.RunDir(), "checkpoints", ".step-*"))
	if len(hidden) != 0 {
		t.Errorf("temporary folders left: %v", hidden)
	}
}
