package engine

import (
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
)

// TestDynamicSampling runs filter_groups (the group selection is checked against the
// reference in engine/grpo): with the math preset's continuous rewards every group varies and
// one round fills the batch; with correctness alone (a random model is never right) no group
// varies, so max_num_gen_batches rounds are drawn, the batch is filled with constant groups,
// and that is logged.
func TestDynamicSampling(t *testing.T) {
	for _, c := range []struct {
		name    string
		weights []float64
	}{
		{"the preset's rewards", nil},
		{"correctness alone", []float64{0, 0, 1}}, // a random model is never right: no group varies
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := tinyConfig(t, "math", 2)
			cfg.SaveSteps = 0
			cfg.FilterGroups, cfg.MaxNumGenBatches = true, 3
			cfg.RewardWeights = c.weights
			evs, e, err := runWith(t, cfg, "", prompts(t, "math"))
			if err != nil {
				t.Fatal(err)
			}
			var rounds, logged, filled float64
			for _, ev := range evs {
				switch ev.Type {
				case events.Step:
					m := ev.Metrics
					r, f := m["dynamic_sampling/gen_batches"], m["dynamic_sampling/filled_groups"]
					if r < 1 || r > 3 || (f > 0 && r != 3) || m["frac_reward_zero_std"] != f/2 {
						t.Errorf("step %d: gen_batches %v, filled_groups %v, frac_reward_zero_std %v", ev.Step, r, f, m["frac_reward_zero_std"])
					}
					rounds += r
					filled += f
				case events.Log:
					if ev.Level == "warning" && strings.HasPrefix(ev.Message, "dynamic sampling: ") {
						logged++
					}
				}
			}
			if c.weights != nil && (filled != 4 || rounds != 6) {
				t.Errorf("correctness alone: %v rounds and %v groups filled over 2 steps, want 6 and 4", rounds, filled)
			}
			if (filled > 0) != (logged > 0) {
				t.Errorf("%v groups filled, %v shortfalls logged", filled, logged)
			}
			// The last batch trained on: per_device_train_batch_size groups of G.
			b := e.gen.batches[0]
			if len(b.rollouts) != cfg.PerDeviceTrainBatchSize*cfg.NumGenerations {
				t.Fatalf("a micro-batch of %d completions", len(b.rollouts))
			}
			if c.weights != nil && grpo.Varies(b.rewards[:4]) {
				t.Errorf("correctness alone, yet the rewards vary: %v", b.rewards)
			}
			// Each round draws per_device_train_batch_size prompts.
			if want := int(rounds) * 2; e.cursor != want {
				t.Errorf("%d prompts drawn, want %d", e.cursor, want)
			}
		})
	}
}
