package config

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// Flags are the command-line settings of a run, bound to a flag set by Bind. Only the flags
// the user set override the layers below them.
//
// Every setting of Config is a flag, generated from the struct: its name is the TOML key as
// TRL's and PEFT's parsers take it (--learning_rate, --lora.r), the same with dashes
// (--learning-rate), and the short names of aliases below (--steps). A key added to Config
// is a flag without touching this file; help gives it a line of -h text.
type Flags struct {
	fs      *flag.FlagSet
	config  string
	resume  string
	byName  map[string]*keyFlag // every name, aliases included
	ordered []*keyFlag          // Config's declaration order
	note    map[string]string   // key → "[built-in model: 48]"
}

// keyFlag is the one flag.Value behind every name of a key.
type keyFlag struct {
	key   string
	names []string // the TOML key first, then its aliases
	kind  reflect.Type
	val   any // as TOML decoding would give it, once set
	def   string
	given bool
}

// aliases are the short names of the common settings, kept from before every key had a flag.
var aliases = map[string][]string{
	"max_steps":                   {"steps"},
	"per_device_train_batch_size": {"batch-size"},
	"output_dir":                  {"out"},
	"data.path":                   {"data"},
	"data.chat_template":          {"chat-template"},
	"report.to":                   {"report-to"},
}

