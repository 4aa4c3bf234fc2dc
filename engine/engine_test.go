package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
)

// tinyModelDir is a random llama with a trained tokenizer, small enough for many GRPO steps.
func tinyModelDir(t *testing.T) string { return testmodel.Dir(t) }

func tinyConfig(t *testing.T, preset string, steps int) *config.Config {
	c := config.Default()
	c.Preset = preset
	c.OutputDir = t.TempDir()
	c.RunName = "run"
	c.MaxSteps = steps
	c.PerDeviceTrainBatchSize = 2
	c.NumGenerations = 4
	c.MaxCompletionLength = 12
	c.LearningRate = 1e-3
	c.SaveSteps = 2
	c.LoggingSteps = 1
	c.Device = "cpu"
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	return c
}

func prompts(t *testing.T, domain string) []data.Example {
	ps, err := synth.Prompts(domain, 5, 16)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]data.Example, len(ps))
	for i, p := range ps {
		out[i] = data.Example{Prompt: p.Prompt, Answer: p.Answer}
		if domain == "math" {
			// Worked solutions, as math data has them: the math preset's perplexity of the
			// reasoning makes its baselines of them (bare numbers have none).
			out[i].Text = p.Reference
		}
	}
	return out
}

// run drives an engine to its end, returning its events.
func run(t *testing.T, c *config.Config, resume string, domain string) ([]events.Event, *Engine, error) {
	t.Helper()
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, domain), Resume: resume})
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

func stepMetrics(evs []events.Event) map[int]events.Metrics {
	out := map[int]events.Metrics{}
	for _, ev := range evs {
		if ev.Type == events.Step {
			m := events.Metrics{}
			for k, v := range ev.Metrics {
				if !strings.HasPrefix(k, "perf/") && !strings.HasPrefix(k, "mem/") && k != "step_time" {
					m[k] = v
				}
			}
			out[ev.Step] = m
		}
	}
	return out
}

func TestRunWritesFolderEventsAndCheckpoints(t *testing.T) {
	c := tinyConfig(t, "math", 3)
	evs, e, err := run(t, c, "", "math")
	if err != nil {
		t.Fatal(err)
	}
	types := map[events.Type]int{}
	for _, ev := range evs {
		types[ev.Type]++
	}
	if types[events.RunStart] != 1 || types[events.Step] != 3 || types[events.RunEnd] != 1 || types[events.Samples] != 3 || types[events.Checkpoint] != 2 {
		t.Fatalf("event counts %v", types)
	}
	m := stepMetrics(evs)[3]
	for _, k := range []string{"loss", "reward", "reward_std", "kl", "entropy", "grad_norm", "learning_rate", "frac_reward_zero_std",
		"clip_ratio/region_mean", "completions/mean_length", "ntl/digit_accuracy", "rewards/ppl/mean", "rewards/correctness/mean", "ppl/word"} {
		if v, ok := m[k]; !ok || math.IsNaN(v) {
			t.Errorf("metric %s = %v (present %v)", k, v, ok)
		}
	}
	if m["entropy"] <= 0 || m["completions/mean_length"] <= 0 {
		t.Errorf("entropy %v, mean length %v", m["entropy"], m["completions/mean_length"])
	}
	for _, f := range []string{"config.toml", "events.jsonl", "baselines.json", "checkpoints/step-000002/adapter_model.safetensors", "checkpoints/step-000003/trainer_state.json"} {
		if _, err := os.Stat(filepath.Join(e.RunDir(), f)); err != nil {
			t.Errorf("run folder lacks %s", f)
		}
	}
	back, err := events.ReadFile(filepath.Join(e.RunDir(), "events.jsonl"))
	if err != nil || len(back) != len(evs) {
		t.Fatalf("events.jsonl holds %d events (%v), the stream %d", len(back), err, len(evs))
	}
	tb, _ := filepath.Glob(filepath.Join(e.RunDir(), "tb", "events.out.tfevents.*"))
	if len(tb) != 1 {
		t.Fatalf("TensorBoard files: %v", tb)
	}
}

// An interrupted run resumed from its checkpoint gives exactly the metrics and adapter weights
// of a straight run.
func TestResumeIsExact(t *testing.T) {
	straight := tinyConfig(t, "story", 4)
	evsA, eA, err := run(t, straight, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	// The same run, interrupted (as by SIGINT) once step 2 is seen.
	half := tinyConfig(t, "story", 4)
	eB, err := New(half, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eB.Run(ctx) }()
	for ev := range eB.Events() {
		if ev.Type == events.Step && ev.Step == 2 {
			cancel()
		}
	}
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("interrupted run returned %v", err)
	}
	list, _ := checkpoint.List(filepath.Join(eB.RunDir(), "checkpoints"))
	from := list[len(list)-1].Step
	more := tinyConfig(t, "story", 4)
	more.OutputDir = half.OutputDir
	evsB, _, err := run(t, more, eB.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	a, b := stepMetrics(evsA), stepMetrics(evsB)
	if len(b) != 4-from {
		t.Fatalf("resumed from step %d but ran %d steps", from, len(b))
	}
	for s := from + 1; s <= 4; s++ {
		if !reflect.DeepEqual(a[s], b[s]) {
			t.Errorf("step %d differs after resume:\nstraight %v\nresumed  %v", s, a[s], b[s])
		}
	}
	ca, err := checkpoint.Load(filepath.Join(eA.RunDir(), "checkpoints", "step-000004"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := checkpoint.Load(filepath.Join(eB.RunDir(), "checkpoints", "step-000004"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.Tensors, cb.Tensors) || !reflect.DeepEqual(ca.Optimizer.ExpAvgSq, cb.Optimizer.ExpAvgSq) {
		t.Error("adapter or optimizer state differs after resume")
	}
}
