package engine

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"rlhfstation/engine/config"
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

// num_train_epochs sets the run's length when max_steps is not set: half an epoch of 16
// prompts at 2 a step is 4 steps. cosine_with_min_lr ends at its floor, not at 0.
func TestEpochsAndMinLRSchedule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.toml")
	err := os.WriteFile(path, []byte(`preset = "math"
device = "cpu"
run_name = "run"
per_device_train_batch_size = 2
num_generations = 4
max_completion_length = 12
learning_rate = 1e-3
num_train_epochs = 0.5
lr_scheduler_type = "cosine_with_min_lr"
lr_scheduler_kwargs = { min_lr_rate = 0.25 }
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c.OutputDir = t.TempDir()
	evs, _, err := run(t, c, "", "math")
	if err != nil {
		t.Fatal(err)
	}
	var lrs []float64
	for _, ev := range evs {
		if ev.Type == events.Step {
			lrs = append(lrs, ev.Metrics["learning_rate"])
		}
	}
	if len(lrs) != 4 {
		t.Fatalf("%d steps, want 4 (half an epoch of 16 prompts, 2 a step)", len(lrs))
	}
	// transformers: 0.5·(1 + cos(π·progress))·(1 − 0.25) + 0.25, progress = step/4.
	for s, lr := range lrs {
		want := c.LearningRate * (0.5*(1+math.Cos(math.Pi*float64(s)/4))*0.75 + 0.25)
		if math.Abs(lr-want) > 1e-9*want {
			t.Errorf("step %d: learning rate %g, want %g", s+1, lr, want)
		}
	}
}