// help is the -h line of each key; a key without one is listed with its default alone.
var help = map[string]string{
	"model":                               "Hugging Face model folder (default: the built-in model)",
	"preset":                              "reward preset: story, technical, code, math or a user preset",
	"baselines":                           "baselines.json to score against (default: computed at start)",
	"accept_baselines":                    "use baselines made with another model or tokenizer",
	"init_adapter":                        "PEFT LoRA adapter folder to start from (a checkpoint of another run): its r, alpha, targets and weights, a fresh optimizer",
	"device":                              "where it computes",
	"output_dir":                          "folder that receives the run folder",
	"run_name":                            "run folder name (default: <yyyymmdd-hhmmss>-<preset>)",
	"learning_rate":                       "AdamW learning rate of the LoRA weights",
	"beta":                                "KL coefficient (the KL is logged even at 0)",
	"epsilon":                             "lower clipping bound of the importance ratio: 1 - epsilon",
	"epsilon_high":                        "upper clipping bound: 1 + epsilon_high (unset: epsilon; with loss_type cispo, the cap of the weight itself: 5)",
	"num_generations":                     "completions per prompt (G)",
	"max_completion_length":               "most tokens generated per completion",
	"max_prompt_length":                   "prompts are cut to their last N tokens",
	"temperature":                         "sampling temperature (log-probs are taken at it too)",
	"top_p":                               "nucleus sampling: keep the smallest set of tokens with this much probability",
	"top_k":                               "sample among the K likeliest tokens; 0 = off",
	"num_iterations":                      "optimizer passes over each generation batch (mu)",
	"steps_per_generation":                "micro-steps one generation batch serves; 0 = gradient_accumulation_steps",
	"scale_rewards":                       "divide advantages by the reward std of the group, the batch, or not at all",
	"loss_type":                           "policy loss and its aggregation over tokens",
	"importance_sampling_level":           "importance ratio per token, or per sequence (GSPO)",
	"mask_truncated_completions":          "leave completions that hit max_completion_length out of the loss",
	"top_entropy_quantile":                "train only on the tokens of highest entropy, this share of them; 1 = all",
	"reward_weights":                      "comma-separated weights, one per reward of the preset in the order `presets` lists",
	"sapo_temperature_neg":                "sapo: gate temperature for negative advantages",
	"sapo_temperature_pos":                "sapo: gate temperature for positive advantages",
	"vespo_k_pos":                         "vespo: k for positive advantages",
	"vespo_lambda_pos":                    "vespo: lambda for positive advantages",
	"vespo_k_neg":                         "vespo: k for negative advantages",
	"vespo_lambda_neg":                    "vespo: lambda for negative advantages",
	"max_grad_norm":                       "gradient clipping norm; 0 = off",
	"per_device_train_batch_size":         "PROMPTS per micro-step (TRL counts completions), each with num_generations completions",
	"gradient_accumulation_steps":         "micro-steps per optimizer step",
	"max_steps":                           "number of optimizer steps",
	"logging_steps":                       "log every N steps",
	"save_steps":                          "checkpoint every N steps; 0 = only at the end",
	"save_total_limit":                    "checkpoints kept; 0 = all",
	"seed":                                "random seed",
	"lr_scheduler_type":                   "learning-rate schedule after warm-up",
	"warmup_steps":                        "warm-up steps (wins over warmup_ratio)",
	"warmup_ratio":                        "warm-up as a share of max_steps",
	"weight_decay":                        "AdamW weight decay",
	"adam_beta1":                          "AdamW beta1",
	"adam_beta2":                          "AdamW beta2",
	"adam_epsilon":                        "AdamW epsilon",
	"data.path":                           "prompts: a JSONL, JSON, Parquet or text file, or a folder of shards (default: the preset's built-in prompts)",
	"data.prompt_key":                     "column of the prompt, dotted for nested ones (default: detected)",
	"data.answer_key":                     "column of the answer (verl: reward_model.ground_truth; default: detected)",
	"data.chat_template":                  `what renders conversational prompts: "auto" (the model's template), "none" or a template FILE`,
	"lora.r":                              "LoRA rank",
	"lora.lora_alpha":                     "LoRA alpha (scale alpha/r)",
	"lora.lora_dropout":                   "dropout on the LoRA input",
	"lora.target_modules":                 `comma-separated module names, or "all-linear"`,
	"lora.use_rslora":                     "scale alpha/sqrt(r) (rsLoRA)",
	"lora.init_lora_weights":              "PEFT's initialization (B = 0); false starts B random",
	"quant.type":                          "4-bit format of the frozen base",
	"quant.blocksize":                     "quantization block size",
	"quant.double_quant":                  "quantize the block scales too",
	"quant.head":                          "quantize the LM head too (a tied one with the embedding): a quarter of a bf16 head's bytes per decoded token",
	"num_train_epochs":                    "the run's length in passes over the prompts, when max_steps is not set",
	"lr_scheduler_kwargs.min_lr":          "cosine_with_min_lr: the floor of the learning rate",
	"lr_scheduler_kwargs.min_lr_rate":     "cosine_with_min_lr: the floor as a share of learning_rate",
	"lr_scheduler_kwargs.num_decay_steps": "warmup_stable_decay: steps of the final decay (required)",
	"eval_strategy":                       `"steps": evaluate every eval_steps steps (eval/* metrics)`,
	"eval_steps":                          "evaluate every N steps (> 0 turns evaluation on); 0 = logging_steps",
	"eval.data":                           "prompts to evaluate on (answers give eval/correct_*); default: [eval] holdout, else held-out built-in prompts",
	"eval.holdout":                        "share of the training prompts set aside for evaluation",
	"eval.prompts":                        "most prompts evaluated each time",
}

// common are the keys the -h text lists first; the rest follow under "every other setting".
var common = []string{"preset", "model", "data.path", "output_dir", "run_name", "device", "init_adapter", "max_steps",
	"per_device_train_batch_size", "num_generations", "max_completion_length", "max_prompt_length", "learning_rate",
	"loss_type", "beta", "temperature", "save_steps", "seed"}

// Common lists the keys the setup screen shows first (its advanced view has the rest).
func Common() []string { return append([]string(nil), common...) }

