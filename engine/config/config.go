// Package config is the run configuration of a GRPO run (DESIGN §5, §9): a TOML file whose
// training keys carry TRL GRPOConfig's names, plus what to train (model, data, preset) and where
// (device, output). Values come in layers, each overriding the one before:
//
//	defaults < the preset's [grpo] table < the config file < command-line flags
//
// Decoding is strict: an unknown key or a value of the wrong type is an error naming the file,
// the key and its line. The resolved configuration is written into the run folder as
// config.toml, which loads back to identical values.
//
// Where this differs from TRL: per_device_train_batch_size counts PROMPTS per micro-step (each
// gets num_generations completions), not completions as in TRL; `batch_size` is not accepted as
// a key (the flag is --batch-size). max_grad_norm = 0 turns clipping off; save_steps = 0 saves
// only at the end; save_total_limit = 0 keeps every checkpoint; warmup_steps > 0 wins over
// warmup_ratio, as in transformers.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"rlhfstation/presets"
)

// Config is a resolved run configuration. The `toml` tag is the key; `grpo` marks the keys a
// preset's [grpo] table may set; `enum` lists the allowed strings.
type Config struct {
	// What to train, with what, and where.
	Model           string `toml:"model"`     // model folder; "" = the built-in model
	Preset          string `toml:"preset"`    // reward preset name
	Baselines       string `toml:"baselines"` // baselines.json; "" = computed at start
	AcceptBaselines bool   `toml:"accept_baselines"`
	// InitAdapter is a PEFT LoRA adapter folder the run starts from (its r, lora_alpha,
	// target modules and rslora replace the [lora] table's; its weights are trained on with a
	// fresh optimizer); "" = new adapters.
	InitAdapter string `toml:"init_adapter"`
	Device      string `toml:"device" enum:"auto,cpu,cuda"`
	OutputDir   string `toml:"output_dir"` // parent of run folders
	RunName     string `toml:"run_name"`   // "" = <yyyymmdd-hhmmss>-<preset>

	// GRPO and optimisation, with TRL GRPOConfig's names.
	LearningRate             float64 `toml:"learning_rate" grpo:""`
	Beta                     float64 `toml:"beta" grpo:""`
	Epsilon                  float64 `toml:"epsilon" grpo:""`
	EpsilonHigh              float64 `toml:"epsilon_high" grpo:""` // = epsilon unless set
	NumGenerations           int     `toml:"num_generations" grpo:""`
	MaxCompletionLength      int     `toml:"max_completion_length" grpo:""`
	MaxPromptLength          int     `toml:"max_prompt_length" grpo:""`
	Temperature              float64 `toml:"temperature" grpo:""`
	TopP                     float64 `toml:"top_p" grpo:""`
	TopK                     int     `toml:"top_k" grpo:""` // 0 = off
	NumIterations            int     `toml:"num_iterations" grpo:""`
	StepsPerGeneration       int     `toml:"steps_per_generation" grpo:""` // 0 = gradient_accumulation_steps
	ScaleRewards             string  `toml:"scale_rewards" grpo:"" enum:"group,batch,none"`
	LossType                 string  `toml:"loss_type" grpo:"" enum:"grpo,bnpo,dr_grpo,dapo,cispo,sapo,luspo,vespo"`
	ImportanceSamplingLevel  string  `toml:"importance_sampling_level" grpo:"" enum:"token,sequence"`
	MaskTruncatedCompletions bool    `toml:"mask_truncated_completions" grpo:""`
	TopEntropyQuantile       float64 `toml:"top_entropy_quantile" grpo:""`
	// RewardWeights, when not empty, replace the preset's reward weights: one per reward
	// section of the preset, in the order `rlhfstation presets` lists them.
	RewardWeights             []float64 `toml:"reward_weights" grpo:""`
	SAPOTemperatureNeg        float64   `toml:"sapo_temperature_neg" grpo:""`
	SAPOTemperaturePos        float64   `toml:"sapo_temperature_pos" grpo:""`
	VESPOKPos                 float64   `toml:"vespo_k_pos" grpo:""`
	VESPOLambdaPos            float64   `toml:"vespo_lambda_pos" grpo:""`
	VESPOKNeg                 float64   `toml:"vespo_k_neg" grpo:""`
	VESPOLambdaNeg            float64   `toml:"vespo_lambda_neg" grpo:""`
	MaxGradNorm               float64   `toml:"max_grad_norm" grpo:""` // 0 = no clipping
	PerDeviceTrainBatchSize   int       `toml:"per_device_train_batch_size" grpo:""`
	GradientAccumulationSteps int       `toml:"gradient_accumulation_steps" grpo:""`
	MaxSteps                  int       `toml:"max_steps" grpo:""`
	LoggingSteps              int       `toml:"logging_steps" grpo:""`
	SaveSteps                 int       `toml:"save_steps" grpo:""`       // 0 = only at the end
	SaveTotalLimit            int       `toml:"save_total_limit" grpo:""` // 0 = keep all
	Seed                      int64     `toml:"seed" grpo:""`
	LRSchedulerType           string    `toml:"lr_scheduler_type" grpo:"" enum:"constant,constant_with_warmup,linear,cosine,cosine_with_min_lr,polynomial,warmup_stable_decay"`
	WarmupSteps               int       `toml:"warmup_steps" grpo:""`
	WarmupRatio               float64   `toml:"warmup_ratio" grpo:""`
	WeightDecay               float64   `toml:"weight_decay" grpo:""`
	AdamBeta1                 float64   `toml:"adam_beta1" grpo:""`
	AdamBeta2                 float64   `toml:"adam_beta2" grpo:""`
	AdamEpsilon               float64   `toml:"adam_epsilon" grpo:""`
	// EvalStrategy "steps" evaluates every eval_steps steps (eval_steps > 0 alone turns it on
	// too); EvalSteps 0 = logging_steps, as in transformers.
	EvalStrategy string `toml:"eval_strategy" grpo:"" enum:"no,steps"`
	// NumTrainEpochs sets the run's length, ceil(epochs × prompts / (per_device_train_batch_size ×
	// gradient_accumulation_steps)) steps, when no layer sets max_steps (TRL's rule).
	NumTrainEpochs float64 `toml:"num_train_epochs" grpo:""`
	EvalSteps      int     `toml:"eval_steps" grpo:""`
	// TRL 1.9's options (README "GRPO options"). 0 turns delta and
	// off_policy_mask_threshold off (TRL's None).
	Delta                     float64 `toml:"delta" grpo:""`
	MultiObjectiveAggregation string  `toml:"multi_objective_aggregation" grpo:"" enum:"sum_then_normalize,normalize_then_sum"`
	EntropyCoef               float64 `toml:"entropy_coef" grpo:""`
	UseAdaptiveEntropy        bool    `toml:"use_adaptive_entropy" grpo:""`
	EntropyTarget             float64 `toml:"entropy_target" grpo:""`
	EntropyCoefMin            float64 `toml:"entropy_coef_min" grpo:""`
	EntropyCoefMax            float64 `toml:"entropy_coef_max" grpo:""`
	EntropyCoefDelta          float64 `toml:"entropy_coef_delta" grpo:""`
	OffPolicyMaskThreshold    float64 `toml:"off_policy_mask_threshold" grpo:""`
	// Dynamic sampling (verl's filter_groups, DAPO): groups whose rewards all agree are
	// dropped and more prompts drawn, at most max_num_gen_batches generation rounds a batch.
	FilterGroups     bool `toml:"filter_groups" grpo:""`
	MaxNumGenBatches int  `toml:"max_num_gen_batches" grpo:""`
	// Sampling only, as TRL's generation does (its loss's log-probs are softmax(logits/T)):
	// min_p keeps the tokens at least min_p times as likely as the most likely (0 = off);
	// repetition_penalty divides the positive logits and multiplies the negative ones of the
	// tokens already in the prompt or completion (1 = off).
	MinP              float64 `toml:"min_p" grpo:""`
	RepetitionPenalty float64 `toml:"repetition_penalty" grpo:""`

	Data  Data  `toml:"data"`
	LoRA  LoRA  `toml:"lora"`
	Quant Quant `toml:"quant"`
	Eval  Eval  `toml:"eval"`
	// LRSchedulerKwargs are the schedules' arguments, with transformers' names (optim.ScheduleArgs).
	LRSchedulerKwargs LRSchedulerKwargs `toml:"lr_scheduler_kwargs"`
	// Report is the [report] table: trackers written beside the run's own logs.
	Report Report `toml:"report"`

	// Monitor is the [monitor] table, kept undecoded for the monitor package.
	Monitor map[string]any `toml:"monitor"`

	// Rewards are the [[rewards]] entries (reward functions of kind "command"): they add to
	// the preset's, replacing one of the same name.
	Rewards []presets.CommandReward `toml:"rewards"`

	// Environments are the [[environments]] entries (multi-turn, tool-calling rollouts): they
	// add to the preset's, replacing one of the same name.
	Environments []presets.Environment `toml:"environments"`

	origin map[string]string // key → where its value came from, for messages
}

