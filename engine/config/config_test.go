package config

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeTOML(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "run.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c := Default()
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"learning_rate", c.LearningRate, 1e-5},
		{"beta", c.Beta, 0.0},
		{"importance_sampling_level", c.ImportanceSamplingLevel, "token"},
		{"mask_truncated_completions", c.MaskTruncatedCompletions, false},
		{"top_entropy_quantile", c.TopEntropyQuantile, 1.0},
		{"steps_per_generation", c.GenerationSteps(), 1},
		{"reward_weights", len(c.RewardWeights), 0},
		{"sapo_temperature_neg", c.SAPOTemperatureNeg, 1.05},
		{"sapo_temperature_pos", c.SAPOTemperaturePos, 1.0},
		{"vespo_k_pos", c.VESPOKPos, 2.0},
		{"vespo_lambda_pos", c.VESPOLambdaPos, 3.0},
		{"vespo_k_neg", c.VESPOKNeg, 3.0},
		{"vespo_lambda_neg", c.VESPOLambdaNeg, 2.0},
		{"epsilon", c.Epsilon, 0.2},
		{"epsilon_high", c.EpsilonHigh, 0.2},
		{"num_generations", c.NumGenerations, 8},
		{"max_completion_length", c.MaxCompletionLength, 128},
		{"temperature", c.Temperature, 1.0},
		{"top_p", c.TopP, 1.0},
		{"top_k", c.TopK, 0},
		{"num_iterations", c.NumIterations, 1},
		{"scale_rewards", c.ScaleRewards, "group"},
		{"loss_type", c.LossType, "dapo"},
		{"max_grad_norm", c.MaxGradNorm, 1.0},
		{"preset", c.Preset, "story"},
		{"device", c.Device, "auto"},
		{"output_dir", c.OutputDir, "runs"},
		{"lora.r", c.LoRA.R, 16},
		{"lora.lora_alpha", c.LoRA.Alpha, 32.0},
		{"lora.lora_dropout", c.LoRA.Dropout, 0.0},
		{"lora.target_modules", c.LoRA.TargetModules.AllLinear(), true},
		{"lora.use_rslora", c.LoRA.UseRSLoRA, false},
		{"lora.init_lora_weights", c.LoRA.InitLoRAWeights, true},
		{"quant.type", c.Quant.Type, "nf4"},
		{"quant.blocksize", c.Quant.BlockSize, 64},
		{"quant.double_quant", c.Quant.DoubleQuant, true},
	}
	for _, k := range checks {
		if k.got != k.want {
			t.Errorf("%s = %v, want %v", k.name, k.got, k.want)
		}
	}
	if c.Origin("beta") != "default" {
		t.Errorf("origin %q", c.Origin("beta"))
	}
}