// Bind registers the run flags on fs, their defaults shown from Default(). After fs.Parse,
// Resolve builds the configuration.
func Bind(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, byName: map[string]*keyFlag{}, note: map[string]string{}}
	fs.StringVar(&f.config, "config", "", "run configuration `FILE` (TOML): every key below, with [lora], [quant], [data] tables")
	fs.StringVar(&f.resume, "resume", "", "run `FOLDER` to resume; its config.toml is the configuration file unless --config is given")
	for _, l := range leaves(Default()) {
		k := &keyFlag{key: l.key, kind: l.f.Type, def: fmtFlagValue(l.v.Interface())}
		k.names = append(k.names, l.key)
		if dashed := strings.ReplaceAll(l.key, "_", "-"); dashed != l.key {
			k.names = append(k.names, dashed)
		}
		k.names = append(k.names, aliases[l.key]...)
		for _, n := range k.names {
			if fs.Lookup(n) != nil {
				panic("config: flag --" + n + " registered twice")
			}
			fs.Var(k, n, usageOf(l))
			f.byName[n] = k
		}
		f.ordered = append(f.ordered, k)
	}
	return f
}

// usageOf is key's -h line: its help and the values an enum allows.
func usageOf(l leaf) string {
	u := help[l.key]
	if enum := l.f.Tag.Get("enum"); enum != "" {
		if u != "" {
			u += ": "
		}
		u += strings.ReplaceAll(enum, ",", ", ")
	}
	return u
}

func (k *keyFlag) String() string {
	if k == nil {
		return ""
	}
	if k.given {
		return fmtFlagValue(k.val)
	}
	return k.def
}

// IsBoolFlag lets a boolean key be given bare (--use_rslora).
func (k *keyFlag) IsBoolFlag() bool { return k.kind.Kind() == reflect.Bool }

// Set parses s as the key's type would be written in TOML; lists are comma-separated.
func (k *keyFlag) Set(s string) error {
	var v any
	switch {
	case k.kind == reflect.TypeOf(Modules{}) || k.kind == reflect.TypeOf([]string{}):
		var list []any
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" || k.kind == reflect.TypeOf(Modules{}) {
				list = append(list, e)
			}
		}
		v = list
	case k.kind.Kind() == reflect.Slice:
		var list []any
		for _, e := range strings.Split(s, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(e), 64)
			if err != nil {
				return fmt.Errorf("want comma-separated numbers, got %q", e)
			}
			list = append(list, x)
		}
		v = list
	case k.kind.Kind() == reflect.String:
		v = s
	case k.kind.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v = b
	case k.kind.Kind() == reflect.Int || k.kind.Kind() == reflect.Int64:
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v = i
	case k.kind.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", s)
		}
		v = x
	default:
		return fmt.Errorf("cannot be set from the command line")
	}
	k.val, k.given = v, true
	return nil
}