// Data is the [data] table: the prompts and which of their columns hold what. `data = "FILE"`
// at the top level is short for `[data] path = "FILE"`.
type Data struct {
	Path string `toml:"path"` // prompt file or folder of shards; "" = the preset's built-in prompts
	// PromptKey and AnswerKey name the prompt and answer columns, dotted for nested ones
	// (verl: "reward_model.ground_truth"); "" = detected (engine/data).
	PromptKey string `toml:"prompt_key"`
	AnswerKey string `toml:"answer_key"`
	// ChatTemplate is what renders conversational prompts: "auto" (the model's template),
	// "none", or a template file (.jinja, or a .json read like tokenizer_config.json).
	ChatTemplate string `toml:"chat_template"`
	// ChatTemplateKwargs are extra template variables (Qwen3's enable_thinking), as
	// transformers' apply_chat_template takes them; kept as decoded.
	ChatTemplateKwargs map[string]any `toml:"chat_template_kwargs"`
}

// LRSchedulerKwargs is the lr_scheduler_kwargs table: what cosine_with_min_lr, polynomial
// and warmup_stable_decay read (0 or "" = transformers' default).
type LRSchedulerKwargs struct {
	MinLR          float64 `toml:"min_lr"`
	MinLRRate      float64 `toml:"min_lr_rate"`
	NumCycles      float64 `toml:"num_cycles"`
	LREnd          float64 `toml:"lr_end"`
	Power          float64 `toml:"power"`
	NumDecaySteps  int     `toml:"num_decay_steps"`
	NumStableSteps int     `toml:"num_stable_steps"`
	DecayType      string  `toml:"decay_type" enum:",cosine,linear,1-sqrt"`
	MinLRRatio     float64 `toml:"min_lr_ratio"`
}

