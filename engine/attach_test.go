package engine

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/model"
)

// A trained adapter saved by a run and attached to a fresh model gives that run's policy: the
// same log-probs as the engine's model with its adapters on, and different ones from the base.
func TestAttachAdapterReproducesPolicy(t *testing.T) {
	c := tinyConfig(t, "story", 2)
	c.Quant.Type = "none" // compare against the exact base
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	seq := [][]int{{5, 9, 17, 33, 12, 8, 40}}
	want, err := e.model.LogProbs(seq, 1, model.AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := model.Load(tinyModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := fresh.LogProbs(seq, 1, model.AdaptersOn)
	if _, err := AttachAdapter(fresh, filepath.Join(e.RunDir(), "checkpoints", checkpoint.Name(2))); err != nil {
		t.Fatal(err)
	}
	got, _ := fresh.LogProbs(seq, 1, model.AdaptersOn)
	moved := false
	for i := range want[0] {
		if d := got[0][i] - want[0][i]; d > 1e-5 || d < -1e-5 {
			t.Errorf("logp[%d] = %g with the attached adapter, %g in the run", i, got[0][i], want[0][i])
		}
		if d := base[0][i] - want[0][i]; d > 1e-6 || d < -1e-6 {
			moved = true
		}
	}
	if !moved {
		t.Error("the trained adapter did not change the model: the test cannot tell")
	}
	if _, err := AttachAdapter(fresh, t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a checkpoint") {
		t.Errorf("empty folder: %v", err)
	}
}

// An adapter holding a NaN is refused when attached (score, generate, eval), naming the
// tensor, instead of producing empty output.
func TestAttachRefusesANonFiniteAdapter(t *testing.T) {
	c := tinyConfig(t, "story", 1)
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.RunDir(), "checkpoints", checkpoint.Name(1))
	cfg, ts, err := checkpoint.LoadAdapter(dir)
	if err != nil {
		t.Fatal(err)
	}
	ts[3].Data[2] = float32(math.Inf(-1))
	bad := t.TempDir()
	if err := checkpoint.SaveAdapter(bad, cfg, ts); err != nil {
		t.Fatal(err)
	}
	fresh, err := model.Load(tinyModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = AttachAdapter(fresh, bad)
	if err == nil || !strings.Contains(err.Error(), ts[3].Name) || !strings.Contains(err.Error(), "-Inf at index 2") {
		t.Fatalf("non-finite adapter: %v", err)
	}
}
