package engine

import (
	"fmt"
	"os"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/presets"
)

// builtinRunDefaults are the GRPO settings a run on the built-in model starts from: sizes that
// make `go run . --batch` a few minutes of real learning on two CPU cores.
var builtinRunDefaults = map[string]any{
	"max_steps":                   int64(150),
	"per_device_train_batch_size": int64(4),
	"num_generations":             int64(8),
	"max_completion_length":       int64(48),
	"max_prompt_length":           int64(128),
	"learning_rate":               5e-4,
	"warmup_ratio":                0.1,
	"logging_steps":               int64(1),
	"save_steps":                  int64(50),
}

// BuiltinRunDefaults is a copy of the settings a run on the built-in model starts from (for
// -h texts).
func BuiltinRunDefaults() map[string]any {
	out := make(map[string]any, len(builtinRunDefaults))
	for k, v := range builtinRunDefaults {
		out[k] = v
	}
	return out
}

// ResolveRun builds a run's configuration from the command line and picks its model folder:
// the configuration's model, else $RLHFSTATION_MODEL (recorded as the configuration's model),
// else the built-in model, whose run defaults are layered under the preset's [grpo] table.
// The Options it returns are ready for New.
func ResolveRun(flags *config.Flags) (*config.Config, Options, error) {
	presetTable := func(name string) (map[string]any, string, error) {
		p, err := presets.Load(name)
		if err != nil {
			return nil, "", err
		}
		return p.GRPO, "preset " + name + " [grpo]", nil
	}
	opts := Options{Resume: flags.Resume()}
	cfg, err := flags.Resolve(presetTable)
	if err != nil {
		return nil, opts, &ConfigError{err}
	}
	if cfg.Model == "" {
		cfg.Model = os.Getenv("RLHFSTATION_MODEL")
	}
	if cfg.Model != "" {
		opts.ModelDir, opts.ModelName = cfg.Model, cfg.Model
		return cfg, opts, nil
	}
	if opts.ModelDir, err = ModelDir(""); err != nil {
		return nil, opts, err
	}
	opts.ModelName = BuiltinModelName
	withBuiltin := func(name string) (map[string]any, string, error) {
		table, source, err := presetTable(name)
		if err != nil {
			return nil, "", err
		}
		merged := map[string]any{}
		for k, v := range builtinRunDefaults {
			merged[k] = v
		}
		for k, v := range table {
			merged[k] = v
		}
		return merged, "built-in model defaults + " + source, nil
	}
	if cfg, err = flags.Resolve(withBuiltin); err != nil {
		return nil, opts, &ConfigError{err}
	}
	return cfg, opts, nil
}

// builtinPrompts are the prompts of a run without a data file: the synthetic corpus's
// held-out prompts of the preset's domain, named by the root of the presets it extends
// (math for math-aggressive; story for presets of other names).
func builtinPrompts(root string, seed int64) ([]data.Example, error) {
	domain := "story"
	for _, d := range synth.Domains() {
		if d == root {
			domain = d
		}
	}
	ps, err := synth.Prompts(domain, seed, 512)
	if err != nil {
		return nil, err
	}
	out := make([]data.Example, len(ps))
	for i, p := range ps {
		// The reference continuation is what the baselines are computed on (DESIGN §6.1's
		// "reference answers where the data has them").
		out[i] = data.Example{Prompt: p.Prompt, Answer: p.Answer, Text: p.Reference}
	}
	return out, nil
}

// RunPrompts are the prompts a run with cfg trains on, as the data gives them (conversational
// prompts stay chat turns): the data file's, else the built-in prompts of the preset's domain.
// `export` writes them in another engine's layout.
func RunPrompts(cfg *config.Config) ([]data.Example, error) {
	if cfg.Data.Path == "" {
		p, err := presets.Load(cfg.Preset)
		if err != nil {
			return nil, err
		}
		return builtinPrompts(p.Root, cfg.Seed)
	}
	d, err := data.Load(cfg.Data.Path, data.Options{PromptKey: cfg.Data.PromptKey, AnswerKey: cfg.Data.AnswerKey})
	if err != nil {
		return nil, err
	}
	var out []data.Example
	for _, x := range d.Examples {
		if x.Prompt == "" && len(x.Messages) == 0 {
			x.Prompt = x.Text
		}
		if x.Prompt != "" || len(x.Messages) > 0 {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts in the file", cfg.Data.Path)
	}
	return out, nil
}