func TestEpsilonHighFollowsEpsilon(t *testing.T) {
	c, err := Load(writeTOML(t, "epsilon = 0.3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.EpsilonHigh != 0.3 {
		t.Errorf("epsilon_high = %v, want epsilon 0.3", c.EpsilonHigh)
	}
	c, err = Load(writeTOML(t, "epsilon = 0.2\nepsilon_high = 0.28\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.EpsilonHigh != 0.28 {
		t.Errorf("epsilon_high = %v, want 0.28", c.EpsilonHigh)
	}
}

func newFlags(t *testing.T, args ...string) *Flags {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestPrecedence(t *testing.T) {
	presets := func(name string) (map[string]any, string, error) {
		switch name {
		case "math":
			return map[string]any{"beta": 0.1, "max_steps": int64(300), "temperature": 0.7, "num_generations": int64(4)}, "preset math [grpo]", nil
		case "story":
			return map[string]any{"beta": 0.02}, "preset story [grpo]", nil
		}
		return nil, "", os.ErrNotExist
	}
	path := writeTOML(t, `preset = "math"
max_steps = 200        # over the preset
temperature = 0.9
[lora]
r = 8
`)
	f := newFlags(t, "--config", path, "--steps", "50", "--seed", "7", "--batch-size", "2")
	c, err := f.Resolve(presets)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		key       string
		got, want any
		origin    string
	}{
		{"preset", c.Preset, "math", path + ":1"},
		{"beta", c.Beta, 0.1, "preset math [grpo]"},                    // preset over default
		{"num_generations", c.NumGenerations, 4, "preset math [grpo]"}, // preset over default
		{"temperature", c.Temperature, 0.9, path + ":3"},               // file over preset
		{"max_steps", c.MaxSteps, 50, "--steps"},                       // flag over file over preset
		{"seed", c.Seed, int64(7), "--seed"},                           // flag over default
		{"per_device_train_batch_size", c.PerDeviceTrainBatchSize, 2, "--batch-size"},
		{"lora.r", c.LoRA.R, 8, path + ":5"},
		{"learning_rate", c.LearningRate, 1e-5, "default"}, // a flag not given keeps the lower layer
	}
	for _, k := range checks {
		if k.got != k.want || c.Origin(k.key) != k.origin {
			t.Errorf("%s = %v from %q, want %v from %q", k.key, k.got, c.Origin(k.key), k.want, k.origin)
		}
	}

	// --preset picks the preset over the file's choice.
	c, err = newFlags(t, "--config", path, "--preset", "story").Resolve(presets)
	if err != nil {
		t.Fatal(err)
	}
	if c.Preset != "story" || c.Beta != 0.02 || c.NumGenerations != 8 || c.MaxSteps != 200 {
		t.Errorf("--preset story: preset %q beta %v G %d steps %d", c.Preset, c.Beta, c.NumGenerations, c.MaxSteps)
	}
	if _, err := newFlags(t, "--preset", "nope").Resolve(presets); err == nil {
		t.Error("unknown preset accepted")
	}
}

func TestResumeUsesRunConfig(t *testing.T) {
	run := t.TempDir()
	c := Default()
	c.MaxSteps, c.Seed, c.Preset = 40, 9, "code"
	if err := c.Write(filepath.Join(run, "config.toml")); err != nil {
		t.Fatal(err)
	}
	got, err := newFlags(t, "--resume", run, "--steps", "80").Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxSteps != 80 || got.Seed != 9 || got.Preset != "code" {
		t.Errorf("resumed config: steps %d seed %d preset %q", got.MaxSteps, got.Seed, got.Preset)
	}
}

func TestPresetTableStrict(t *testing.T) {
	c := Default()
	err := c.Apply(map[string]any{"beta": 0.1, "lr": 1e-4, "model": "x", "num_generations": "8"}, "preset math [grpo]")
	if err == nil {
		t.Fatal("bad preset table accepted")
	}
	for _, want := range []string{
		`preset math [grpo]: unknown key "lr"; did you mean "learning_rate"?`,
		`preset math [grpo]: key "model" is not a GRPO setting`,
		`preset math [grpo]: num_generations: want an integer, got the string "8"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestUnknownKeyHasLine(t *testing.T) {
	path := writeTOML(t, `# a run
learning_rate = 2e-5
betta = 0.1

[lora]
r = 8
rank = 4
[quant]
type = "nf4"
[grpo]
beta = 0.1
lora_rank = 3
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		path + `:3: unknown key "betta"; did you mean "beta"?`,
		path + `:7: unknown key "lora.rank"`,
		path + `:12: [grpo] lora_rank: not a GRPO setting`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

func TestWrongTypeHasLine(t *testing.T) {
	path := writeTOML(t, `seed = 1
num_generations = 8.5
beta = "high"

[lora]
use_rslora = "yes"
target_modules = ["q_proj", 3]
[quant]
blocksize = 64
double_quant = 1
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("wrong types accepted")
	}
	for _, want := range []string{
		path + `:2: num_generations: want an integer, got the float 8.5`,
		path + `:3: beta: want a number, got the string "high"`,
		path + `:6: lora.use_rslora: want true or false, got the string "yes"`,
		path + `:7: lora.target_modules: want a list of module names, element 1 is the integer 3`,
		path + `:10: quant.double_quant: want true or false, got the integer 1`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// A table given as a value, and a syntax error, also name the line.
	_, err = Load(writeTOML(t, "beta = 0.1\nlora = 3\n"))
	if err == nil || !strings.Contains(err.Error(), `:2: lora: want a table [lora], got the integer 3`) {
		t.Errorf("table as value: %v", err)
	}
	_, err = Load(writeTOML(t, "beta = 0.1\nseed = = 3\n"))
	if err == nil || !strings.Contains(err.Error(), "run.toml:2: ") {
		t.Errorf("syntax error: %v", err)
	}
}

func TestValidation(t *testing.T) {
	path := writeTOML(t, `num_generations = 1
top_p = 0.0
loss_type = "ppo"
scale_rewards = "batch"
device = "tpu"
warmup_ratio = 1.5
[lora]
target_modules = ["all-linear", "q_proj"]
lora_dropout = 1.0
[quant]
blocksize = 48
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("invalid values accepted")
	}
	for _, want := range []string{
		"num_generations = 1 (" + path + ":1): must be at least 2",
		"top_p = 0.0 (" + path + ":2): must be in (0, 1]",
		`loss_type = "ppo" (` + path + ":3): must be one of grpo, bnpo, dr_grpo, dapo",
		`device = "tpu"`,
		"warmup_ratio = 1.5",
		`lora.target_modules = ["all-linear", "q_proj"]`,
		"lora.lora_dropout = 1.0",
		"quant.blocksize = 48 (" + path + ":11): must be a power of two from 32 to 4096",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "scale_rewards") {
		t.Errorf("valid scale_rewards rejected:\n%v", err)
	}

	// Flags are validated too, and named.
	_, err = newFlags(t, "--num-generations", "1").Resolve(nil)
	if err == nil || !strings.Contains(err.Error(), "num_generations = 1 (--num-generations)") {
		t.Errorf("flag validation: %v", err)
	}
}

func TestScaleRewardsBoolean(t *testing.T) {
	c, err := Load(writeTOML(t, "scale_rewards = false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.ScaleRewards != "none" {
		t.Errorf("scale_rewards false → %q, want none", c.ScaleRewards)
	}
	// TRL's boolean forms in a preset's [grpo] table too: true is "group".
	c = Default()
	c.ScaleRewards = "batch"
	if err := c.Apply(map[string]any{"scale_rewards": true}, "preset p [grpo]"); err != nil || c.ScaleRewards != "group" {
		t.Errorf("scale_rewards true → %q (%v), want group", c.ScaleRewards, err)
	}
}

func TestGRPOOptionsValidation(t *testing.T) {
	path := writeTOML(t, `importance_sampling_level = "batch"
top_entropy_quantile = 1.5
reward_weights = [1, -0.5]
loss_type = "cispo"
steps_per_generation = -1
sapo_temperature_neg = 0
epsilon_high = 0.5
`)
	_, err := Load(path)
	if err == nil {
		t.Fatal("invalid values accepted")
	}
	for _, want := range []string{
		`importance_sampling_level = "batch" (` + path + ":1): must be one of token, sequence",
		"top_entropy_quantile = 1.5 (" + path + ":2): must be in [0, 1]",
		"reward_weights = [1.0, -0.5] (" + path + ":3): must be finite numbers not below 0",
		"epsilon_high = 0.5 (" + path + ":7): loss_type cispo caps the importance weight itself",
		"steps_per_generation = -1 (" + path + ":5): must be at least 0",
		"sapo_temperature_neg = 0.0 (" + path + ":6): must be greater than 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	_, err = Load(writeTOML(t, "reward_weights = [1, \"x\"]\n"))
	if err == nil || !strings.Contains(err.Error(), `:1: reward_weights: want a list of numbers, element 1 is the string "x"`) {
		t.Errorf("reward_weights with a string: %v", err)
	}
	_, err = Load(writeTOML(t, "reward_weights = 1.0\n"))
	if err == nil || !strings.Contains(err.Error(), "reward_weights: want a list of numbers, got the float 1.0") {
		t.Errorf("reward_weights as a number: %v", err)
	}
	c, err := Load(writeTOML(t, "loss_type = \"cispo\"\nepsilon_high = 5.0\n"))
	if err != nil || c.EpsilonHigh != 5 {
		t.Errorf("cispo with epsilon_high 5: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	path := writeTOML(t, `model = "/models/tiny \"q\""
data = "prompts.jsonl"
preset = "math"
accept_baselines = true
device = "cpu"
run_name = "exp-1"
learning_rate = 3e-6
beta = 0.0
epsilon_high = 0.28
num_generations = 4
top_k = 50
top_p = 0.95
loss_type = "dr_grpo"
importance_sampling_level = "sequence"
mask_truncated_completions = true
top_entropy_quantile = 0.2
reward_weights = [1, 0.5, 0.0]
steps_per_generation = 2
lr_scheduler_type = "cosine"
warmup_ratio = 0.1
seed = -3
weight_decay = 0.01
adam_epsilon = 1e-6

[lora]
r = 4
lora_alpha = 8
lora_dropout = 0.05
target_modules = ["q_proj", "v_proj"]
use_rslora = true

[quant]
type = "fp4"
blocksize = 128
double_quant = false

[monitor]
kl_max = 0.3
window = 30
rules = ["kl", "entropy"]
[monitor.grad_norm]
max = 8.0
`)
	a, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "sub", "config.toml")
	os.MkdirAll(filepath.Dir(out), 0o755)
	if err := a.Write(out); err != nil {
		t.Fatal(err)
	}
	b, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	a.origin, b.origin = nil, nil
	if !reflect.DeepEqual(a, b) {
		t.Errorf("round trip differs:\n%s\n----\n%s", a.Encode(), b.Encode())
	}
	if a.Hash() != b.Hash() {
		t.Error("hash differs after round trip")
	}
	if a.Model != `/models/tiny "q"` || a.LoRA.Alpha != 8 || a.Seed != -3 || a.Monitor["window"] != int64(30) {
		t.Errorf("values: model %q alpha %v seed %d monitor %v", a.Model, a.LoRA.Alpha, a.Seed, a.Monitor)
	}
	if a.ImportanceSamplingLevel != "sequence" || !a.MaskTruncatedCompletions || a.TopEntropyQuantile != 0.2 ||
		!reflect.DeepEqual(a.RewardWeights, []float64{1, 0.5, 0}) || a.GenerationSteps() != 2 {
		t.Errorf("GRPO options: level %q mask %v rho %v weights %v steps_per_generation %d", a.ImportanceSamplingLevel,
			a.MaskTruncatedCompletions, a.TopEntropyQuantile, a.RewardWeights, a.GenerationSteps())
	}
	// Defaults round-trip too, all-linear as a string.
	d := Default()
	if err := d.Write(out); err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(out)
	if !strings.Contains(string(text), `target_modules = "all-linear"`) {
		t.Errorf("all-linear written as:\n%s", text)
	}
	e, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if e.Hash() != d.Hash() {
		t.Errorf("defaults hash differs after round trip")
	}
	e.MaxSteps++
	if e.Hash() == d.Hash() {
		t.Error("hash ignores max_steps")
	}
	// No temp file is left behind.
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want 1", len(ents))
	}
}

func TestMap(t *testing.T) {
	m := Default().Map()
	if m["beta"] != 0.0 || m["lora"].(map[string]any)["target_modules"] != AllLinear || m["quant"].(map[string]any)["blocksize"] != 64 {
		t.Errorf("map %v", m)
	}
}

func TestDataTable(t *testing.T) {
	p := writeTOML(t, "seed = 1\ndata = \"p.jsonl\"\n")
	c, err := Load(p)
	if err != nil || c.Data.Path != "p.jsonl" || c.Origin("data.path") != p+":2" {
		t.Fatalf("data shorthand: %v %+v %s", err, c.Data, c.Origin("data.path"))
	}
	p = writeTOML(t, "[data]\npath = \"shards\"\nprompt_key = \"prompt\"\nanswer_key = \"reward_model.ground_truth\"\n")
	c, err = Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Data{Path: "shards", PromptKey: "prompt", AnswerKey: "reward_model.ground_truth", ChatTemplate: "auto"}); !reflect.DeepEqual(c.Data, want) {
		t.Errorf("[data] = %+v, want %+v", c.Data, want)
	}
	if !strings.Contains(string(c.Encode()), "\n[data]\npath = \"shards\"\nprompt_key = \"prompt\"\nanswer_key = \"reward_model.ground_truth\"\n") {
		t.Errorf("encoded:\n%s", c.Encode())
	}
	for _, tc := range []struct{ text, want string }{
		{"prompt_key = \"q\"\n", `:1: unknown key "prompt_key"; did you mean "data.prompt_key"?`},
		{"[data]\nanswer_kye = \"a\"\n", `:2: unknown key "data.answer_kye"; did you mean "data.answer_key"?`},
		{"data = 5\n", `:1: data: want a file name or a table [data], got the integer 5`},
		{"[data]\nprompt_key = 1\n", `:2: data.prompt_key: want a string, got the integer 1`},
	} {
		if _, err := Load(writeTOML(t, tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

// Every setting of Config is a flag under its TOML key (TRL's and PEFT's names), listed in -h
// with its default, and setting it changes that key: the flag list is the struct's.
func TestEveryKeyIsAFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := Bind(fs)
	var help strings.Builder
	f.PrintDefaults(&help)
	def := Default()
	var want []string
	for _, l := range leaves(def) {
		want = append(want, l.key)
		fl := fs.Lookup(l.key)
		if fl == nil {
			t.Errorf("config key %s has no flag --%s", l.key, l.key)
			continue
		}
		if d := fmtFlagValue(l.v.Interface()); d != "" && !strings.Contains(help.String(), "--"+l.key+" ") {
			t.Errorf("-h does not list --%s", l.key)
		} else if d != "" && fl.DefValue != d {
			t.Errorf("--%s shows default %q, Default() has %q", l.key, fl.DefValue, d)
		}
		if dashed := strings.ReplaceAll(l.key, "_", "-"); fs.Lookup(dashed) == nil {
			t.Errorf("--%s has no dashed alias --%s", l.key, dashed)
		}
	}
	if got := f.Keys(); !reflect.DeepEqual(got, want) {
		t.Errorf("flags %v\nconfig keys %v", got, want)
	}
	// Each flag reaches its key: set every one to a value other than its default.
	var args []string
	for _, l := range leaves(def) {
		var v string
		switch l.v.Interface().(type) {
		case Modules:
			v = "q_proj,v_proj"
		case []float64:
			v = "1,2"
		case []string:
			v = "wandb"
		case string:
			if enum := l.f.Tag.Get("enum"); enum != "" {
				opts := strings.Split(enum, ",")
				v = opts[len(opts)-1]
				if v == l.v.String() {
					v = opts[0]
				}
			} else {
				v = "x" + l.v.String()
			}
		case bool:
			v = fmt.Sprint(!l.v.Bool())
		case int, int64:
			v = fmt.Sprint(l.v.Int() + 3)
		case float64:
			v = fmt.Sprint(l.v.Float()/2 + 0.125)
		}
		args = append(args, "--"+l.key+"="+v)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := f.ApplyTo(c); err != nil {
		t.Fatal(err)
	}
	was := map[string]string{}
	for _, l := range leaves(def) {
		was[l.key] = fmtValue(l.v.Interface())
	}
	for _, l := range leaves(c) {
		if now := fmtValue(l.v.Interface()); now == was[l.key] {
			t.Errorf("--%s did not change %s (%s)", l.key, l.key, now)
		}
		if c.Origin(l.key) != "--"+l.key {
			t.Errorf("%s's origin %q", l.key, c.Origin(l.key))
		}
	}
}

// loss_type cispo without epsilon_high takes ScaleRL's cap, 5, and runs; with it, the value given.
func TestCISPOEpsilonHigh(t *testing.T) {
	c, err := newFlags(t, "--loss-type", "cispo").Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.EpsilonHigh != CISPOEpsilonHigh {
		t.Errorf("cispo's epsilon_high %v, want %v", c.EpsilonHigh, CISPOEpsilonHigh)
	}
	if c, err = newFlags(t, "--loss_type", "cispo", "--epsilon_high", "3").Resolve(nil); err != nil || c.EpsilonHigh != 3 {
		t.Fatalf("--epsilon_high 3: %v %v", c, err)
	}
	if _, err = newFlags(t, "--loss_type", "cispo", "--epsilon_high", "0.2").Resolve(nil); err == nil || !strings.Contains(err.Error(), "--epsilon_high") {
		t.Fatalf("cispo with a cap of 0.2: %v", err)
	}
}

// A run config may hold a [grpo] table, as a preset does: its keys are the GRPO settings.
func TestGRPOTableInRunConfig(t *testing.T) {
	path := writeTOML(t, "seed = 3\n[grpo]\nbeta = 0.05\nnum_generations = 4\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Beta != 0.05 || c.NumGenerations != 4 || c.Origin("beta") != path+":3" {
		t.Errorf("beta %v (%s), num_generations %v", c.Beta, c.Origin("beta"), c.NumGenerations)
	}
	_, err = Load(writeTOML(t, "[grpo]\nmodel = \"x\"\n"))
	if err == nil || !strings.Contains(err.Error(), "[grpo] model: not a GRPO setting") {
		t.Errorf("a non-GRPO key in [grpo]: %v", err)
	}
}
