package engine

import (
	"math"
	"testing"

	"rlhfstation/engine/events"
)

// With eval_steps 2, steps 2 and 4 carry the eval/* metrics (greedy and sampled correctness
// against the held-out prompts' answers, the preset's rewards), steps 1 and 3 none.
func TestEvalDuringTraining(t *testing.T) {
	c := tinyConfig(t, "math", 4)
	c.EvalSteps, c.Eval.Holdout = 2, 0.4
	evs, e, err := run(t, c, "", "math")
	if err != nil {
		t.Fatal(err)
	}
	if len(e.evalPrompts) != 7 || len(e.prompts) != 9 {
		t.Fatalf("held out %d of 16 prompts, training on %d", len(e.evalPrompts), len(e.prompts))
	}
	for _, ev := range evs {
		if ev.Type != events.Step {
			continue
		}
		want := ev.Step%2 == 0
		for _, k := range []string{"eval/reward", "eval/correct_sampled", "eval/correct_greedy", "eval/greedy/reward",
			"eval/rewards/correctness/mean", "eval/greedy/rewards/correctness/mean", "eval/completions/mean_length"} {
			v, ok := ev.Metrics[k]
			if ok != want {
				t.Errorf("step %d: %s present %v, want %v", ev.Step, k, ok, want)
			}
			if ok && (math.IsNaN(v) || (k != "eval/completions/mean_length" && (v < -10 || v > 10))) {
				t.Errorf("step %d: %s = %v", ev.Step, k, v)
			}
		}
		if want {
			for _, k := range []string{"eval/correct_sampled", "eval/correct_greedy"} {
				if v := ev.Metrics[k]; v < 0 || v > 1 {
					t.Errorf("step %d: %s = %v is not a share", ev.Step, k, v)
				}
			}
		}
	}
}

// eval_steps on the user's prompts without [eval] data or holdout is refused before loading.
func TestEvalNeedsPrompts(t *testing.T) {
	c := tinyConfig(t, "math", 2)
	c.EvalSteps = 1
	_, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "math")})
	if err == nil {
		t.Fatal("evaluation without prompts accepted")
	}
	if _, ok := err.(*ConfigError); !ok {
		t.Errorf("not a configuration error: %v", err)
	}
}