// Eval is the [eval] table: the prompts evaluation during training runs on.
type Eval struct {
	Data    string  `toml:"data"`    // prompt file (answers give correctness); "" = holdout, else the built-in held-out prompts
	Holdout float64 `toml:"holdout"` // share of the training prompts set aside for evaluation (when no data)
	Prompts int     `toml:"prompts"` // most prompts evaluated
}

// StepsFor is the run's length for n training prompts: max_steps, unless no layer set it and
// one set num_train_epochs, whose epochs then decide (rounded up to whole steps).
func (c *Config) StepsFor(n int) int {
	if c.Origin("max_steps") != "default" || c.Origin("num_train_epochs") == "default" || n == 0 {
		return c.MaxSteps
	}
	per := c.PerDeviceTrainBatchSize * c.GradientAccumulationSteps
	return max(1, int(math.Ceil(c.NumTrainEpochs*float64(n)/float64(per))))
}

// Evaluates reports whether the run evaluates during training, and every how many steps.
func (c *Config) Evaluates() (bool, int) {
	if c.EvalStrategy != "steps" && c.EvalSteps == 0 {
		return false, 0
	}
	if c.EvalSteps > 0 {
		return true, c.EvalSteps
	}
	return true, c.LoggingSteps
}

// LoRA is the [lora] table, with PEFT LoraConfig's names.
type LoRA struct {
	R               int     `toml:"r"`
	Alpha           float64 `toml:"lora_alpha"`
	Dropout         float64 `toml:"lora_dropout"`   // PEFT's default, 0
	TargetModules   Modules `toml:"target_modules"` // names, or "all-linear"
	UseRSLoRA       bool    `toml:"use_rslora"`
	InitLoRAWeights bool    `toml:"init_lora_weights"`
}

// Report is the [report] table, after TRL's report_to: "wandb" writes a W&B offline run
// into the run folder (wandb/offline-run-*/, for `wandb sync`); events.jsonl and TensorBoard
// are always written.
type Report struct {
	To []string `toml:"to"`
}