// fmtFlagValue writes a value as it is typed on the command line.
func fmtFlagValue(v any) string {
	switch v := v.(type) {
	case Modules:
		return strings.Join(v, ",")
	case []string:
		return strings.Join(v, ",")
	case []float64:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = strconv.FormatFloat(x, 'g', -1, 64)
		}
		return strings.Join(s, ",")
	case []any:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return strings.Join(s, ",")
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// AnnotateDefaults adds "[label: value]" to the -h text of each key with a value in over:
// the defaults shown are DESIGN §5's, and a layer such as the built-in model's run defaults
// starts elsewhere.
func (f *Flags) AnnotateDefaults(over map[string]any, label string) {
	for _, k := range f.ordered {
		if v, ok := over[k.key]; ok && fmtFlagValue(v) != k.def {
			f.note[k.key] = fmt.Sprintf("[%s: %s]", label, fmtFlagValue(v))
		}
	}
}

// PrintDefaults writes the -h text of the run flags: --config and --resume, the common
// settings, then every other one, each under its TOML key with its other names, its default
// and its help. Flags of fs that are not run flags (--batch, --theme) come first.
func (f *Flags) PrintDefaults(w io.Writer) {
	var other []*flag.Flag
	f.fs.VisitAll(func(fl *flag.Flag) {
		if _, ok := f.byName[fl.Name]; !ok {
			other = append(other, fl)
		}
	})
	for _, fl := range other {
		arg, usage := flag.UnquoteUsage(fl)
		fmt.Fprintf(w, "  --%s %s\n    \t%s\n", fl.Name, arg, usage)
	}
	isCommon := map[string]bool{}
	for _, k := range common {
		isCommon[k] = true
	}
	write := func(k *keyFlag) {
		names := "--" + k.names[0]
		if len(k.names) > 1 {
			names += " (" + "--" + strings.Join(k.names[1:], ", --") + ")"
		}
		l := f.fs.Lookup(k.names[0])
		line := l.Usage
		if k.def != "" {
			line += fmt.Sprintf(" (default %s)", k.def)
		}
		if n := f.note[k.key]; n != "" {
			line += " " + n
		}
		fmt.Fprintf(w, "  %s %s\n    \t%s\n", names, typeName(k.kind), strings.TrimSpace(line))
	}
	fmt.Fprintln(w, "\ncommon settings (TRL GRPOConfig names; --name and --name-with-dashes both work):")
	for _, key := range common {
		for _, k := range f.ordered {
			if k.key == key {
				write(k)
			}
		}
	}
	fmt.Fprintln(w, "\nevery other setting (the same keys as in --config's TOML file; [table] keys as --table.key):")
	for _, k := range f.ordered {
		if !isCommon[k.key] {
			write(k)
		}
	}
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(Modules{}) || t == reflect.TypeOf([]string{}):
		return "NAMES"
	case t.Kind() == reflect.Slice:
		return "LIST"
	case t.Kind() == reflect.Bool:
		return "[=BOOL]"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "INT"
	case t.Kind() == reflect.Float64:
		return "FLOAT"
	}
	return "STRING"
}

// Keys lists every key that has a flag, in Config's declaration order.
func (f *Flags) Keys() []string {
	out := make([]string, len(f.ordered))
	for i, k := range f.ordered {
		out[i] = k.key
	}
	return out
}

// ConfigPath is the --config value.
func (f *Flags) ConfigPath() string { return f.config }

// Resume is the --resume run folder, "" when not resuming.
func (f *Flags) Resume() string { return f.resume }

// set returns the config keys of the flags given on the command line with their values.
func (f *Flags) set() map[string]any {
	out := map[string]any{}
	for _, k := range f.ordered {
		if k.given {
			out[k.key] = k.val
		}
	}
	return out
}

// ApplyTo sets the flags given on the command line into c.
func (f *Flags) ApplyTo(c *Config) error {
	byKey := map[string]leaf{}
	for _, l := range leaves(c) {
		byKey[l.key] = l
	}
	typed := map[string]string{} // key → the name it was given under
	f.fs.Visit(func(fl *flag.Flag) {
		if k, ok := f.byName[fl.Name]; ok {
			typed[k.key] = fl.Name
		}
	})
	for _, k := range f.ordered {
		if !k.given {
			continue
		}
		if err := set(byKey[k.key].v, k.val); err != nil {
			return fmt.Errorf("--%s: %v", typed[k.key], err)
		}
		c.setOrigin(k.key, "--"+typed[k.key])
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

// Setting is one key with its value as typed on the command line, and its -h line.
type Setting struct {
	Key, Value, Help string
	Common           bool // one of the keys -h and the setup screen list first
}

// Settings lists every key that has a flag with c's value, the common ones first, then the
// rest in declaration order: what the setup screen's settings page edits.
func (c *Config) Settings() []Setting {
	isCommon := map[string]bool{}
	for _, k := range common {
		isCommon[k] = true
	}
	byKey := map[string]Setting{}
	var rest []Setting
	for _, l := range leaves(c) {
		s := Setting{Key: l.key, Value: fmtFlagValue(l.v.Interface()), Help: usageOf(l), Common: isCommon[l.key]}
		byKey[l.key] = s
		if !s.Common {
			rest = append(rest, s)
		}
	}
	var out []Setting
	for _, k := range common {
		if s, ok := byKey[k]; ok {
			out = append(out, s)
		}
	}
	return append(out, rest...)
}
