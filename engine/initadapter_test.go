package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/internal/stats"
	"rlhfstation/rewards"
)

// shortReward rewards a completion by how far it stops before max tokens: 1 − len/max.
type shortReward struct{ max int }

func (shortReward) Name() string { return "short" }

func (r shortReward) Score(samples []rewards.Sample) ([]float64, map[string]float64, error) {
	out := make([]float64, len(samples))
	for i, s := range samples {
		out[i] = 1 - float64(len(s.CompletionIDs))/float64(r.max)
	}
	return out, nil, nil
}

// runBuiltin runs c on the built-in model with shortReward in place of the preset's rewards
// and returns each step's metrics.
func runBuiltin(t *testing.T, c *config.Config, ps []data.Example) (map[int]events.Metrics, *Engine) {
	t.Helper()
	dir, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(c, Options{ModelDir: dir, ModelName: BuiltinModelName, Prompts: ps})
	if err != nil {
		t.Fatal(err)
	}
	e.funcs = []rewards.Weighted{{Func: shortReward{c.MaxCompletionLength}, Weight: 1}}
	var evs []events.Event
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	for ev := range e.Events() {
		evs = append(evs, ev)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return stepMetrics(evs), e
}

// A run started with init_adapter from another run's checkpoint starts at that checkpoint's
// reward level, not the base model's: on the built-in model, run A learns to stop early;
// run B starts from A's last checkpoint with the same seed, prompts and settings as A.
func TestInitAdapterStartsAtCheckpointReward(t *testing.T) {
	ps := prompts(t, "math")
	cfg := func(steps int) *config.Config {
		c := config.Default()
		c.OutputDir, c.Device, c.Seed = t.TempDir(), "cpu", 3
		c.MaxSteps, c.SaveSteps, c.LoggingSteps = steps, 0, 1
		c.PerDeviceTrainBatchSize, c.NumGenerations, c.MaxCompletionLength = 2, 8, 16
		c.LearningRate, c.LRSchedulerType = 3e-3, "constant"
		c.LoRA.R, c.LoRA.Alpha = 8, 16
		return c
	}
	const trained = 6
	a := cfg(trained)
	a.RunName = "a"
	if err := a.Finish(); err != nil {
		t.Fatal(err)
	}
	ma, ea := runBuiltin(t, a, ps)
	ckpt := filepath.Join(ea.RunDir(), "checkpoints", "step-000006")

	b := cfg(1)
	b.RunName, b.InitAdapter = "b", ckpt
	b.LoRA.R, b.LoRA.Alpha = 16, 32 // replaced by the adapter's
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	for s := 1; s <= trained; s++ {
		t.Logf("run A step %d: reward %.4f, mean length %.1f", s, ma[s]["reward"], ma[s]["completions/mean_length"])
	}
	mb, eb := runBuiltin(t, b, ps)
	if eb.cfg.LoRA.R != 8 || eb.cfg.LoRA.Alpha != 16 {
		t.Errorf("lora r %d, alpha %g: want the adapter's 8, 16", eb.cfg.LoRA.R, eb.cfg.LoRA.Alpha)
	}

	var late []float64
	for s := trained - 1; s <= trained; s++ {
		late = append(late, ma[s]["reward"])
	}
	lateMean, lateSE := stats.MeanSE(late)
	first, fromCkpt := ma[1]["reward"], mb[1]["reward"]
	t.Logf("run A: step 1 reward %.4f (length %.1f), steps %d–%d %.4f ± %.4f; run B from A's step %d: step 1 reward %.4f (length %.1f)",
		first, ma[1]["completions/mean_length"], trained-1, trained, lateMean, lateSE, trained, fromCkpt, mb[1]["completions/mean_length"])
	// The same prompts and sampling seed as A's step 1: only the adapter differs.
	if !(lateMean-first > 0.15) {
		t.Fatalf("run A learned too little to tell the levels apart: %.4f → %.4f", first, lateMean)
	}
	if !(fromCkpt-first > 0.5*(lateMean-first)) {
		t.Errorf("run B's step 1 reward %.4f is nearer the base's %.4f than the checkpoint's level %.4f", fromCkpt, first, lateMean)
	}
}

// Adapters that do not fit the run's model are refused with the reason, and no run folder is
// left behind; a foreign adapter whose base is no folder here is checked by its shapes alone.
func TestInitAdapterRefusals(t *testing.T) {
	// A checkpoint of a run on the test model, and a model of the same shapes with other weights.
	// (Named by its folder, as a run on a model folder names it.)
	c := tinyConfig(t, "story", 1)
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: tinyModelDir(t), Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(e.RunDir(), "checkpoints", "step-000001")
	tiny, err := model.Load(tinyModelDir(t))
	if err != nil {
		t.Fatal(err)
	}
	twin, err := model.NewRandom(tiny.Config, 99)
	if err != nil {
		t.Fatal(err)
	}
	twinDir := t.TempDir()
	if err := twin.Save(twinDir); err != nil {
		t.Fatal(err)
	}
	tokJSON, err := os.ReadFile(filepath.Join(tinyModelDir(t), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(twinDir, "tokenizer.json"), tokJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	// The same adapter outside its run folder, edited.
	edited := func(edit func(*checkpoint.AdapterConfig, []checkpoint.Tensor) []checkpoint.Tensor) string {
		cfg, tensors, err := checkpoint.LoadAdapter(ckpt)
		if err != nil {
			t.Fatal(err)
		}
		tensors = edit(&cfg, tensors)
		dir := t.TempDir()
		if err := checkpoint.SaveAdapter(dir, cfg, tensors); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	plain := edited(func(c *checkpoint.AdapterConfig, ts []checkpoint.Tensor) []checkpoint.Tensor {
		c.BaseModel = "someone/tiny-model"
		return ts
	})
	for _, tc := range []struct {
		name, model, adapter, want string
	}{
		{"another model", twinDir, ckpt, "was trained on " + tinyModelDir(t)},
		{"dora", tinyModelDir(t), edited(func(c *checkpoint.AdapterConfig, ts []checkpoint.Tensor) []checkpoint.Tensor {
			c.UseDoRA = true
			return ts
		}), "DoRA adapters are not trained from"},
		{"rank", tinyModelDir(t), edited(func(c *checkpoint.AdapterConfig, ts []checkpoint.Tensor) []checkpoint.Tensor {
			c.R = 8
			return ts
		}), "has shape [16 32], the model needs [8 32]"},
		{"unknown module", tinyModelDir(t), edited(func(_ *checkpoint.AdapterConfig, ts []checkpoint.Tensor) []checkpoint.Tensor {
			ts[0].Name = strings.Replace(ts[0].Name, "layers.0", "layers.7", 1)
			return ts
		}), "is not a linear layer of this model"},
		{"not lora", tinyModelDir(t), edited(func(_ *checkpoint.AdapterConfig, ts []checkpoint.Tensor) []checkpoint.Tensor {
			ts[0].Name = strings.Replace(ts[0].Name, "lora_A", "lora_embedding_A", 1)
			return ts
		}), "is not a LoRA factor"},
		{"no folder", tinyModelDir(t), filepath.Join(t.TempDir(), "none"), "is not a checkpoint"},
	} {
		c := tinyConfig(t, "story", 1)
		c.InitAdapter = tc.adapter
		_, err := New(c, Options{ModelDir: tc.model, ModelName: "m", Prompts: prompts(t, "story")})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
		if left, _ := os.ReadDir(c.OutputDir); len(left) != 0 {
			t.Errorf("%s: the refused start left %v in the output folder", tc.name, left)
		}
	}
	// A base named by a hub id, no folder here: the twin, of the same shapes, is accepted.
	c = tinyConfig(t, "story", 1)
	c.InitAdapter = plain
	var notes []string
	e2, err := New(c, Options{ModelDir: twinDir, ModelName: "twin", Prompts: prompts(t, "story"),
		Log: func(f string, a ...any) { notes = append(notes, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	e2.close()
	if !strings.Contains(strings.Join(notes, "\n"), "only its shapes are checked") {
		t.Errorf("no note that only the shapes were checked: %q", notes)
	}
}

// An adapter on a few modules only: the run adapts exactly those (target_modules becomes
// their full names in config.toml), starts from its weights, and resumes without it.
func TestInitAdapterPartialAndResume(t *testing.T) {
	c := tinyConfig(t, "story", 1)
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	cfg, tensors, err := checkpoint.LoadAdapter(filepath.Join(e.RunDir(), "checkpoints", "step-000001"))
	if err != nil {
		t.Fatal(err)
	}
	const mod = "model.layers.1.self_attn.v_proj"
	var kept []checkpoint.Tensor
	for _, t := range tensors {
		if strings.Contains(t.Name, mod+".") {
			kept = append(kept, t)
		}
	}
	adapterDir := filepath.Join(t.TempDir(), "partial")
	if err := os.Mkdir(adapterDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveAdapter(adapterDir, cfg, kept); err != nil {
		t.Fatal(err)
	}
	c = tinyConfig(t, "story", 2)
	c.InitAdapter, c.RunName, c.SaveSteps = adapterDir, "partial", 1
	half := *c
	half.MaxSteps = 1
	_, e, err = run(t, &half, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	if got := []string(e.cfg.LoRA.TargetModules); len(got) != 1 || got[0] != mod {
		t.Fatalf("target_modules %v, want [%s]", got, mod)
	}
	if len(e.adapters.Layers) != 1 {
		t.Fatalf("%d adapted modules, want 1", len(e.adapters.Layers))
	}
	back, err := config.Load(filepath.Join(e.RunDir(), "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if back.InitAdapter != adapterDir || len(back.LoRA.TargetModules) != 1 {
		t.Errorf("config.toml: init_adapter %q, target_modules %v", back.InitAdapter, back.LoRA.TargetModules)
	}
	// The adapter folder is gone: a resume takes the weights from the checkpoint.
	if err := os.RemoveAll(adapterDir); err != nil {
		t.Fatal(err)
	}
	more := back // as --resume reads it
	more.MaxSteps = 2
	evs, _, err := run(t, more, e.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	if m := stepMetrics(evs); len(m) != 1 || m[2] == nil {
		t.Errorf("resumed run's steps: %v", m)
	}
}

// An adapter records config.json's _name_or_path when it is a hub id, else the model
// folder's absolute path: never the path as typed, which peft elsewhere cannot resolve.
func TestAdapterBase(t *testing.T) {
	dir := t.TempDir()
	write := func(js string) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "model_type": "qwen2"}`)
	if got := AdapterBase(dir, dir); got != "Qwen/Qwen2.5-0.5B-Instruct" {
		t.Errorf("hub id: %q", got)
	}
	write(`{"_name_or_path": "/home/someone/ckpt", "model_type": "qwen2"}`)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := AdapterBase(rel, rel); got != dir || !filepath.IsAbs(got) {
		t.Errorf("local path: %q, want %q", got, dir)
	}
	if got := AdapterBase("", BuiltinModelName); got != BuiltinModelName {
		t.Errorf("built-in: %q", got)
	}
}
