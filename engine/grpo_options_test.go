package engine

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/grpo"
)

// reward_weights must match the preset's rewards: refused before the model is read.
func TestNewRefusesGRPOOptions(t *testing.T) {
	for _, tc := range []struct {
		set  func(c *config.Config)
		want string
	}{
		{func(c *config.Config) { c.RewardWeights = []float64{1, 2} }, "reward_weights has 2 values but preset story has 1 rewards (ppl)"},
	} {
		c := tinyConfig(t, "story", 1)
		tc.set(c)
		_, err := New(c, Options{ModelDir: t.TempDir(), ModelName: "none", Prompts: prompts(t, "story")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// TestAdaptiveEntropyRun: with use_adaptive_entropy each step logs the controller's
// coefficient after observing the step's entropy (grpo.AdaptiveEntropy, checked against TRL's
// controller in engine/grpo), the bonus is applied from the second step on (the first has no
// previous entropy), and a run resumed from a checkpoint carries the controller on exactly.
func TestAdaptiveEntropyRun(t *testing.T) {
	c := tinyConfig(t, "story", 4)
	c.UseAdaptiveEntropy, c.EntropyCoef, c.EntropyTarget, c.EntropyCoefDelta, c.EntropyCoefMax = true, 0.02, 100, 0.01, 0.045
	evs, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	m := stepMetrics(evs)
	ctrl := grpo.AdaptiveEntropy{Coef: c.EntropyCoef, Target: c.EntropyTarget, Max: c.EntropyCoefMax, Delta: c.EntropyCoefDelta, Last: math.Inf(1)}
	for s := 1; s <= 4; s++ {
		// policy_loss is the loss without the bonus: coef·H̄ with the coefficient applied (dapo,
		// one micro-batch a step: H̄ is the step's entropy), none on the first step
		if got, want := m[s]["policy_loss"]-m[s]["loss"], ctrl.Applied()*m[s]["entropy"]; math.Abs(got-want) > 1e-9 {
			t.Fatalf("step %d: policy_loss − loss = %v, want the applied bonus %v", s, got, want)
		}
		ctrl.Observe(m[s]["entropy"])
		if got, ok := m[s]["entropy_coef"]; !ok || math.Abs(got-ctrl.Coef) > 1e-12 {
			t.Fatalf("step %d: entropy_coef %v (logged %v), want %v", s, got, ok, ctrl.Coef)
		}
	}
	if m[4]["entropy_coef"] != 0.045 {
		t.Fatalf("entropy_coef %v at step 4, want the maximum 0.045", m[4]["entropy_coef"])
	}
	// Resume from step 2's checkpoint: steps 3 and 4 again, the same to the last bit.
	if err := os.RemoveAll(filepath.Join(e.RunDir(), "checkpoints", "step-000004")); err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.Load(filepath.Join(e.RunDir(), "checkpoints", "step-000002"))
	if err != nil {
		t.Fatal(err)
	}
	if st.State.EntropyCoef == nil || *st.State.EntropyCoef != m[2]["entropy_coef"] || st.State.EntropyLast == nil || *st.State.EntropyLast != m[2]["entropy"] {
		t.Fatalf("trainer_state.json holds entropy_coef %v, entropy_last %v; want %v and %v", st.State.EntropyCoef, st.State.EntropyLast, m[2]["entropy_coef"], m[2]["entropy"])
	}
	more := tinyConfig(t, "story", 4)
	more.UseAdaptiveEntropy, more.EntropyCoef, more.EntropyTarget, more.EntropyCoefDelta, more.EntropyCoefMax = true, 0.02, 100, 0.01, 0.045
	more.OutputDir = c.OutputDir
	evs2, _, err := run(t, more, e.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	m2 := stepMetrics(evs2)
	for s := 3; s <= 4; s++ {
		if !reflect.DeepEqual(m[s], m2[s]) {
			t.Errorf("step %d differs after resume:\nstraight %v\nresumed  %v", s, m[s], m2[s])
		}
	}
}