// Quant is the [quant] table: how the frozen base is quantized (DESIGN §8).
type Quant struct {
	Type        string `toml:"type" enum:"nf4,fp4,none"`
	BlockSize   int    `toml:"blocksize"`
	DoubleQuant bool   `toml:"double_quant"`
	// Head quantizes the LM head too (a tied head with the embedding: one 4-bit tensor), as
	// bitsandbytes does not by default: a quarter of a bf16 head's bytes, read by every decoded
	// token. Off by default.
	Head bool `toml:"head"`
}

// AllLinear is the target_modules value meaning every linear layer but the LM head.
const AllLinear = "all-linear"

// Modules is the target_modules setting: module names, or the single name "all-linear".
// In TOML it is a list of strings or one string.
type Modules []string

// AllLinear reports whether m targets every linear layer.
func (m Modules) AllLinear() bool { return len(m) == 1 && m[0] == AllLinear }

// Default returns the defaults: TRL GRPOConfig's (as of TRL 0.19 and since: beta 0.0,
// loss_type dapo) and PEFT's, except where LoRA or this program's scale give a reason
// (README "Defaults"): learning_rate 1e-5 (TRL 1e-6, for full fine-tuning; LoRA adapters
// need about ten times more), max_completion_length 128 (TRL 512), per_device_train_batch_size
// counted in prompts, save_steps 50.
func Default() *Config {
	return &Config{
		Preset:    "story",
		Device:    "auto",
		OutputDir: "runs",
		Data:      Data{ChatTemplate: "auto"},

		LearningRate:              1e-5,
		Beta:                      0.0,
		Epsilon:                   0.2,
		EpsilonHigh:               0.2,
		NumGenerations:            8,
		MaxCompletionLength:       128,
		MaxPromptLength:           512,
		Temperature:               1.0,
		TopP:                      1.0,
		TopK:                      0,
		NumIterations:             1,
		ScaleRewards:              "group",
		LossType:                  "dapo",
		ImportanceSamplingLevel:   "token",
		TopEntropyQuantile:        1.0,
		SAPOTemperatureNeg:        1.05,
		SAPOTemperaturePos:        1.0,
		VESPOKPos:                 2.0,
		VESPOLambdaPos:            3.0,
		VESPOKNeg:                 3.0,
		VESPOLambdaNeg:            2.0,
		MaxGradNorm:               1.0,
		PerDeviceTrainBatchSize:   4,
		GradientAccumulationSteps: 1,
		MaxSteps:                  100,
		LoggingSteps:              10,
		SaveSteps:                 50,
		SaveTotalLimit:            0,
		Seed:                      42,
		LRSchedulerType:           "linear",
		WeightDecay:               0,
		AdamBeta1:                 0.9,
		AdamBeta2:                 0.999,
		AdamEpsilon:               1e-8,
		EvalStrategy:              "no",
		NumTrainEpochs:            3,

		MultiObjectiveAggregation: "sum_then_normalize",
		EntropyTarget:             0.2,
		EntropyCoefMax:            1.0,
		EntropyCoefDelta:          0.005,
		MaxNumGenBatches:          4,
		RepetitionPenalty:         1,

		LoRA:  LoRA{R: 16, Alpha: 32, TargetModules: Modules{AllLinear}, InitLoRAWeights: true},
		Quant: Quant{Type: "nf4", BlockSize: 64, DoubleQuant: true},
		Eval:  Eval{Prompts: 16},
	}
}

// Origin says where key's value came from: "default", a file and line, a preset, a flag.
func (c *Config) Origin(key string) string {
	if o, ok := c.origin[key]; ok {
		return o
	}
	return "default"
}

func (c *Config) setOrigin(key, src string) {
	if c.origin == nil {
		c.origin = map[string]string{}
	}
	c.origin[key] = src
}

// Finish fills the derived values (epsilon_high = epsilon unless some layer set it) and
// validates the result. Load and Resolve call it; call it after Apply and ApplyFile.
func (c *Config) Finish() error {
	if _, set := c.origin["epsilon_high"]; !set {
		c.EpsilonHigh = c.Epsilon
		if c.LossType == "cispo" {
			c.EpsilonHigh = CISPOEpsilonHigh
		}
	}
	return c.Validate()
}

