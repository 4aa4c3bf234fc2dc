package config

import (
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
)

// Flags are the command-line settings of a run, bound to a flag set by Bind. Only the flags
// the user set override the layers below them.
type Flags struct {
	fs     *flag.FlagSet
	config string
	resume string
	keys   map[string]string // flag name → config key
	vals   map[string]any    // flag name → pointer to its value
}

// flagSpec ties a flag to the key it sets.
var flagSpecs = []struct{ name, key, usage string }{
	{"preset", "preset", "reward preset: story, technical, code, math or a user preset"},
	{"model", "model", "Hugging Face model folder (default: the built-in model)"},
	{"data", "data.path", "prompts: a JSONL, JSON, Parquet or text file, or a folder of shards (default: the preset's built-in prompts)"},
	{"chat-template", "data.chat_template", `what renders conversational prompts: "auto" (the model's chat template), "none" or a template FILE`},
	{"out", "output_dir", "folder that receives the run folder"},
	{"run-name", "run_name", "run folder name (default: <yyyymmdd-hhmmss>-<preset>)"},
	{"device", "device", "auto, cpu or cuda"},
	{"baselines", "baselines", "baselines.json to score against (default: computed at start)"},
	{"accept-baselines", "accept_baselines", "use baselines made with another model or tokenizer"},
	{"init-adapter", "init_adapter", "PEFT LoRA adapter folder to start from (a checkpoint of another run): its r, alpha, targets and weights, a fresh optimizer"},
	{"steps", "max_steps", "number of optimizer steps (max_steps)"},
	{"save-steps", "save_steps", "checkpoint every N steps; 0: only at the end"},
	{"seed", "seed", "random seed"},
	{"num-generations", "num_generations", "completions per prompt (G)"},
	{"batch-size", "per_device_train_batch_size", "prompts per micro-step (per_device_train_batch_size)"},
	{"learning-rate", "learning_rate", "AdamW learning rate of the LoRA weights"},
	{"beta", "beta", "KL coefficient"},
	{"temperature", "temperature", "sampling temperature"},
	{"max-completion-length", "max_completion_length", "most tokens generated per completion"},
	{"loss-type", "loss_type", "grpo, bnpo, dr_grpo or dapo"},
	{"report-to", "report.to", "trackers written beside the run's logs, comma-separated: wandb (a W&B offline run for `wandb sync`) or none"},
}

// Bind registers the run flags on fs, their defaults shown from Default(). After fs.Parse,
// Resolve builds the configuration.
func Bind(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, keys: map[string]string{}, vals: map[string]any{}}
	fs.StringVar(&f.config, "config", "", "run configuration file (TOML)")
	fs.StringVar(&f.resume, "resume", "", "run folder to resume; its config.toml is the configuration file unless --config is given")
	def := Default()
	byKey := map[string]leaf{}
	for _, l := range leaves(def) {
		byKey[l.key] = l
	}
	for _, s := range flagSpecs {
		l, ok := byKey[s.key]
		if !ok {
			panic("config: flag for unknown key " + s.key)
		}
		f.keys[s.name] = s.key
		switch l.v.Kind() {
		case reflect.String:
			f.vals[s.name] = fs.String(s.name, l.v.String(), s.usage)
		case reflect.Bool:
			f.vals[s.name] = fs.Bool(s.name, l.v.Bool(), s.usage)
		case reflect.Int, reflect.Int64:
			f.vals[s.name] = fs.Int64(s.name, l.v.Int(), s.usage)
		case reflect.Float64:
			f.vals[s.name] = fs.Float64(s.name, l.v.Float(), s.usage)
		case reflect.Slice: // a list of strings, comma-separated
			list := new([]string)
			fs.Func(s.name, s.usage, func(v string) error {
				*list = nil
				for _, e := range strings.Split(v, ",") {
					if e = strings.TrimSpace(e); e != "" {
						*list = append(*list, e)
					}
				}
				return nil
			})
			f.vals[s.name] = list
		}
	}
	return f
}

// AnnotateDefaults adds "[label: value]" to the -h text of each flag whose key has a value in
// over: the defaults shown by the flag package are DESIGN §5's, and a layer such as the
// built-in model's run defaults starts elsewhere.
func (f *Flags) AnnotateDefaults(over map[string]any, label string) {
	for name, key := range f.keys {
		if v, ok := over[key]; ok {
			if fl := f.fs.Lookup(name); fl != nil && fmt.Sprint(v) != fl.DefValue {
				fl.Usage += fmt.Sprintf(" [%s: %v]", label, v)
			}
		}
	}
}

// ConfigPath is the --config value.
func (f *Flags) ConfigPath() string { return f.config }

// Resume is the --resume run folder, "" when not resuming.
func (f *Flags) Resume() string { return f.resume }

// set returns the config keys of the flags given on the command line with their values.
func (f *Flags) set() map[string]any {
	out := map[string]any{}
	f.fs.Visit(func(fl *flag.Flag) {
		if key, ok := f.keys[fl.Name]; ok {
			out[key] = reflect.ValueOf(f.vals[fl.Name]).Elem().Interface()
		}
	})
	return out
}

// ApplyTo sets the flags given on the command line into c.
func (f *Flags) ApplyTo(c *Config) error {
	byKey := map[string]leaf{}
	for _, l := range leaves(c) {
		byKey[l.key] = l
	}
	names := map[string]string{}
	for n, k := range f.keys {
		names[k] = n
	}
	given := f.set()
	for _, key := range keys(given) {
		if err := set(byKey[key].v, given[key]); err != nil {
			return fmt.Errorf("--%s: %v", names[key], err)
		}
		c.setOrigin(key, "--"+names[key])
	}
	return nil
}

// PresetFunc gives a preset's [grpo] table and a label for messages ("preset math [grpo]").
type PresetFunc func(name string) (table map[string]any, source string, err error)

// Resolve builds the run configuration from its layers: defaults < the preset's [grpo] table
// < the configuration file (--config, else RUNDIR/config.toml with --resume) < the flags set.
// The preset is the one named by --preset, else by the file, else the default; preset may be
// nil when there are no presets to apply.
func (f *Flags) Resolve(preset PresetFunc) (*Config, error) {
	path := f.config
	if path == "" && f.resume != "" {
		path = filepath.Join(f.resume, "config.toml")
	}
	var raw map[string]any
	var loc locator
	if path != "" {
		var err error
		if raw, loc, err = readFile(path); err != nil {
			return nil, err
		}
	}
	c := Default()
	name := c.Preset
	if s, ok := raw["preset"].(string); ok {
		name = s
	}
	if s, ok := f.set()["preset"].(string); ok {
		name = s
	}
	if preset != nil {
		table, source, err := preset(name)
		if err != nil {
			return nil, err
		}
		if err := c.Apply(table, source); err != nil {
			return nil, err
		}
	}
	if raw != nil {
		if err := c.apply(raw, path, loc, false); err != nil {
			return nil, err
		}
	}
	if err := f.ApplyTo(c); err != nil {
		return nil, err
	}
	if err := c.Finish(); err != nil {
		return nil, err
	}
	return c, nil
}