// CISPOEpsilonHigh is epsilon_high under loss_type cispo when no layer sets it: CISPO caps the
// importance weight itself at epsilon_high, and a cap at epsilon (0.2) would only scale the
// learning rate down; 5.0 is ScaleRL's value.
const CISPOEpsilonHigh = 5.0

// GenerationSteps is steps_per_generation as TRL resolves it: the micro-steps one generation
// batch serves, gradient_accumulation_steps unless set.
func (c *Config) GenerationSteps() int {
	if c.StepsPerGeneration > 0 {
		return c.StepsPerGeneration
	}
	return c.GradientAccumulationSteps
}

// Validate checks every value, returning one error that lists each problem with the value's origin.
func (c *Config) Validate() error {
	var errs []string
	bad := func(key string, v any, msg string) {
		errs = append(errs, fmt.Sprintf("%s = %v (%s): %s", key, fmtValue(v), c.Origin(key), msg))
	}
	for _, l := range leaves(c) {
		if l.v.Kind() == reflect.Float64 && (math.IsNaN(l.v.Float()) || math.IsInf(l.v.Float(), 0)) {
			bad(l.key, l.v.Float(), "must be a finite number")
		}
		if enum := l.f.Tag.Get("enum"); enum != "" && !oneOf(l.v.String(), enum) {
			bad(l.key, l.v.String(), "must be one of "+strings.ReplaceAll(enum, ",", ", "))
		}
	}
	positive := func(key string, v float64) {
		if !(v > 0) {
			bad(key, v, "must be greater than 0")
		}
	}
	atLeast := func(key string, v, min int) {
		if v < min {
			bad(key, v, fmt.Sprintf("must be at least %d", min))
		}
	}
	inUnit := func(key string, v float64) { // [0, 1)
		if v < 0 || v >= 1 {
			bad(key, v, "must be in [0, 1)")
		}
	}
	nonNegative := func(key string, v float64) {
		if v < 0 {
			bad(key, v, "must not be negative")
		}
	}
	if c.Preset == "" {
		bad("preset", c.Preset, "must name a preset")
	}
	if c.OutputDir == "" {
		bad("output_dir", c.OutputDir, "must name a folder")
	}
	if c.Data.ChatTemplate == "" {
		bad("data.chat_template", c.Data.ChatTemplate, `must be "auto", "none" or a template file`)
	}
	if strings.ContainsAny(c.RunName, `/\`) || c.RunName == "." || c.RunName == ".." {
		bad("run_name", c.RunName, "must be a plain folder name")
	}
	positive("learning_rate", c.LearningRate)
	nonNegative("beta", c.Beta)
	inUnit("epsilon", c.Epsilon)
	nonNegative("epsilon_high", c.EpsilonHigh)
	if c.NumGenerations < 2 {
		bad("num_generations", c.NumGenerations, "must be at least 2: GRPO compares the completions of a group")
	}
	atLeast("max_completion_length", c.MaxCompletionLength, 1)
	atLeast("max_prompt_length", c.MaxPromptLength, 1)
	positive("temperature", c.Temperature)
	if !(c.TopP > 0 && c.TopP <= 1) {
		bad("top_p", c.TopP, "must be in (0, 1]")
	}
	atLeast("top_k", c.TopK, 0)
	atLeast("num_iterations", c.NumIterations, 1)
	atLeast("steps_per_generation", c.StepsPerGeneration, 0)
	if !(c.TopEntropyQuantile >= 0 && c.TopEntropyQuantile <= 1) {
		bad("top_entropy_quantile", c.TopEntropyQuantile, "must be in [0, 1] (1 keeps every token)")
	}
	for _, w := range c.RewardWeights {
		if !(w >= 0) || math.IsInf(w, 0) {
			bad("reward_weights", c.RewardWeights, "must be finite numbers not below 0")
			break
		}
	}
	positive("sapo_temperature_neg", c.SAPOTemperatureNeg)
	positive("sapo_temperature_pos", c.SAPOTemperaturePos)
	nonNegative("vespo_k_pos", c.VESPOKPos)
	nonNegative("vespo_k_neg", c.VESPOKNeg)
	nonNegative("vespo_lambda_pos", c.VESPOLambdaPos)
	nonNegative("vespo_lambda_neg", c.VESPOLambdaNeg)
	if c.LossType == "cispo" && c.EpsilonHigh <= 1 {
		// TRL accepts it, but a cap at or below 1 only scales the learning rate down.
		bad("epsilon_high", c.EpsilonHigh, "loss_type cispo caps the importance weight itself at epsilon_high: set it above 1 (--epsilon_high; ScaleRL uses 5.0, the value when unset)")
	}
	nonNegative("max_grad_norm", c.MaxGradNorm)
	atLeast("per_device_train_batch_size", c.PerDeviceTrainBatchSize, 1)
	atLeast("gradient_accumulation_steps", c.GradientAccumulationSteps, 1)
	atLeast("max_steps", c.MaxSteps, 1)
	atLeast("logging_steps", c.LoggingSteps, 1)
	atLeast("save_steps", c.SaveSteps, 0)
	atLeast("save_total_limit", c.SaveTotalLimit, 0)
	atLeast("warmup_steps", c.WarmupSteps, 0)
	inUnit("warmup_ratio", c.WarmupRatio)
	nonNegative("weight_decay", c.WeightDecay)
	inUnit("adam_beta1", c.AdamBeta1)
	inUnit("adam_beta2", c.AdamBeta2)
	positive("adam_epsilon", c.AdamEpsilon)
	atLeast("eval_steps", c.EvalSteps, 0)
	nonNegative("num_train_epochs", c.NumTrainEpochs)
	inUnit("eval.holdout", c.Eval.Holdout)
	atLeast("eval.prompts", c.Eval.Prompts, 1)
	if c.Delta != 0 && !(c.Delta > 1+c.EpsilonHigh) {
		bad("delta", c.Delta, "must be above 1 + epsilon_high (or 0: off)")
	}
	nonNegative("entropy_coef", c.EntropyCoef)
	nonNegative("entropy_coef_min", c.EntropyCoefMin)
	if c.EntropyCoefMax < c.EntropyCoefMin {
		bad("entropy_coef_max", c.EntropyCoefMax, "must not be below entropy_coef_min")
	}
	nonNegative("entropy_coef_delta", c.EntropyCoefDelta)
	nonNegative("off_policy_mask_threshold", c.OffPolicyMaskThreshold)
	atLeast("max_num_gen_batches", c.MaxNumGenBatches, 1)
	if !(c.MinP >= 0 && c.MinP <= 1) {
		bad("min_p", c.MinP, "must be in [0, 1]")
	}
	positive("repetition_penalty", c.RepetitionPenalty)

	atLeast("lora.r", c.LoRA.R, 1)
	positive("lora.lora_alpha", c.LoRA.Alpha)
	inUnit("lora.lora_dropout", c.LoRA.Dropout)
	switch m := c.LoRA.TargetModules; {
	case len(m) == 0:
		bad("lora.target_modules", m, `must name modules, or be "all-linear"`)
	case len(m) > 1 && sliceHas(m, AllLinear):
		bad("lora.target_modules", m, `"all-linear" stands alone`)
	case sliceHas(m, ""):
		bad("lora.target_modules", m, "holds an empty name")
	}
	if b := c.Quant.BlockSize; b < 32 || b > 4096 || b&(b-1) != 0 {
		bad("quant.blocksize", b, "must be a power of two from 32 to 4096")
	}
	for _, to := range c.Report.To {
		if !oneOf(to, "wandb,tensorboard,none") {
			bad("report.to", c.Report.To, fmt.Sprintf("%q is not written here: give wandb (a W&B offline run in the run folder), tensorboard (always written) or none", to))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration:\n  %s", strings.Join(errs, "\n  "))
}

// WarmupStepsFor is the number of warm-up steps: warmup_steps when set, else
// ceil(warmup_ratio × max_steps), as transformers computes it.
func (c *Config) WarmupStepsFor() int {
	if c.WarmupSteps > 0 {
		return c.WarmupSteps
	}
	return int(math.Ceil(c.WarmupRatio * float64(c.MaxSteps)))
}

// Hash is a content hash (SHA-256, hex) of the resolved configuration as Encode writes it.
func (c *Config) Hash() string {
	sum := sha256.Sum256(c.Encode())
	return hex.EncodeToString(sum[:])
}

// Map returns the configuration as plain values keyed like the TOML (nested maps for the
// tables), for the run_start event.
func (c *Config) Map() map[string]any {
	out := map[string]any{}
	for _, l := range leaves(c) {
		m := out
		parts := strings.Split(l.key, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		v := l.v.Interface()
		if mods, ok := v.(Modules); ok {
			v = []string(mods)
			if mods.AllLinear() {
				v = AllLinear
			}
		}
		m[parts[len(parts)-1]] = v
	}
	if len(c.Monitor) > 0 {
		out["monitor"] = c.Monitor
	}
	if len(c.Data.ChatTemplateKwargs) > 0 {
		out["data"].(map[string]any)["chat_template_kwargs"] = c.Data.ChatTemplateKwargs
	}
	if len(c.Rewards) > 0 {
		var rs []any
		for _, r := range c.Rewards {
			rs = append(rs, map[string]any{"kind": "command", "name": r.Name, "command": r.Command, "weight": r.Weight, "timeout": r.Timeout.Seconds()})
		}
		out["rewards"] = rs
	}
	return out
}

// leaf is one settable value of the configuration.
type leaf struct {
	key  string // "beta", "lora.r"
	f    reflect.StructField
	v    reflect.Value
	grpo bool
}

// leaves lists every scalar setting of c in declaration order (Monitor and Rewards excluded).
func leaves(c *Config) []leaf {
	var out []leaf
	var walk func(rv reflect.Value, prefix string)
	walk = func(rv reflect.Value, prefix string) {
		t := rv.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("toml")
			if name == "" || name == "monitor" || name == "rewards" || name == "environments" || f.Type.Kind() == reflect.Map {
				continue // free-form tables (monitor, data.chat_template_kwargs) are kept as decoded
			}
			if f.Type.Kind() == reflect.Struct {
				walk(rv.Field(i), prefix+name+".")
				continue
			}
			_, grpo := f.Tag.Lookup("grpo")
			out = append(out, leaf{key: prefix + name, f: f, v: rv.Field(i), grpo: grpo})
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	return out
}

// tables lists the names of the tables of a Config ("lora", "quant", "monitor").
func tables() []string {
	var out []string
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name := f.Tag.Get("toml"); name != "" && (f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Map) {
			out = append(out, name)
		}
	}
	return out
}

func oneOf(s, list string) bool {
	for _, e := range strings.Split(list, ",") {
		if s == e {
			return true
		}
	}
	return false
}

// Reports reports whether [report] to names tracker (TRL's report_to spelling).
func (c *Config) Reports(tracker string) bool { return sliceHas(c.Report.To, tracker) }

func sliceHas(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}

func fmtValue(v any) string {
	switch v := v.(type) {
	case string:
		return quote(v)
	case Modules:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case float64:
		return formatFloat(v)
	case []float64:
		q := make([]string, len(v))
		for i, f := range v {
			q[i] = formatFloat(f)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// keys returns the sorted keys of m.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Changes lists, key by key in declaration order, the settings in which c differs from old
// ("max_steps: 10 → 20"), [monitor] thresholds included: what a resume reports when it goes
// on with another configuration than the checkpoint's.
func (c *Config) Changes(old *Config) []string {
	var out []string
	was := map[string]string{}
	for _, l := range leaves(old) {
		was[l.key] = fmtValue(l.v.Interface())
	}
	for _, l := range leaves(c) {
		if now := fmtValue(l.v.Interface()); now != was[l.key] {
			out = append(out, fmt.Sprintf("%s: %s → %s", l.key, was[l.key], now))
		}
	}
	for _, k := range keys(mergeKeys(old.Monitor, c.Monitor)) {
		show := func(m map[string]any) string {
			v, ok := m[k]
			if !ok {
				return "(default)"
			}
			return fmtValue(v)
		}
		if a, b := show(old.Monitor), show(c.Monitor); a != b {
			out = append(out, fmt.Sprintf("monitor.%s: %s → %s", k, a, b))
		}
	}
	if a, b := inlineTable(old.Data.ChatTemplateKwargs), inlineTable(c.Data.ChatTemplateKwargs); a != b {
		out = append(out, fmt.Sprintf("data.chat_template_kwargs: %s → %s", a, b))
	}
	return out
}

func mergeKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
