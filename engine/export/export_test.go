package export

import (
	"bufio"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/internal/testref"
)

// definitions is a testdata list of an engine's names at the pinned version: names, then
// "=key v1 v2…" for the values a key takes, "@Class a b…" for a class's arguments, and for
// OpenRLHF each flag's "switch", "nargs=N" and "choices=a,b".
type definitions struct {
	names   map[string]string // name → the rest of its line
	values  map[string][]string
	classes map[string][]string
}

func readDefinitions(t *testing.T, name string) definitions {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := definitions{names: map[string]string{}, values: map[string][]string{}, classes: map[string][]string{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "="):
			f := strings.Fields(line[1:])
			d.values[f[0]] = f[1:]
		case strings.HasPrefix(line, "@"):
			f := strings.Fields(line[1:])
			d.classes[f[0]] = f[1:]
		default:
			name, rest, _ := strings.Cut(line, " ")
			d.names[name] = rest
		}
	}
	if len(d.names) < 20 {
		t.Fatalf("%s: only %d names", name, len(d.names))
	}
	return d
}

// mathRun is the built-in math run as `rlhfstation export --config` builds it: preset math on
// the built-in model, its prompts.
func mathRun(t *testing.T) Run {
	t.Helper()
	path := filepath.Join(t.TempDir(), "math.toml")
	os.WriteFile(path, []byte("preset = \"math\"\nrun_name = \"math-run\"\n"), 0o644)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := config.Bind(fs)
	if err := fs.Parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	cfg, opts, err := engine.ResolveRun(flags)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := engine.RunPrompts(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return Run{Cfg: cfg, Name: "math-run", Model: opts.ModelDir, Examples: ex}
}

func export(t *testing.T, run Run, to string) (string, *Result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), to)
	res, err := Write(run, Options{To: to, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("sh", "-n", filepath.Join(out, "launch.sh")).Run(); err != nil {
		t.Errorf("launch.sh: sh -n: %v", err)
	}
	return out, res
}

// launchArgs are the words after the line that starts the engine in launch.sh, as sh splits
// them (the script's own variables left as written).
func launchArgs(t *testing.T, path, start string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(b), start+" \\\n")
	if !ok {
		t.Fatalf("%s: no %q line", path, start)
	}
	// sh itself splits the words (launch.sh's arguments: 3 nodes of 5 GPUs); one a line.
	script := "NNODES=3 GPUS_PER_NODE=5\nset -- " + body + "\nfor a; do printf '%s\\n' \"$a\"; done\n"
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("splitting the launch words: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// TestVerlOverridesAreVerls: every override of the math run's launch is a key of verl 0.7.0's
// ppo_trainer.yaml defaults, values that are names are among the names verl knows, and the
// settings carry the run's values.
func TestVerlOverridesAreVerls(t *testing.T) {
	def := readDefinitions(t, "verl-0.7.0.txt")
	run := mathRun(t)
	out, res := export(t, run, "verl")
	args := launchArgs(t, filepath.Join(out, "launch.sh"), "exec python3 -m verl.trainer.main_ppo")
	got := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Errorf("override %q has no =", a)
			continue
		}
		if _, known := def.names[k]; !known {
			t.Errorf("%s is not a key of verl 0.7.0's ppo_trainer.yaml", k)
		}
		if vals, named := def.values[k]; named {
			for _, x := range strings.Split(strings.Trim(v, "[]"), ",") {
				if !contains(vals, x) {
					t.Errorf("%s=%s: %q is not one of %v", k, v, x, vals)
				}
			}
		}
		if _, dup := got[k]; dup {
			t.Errorf("%s given twice", k)
		}
		got[k] = v
	}
	c := run.Cfg
	want := map[string]string{
		"algorithm.adv_estimator":                              "grpo",
		"actor_rollout_ref.rollout.n":                          strconv.Itoa(c.NumGenerations),
		"actor_rollout_ref.rollout.temperature":                show(c.Temperature),
		"data.max_response_length":                             strconv.Itoa(c.MaxCompletionLength),
		"data.max_prompt_length":                               strconv.Itoa(c.MaxPromptLength),
		"actor_rollout_ref.actor.loss_agg_mode":                "token-mean", // dapo
		"actor_rollout_ref.actor.clip_ratio_low":               show(c.Epsilon),
		"actor_rollout_ref.actor.clip_ratio_high":              show(c.EpsilonHigh),
		"actor_rollout_ref.actor.kl_loss_coef":                 show(c.Beta),
		"actor_rollout_ref.actor.use_kl_loss":                  strconv.FormatBool(c.Beta > 0),
		"actor_rollout_ref.model.lora_rank":                    strconv.Itoa(c.LoRA.R),
		"actor_rollout_ref.model.lora_alpha":                   show(c.LoRA.Alpha),
		"actor_rollout_ref.model.target_modules":               "all-linear",
		"actor_rollout_ref.rollout.load_format":                "safetensors",
		"actor_rollout_ref.actor.optim.lr":                     show(c.LearningRate),
		"trainer.total_training_steps":                         strconv.Itoa(c.MaxSteps),
		"custom_reward_function.path":                          "reward.py",
		"custom_reward_function.name":                          "compute_score",
		"trainer.nnodes":                                       "3",
		"trainer.n_gpus_per_node":                              "5",
		"actor_rollout_ref.model.path":                         run.Model,
		"data.train_files":                                     "train.parquet",
		"actor_rollout_ref.actor.policy_loss.loss_mode":        "vanilla",
		"algorithm.norm_adv_by_std_in_grpo":                    "true",
		"actor_rollout_ref.model.custom_chat_template":         "'" + strings.ReplaceAll(plainTemplate, "'", `\'`) + "'",
		"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": strconv.Itoa(c.PerDeviceTrainBatchSize * c.NumGenerations),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["actor_rollout_ref.model.lora_adapter_path"]; ok {
		t.Error("a run without checkpoints starts from an adapter")
	}
	checkTable(t, run, res)

	// The adapter to start from.
	run.Adapter = "/runs/x/checkpoints/step-000100"
	out, _ = export(t, run, "verl")
	if !contains(launchArgs(t, filepath.Join(out, "launch.sh"), "exec python3 -m verl.trainer.main_ppo"), "actor_rollout_ref.model.lora_adapter_path="+run.Adapter) {
		t.Error("no lora_adapter_path for a run with a checkpoint")
	}
}

// TestVerlLossTypes: loss_type and importance_sampling_level become verl's aggregation and
// policy loss.
func TestVerlLossTypes(t *testing.T) {
	run := mathRun(t)
	for _, c := range []struct{ loss, level, agg, mode string }{
		{"grpo", "token", "seq-mean-token-mean", "vanilla"},
		{"bnpo", "token", "token-mean", "vanilla"},
		{"dr_grpo", "token", "seq-mean-token-sum-norm", "vanilla"},
		{"dapo", "sequence", "token-mean", "gspo"},
		{"cispo", "token", "token-mean", "cispo"},
	} {
		cfg := *run.Cfg
		cfg.LossType, cfg.ImportanceSamplingLevel = c.loss, c.level
		r := run
		r.Cfg = &cfg
		out, _ := export(t, r, "verl")
		args := launchArgs(t, filepath.Join(out, "launch.sh"), "exec python3 -m verl.trainer.main_ppo")
		if !contains(args, "actor_rollout_ref.actor.loss_agg_mode="+c.agg) || !contains(args, "actor_rollout_ref.actor.policy_loss.loss_mode="+c.mode) {
			t.Errorf("%s/%s: %v", c.loss, c.level, args)
		}
	}
}

// TestVerlParquet: train.parquet read back by the npm readers (hyparquet, @dsnp/parquetjs) and
// by engine/data, holding verl's columns and the run's prompts and answers.
func TestVerlParquet(t *testing.T) {
	run := mathRun(t)
	out, _ := export(t, run, "verl")
	path := filepath.Join(out, "train.parquet")
	modules := testref.ParquetWriters()
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(modules, "node_modules", "hyparquet")); err != nil || serr != nil {
		testref.Missing(t, "node or the npm Parquet readers in %s (.ci/run installs them)", modules)
		return
	}
	b, err := exec.Command(node, filepath.Join("testdata", "read_parquet.mjs"), path, modules).Output()
	if err != nil {
		t.Fatalf("read_parquet.mjs: %v %s", err, stderrOf(err))
	}
	type row struct {
		DataSource string `json:"data_source"`
		Prompt     []struct{ Role, Content string }
		Ability    string
		Reward     struct {
			GroundTruth string `json:"ground_truth"`
			Style       string
		} `json:"reward_model"`
		Extra struct {
			Index  int
			Split  string
			Prompt string
			Answer string
		} `json:"extra_info"`
	}
	var doc map[string][]row
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, reader := range []string{"hyparquet", "parquetjs"} {
		rows := doc[reader]
		if len(rows) != len(run.Examples) {
			t.Fatalf("%s: %d rows, want %d", reader, len(rows), len(run.Examples))
		}
		for i, r := range rows {
			x := run.Examples[i]
			if r.DataSource != "rlhfstation/math" || r.Ability != "math" || len(r.Prompt) != 1 || r.Prompt[0].Role != "user" ||
				r.Prompt[0].Content != x.Prompt || r.Reward.GroundTruth != x.Answer || r.Reward.Style != "rule" ||
				r.Extra.Index != i || r.Extra.Split != "train" || r.Extra.Prompt != x.Prompt || r.Extra.Answer != x.Answer {
				t.Fatalf("%s row %d: %+v, want prompt %q answer %q", reader, i, r, x.Prompt, x.Answer)
			}
		}
	}
	if run.Examples[0].Answer == "" {
		t.Error("the math prompts carry no answers")
	}
	// engine/data reads it as a verl dataset.
	d, err := data.Load(path, data.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Examples) != len(run.Examples) || d.Examples[3].Answer != run.Examples[3].Answer || len(d.Examples[3].Messages) != 1 {
		t.Errorf("engine/data read %d examples: %+v", len(d.Examples), d.Examples[3])
	}
}

// TestTRLScript: train_grpo.py compiles; every GRPOConfig keyword is a field of TRL 1.9.0's
// GRPOConfig (or the TrainingArguments it inherits), LoraConfig's are PEFT 0.20.0's,
// BitsAndBytesConfig's are transformers'; names that are values are among TRL's.
func TestTRLScript(t *testing.T) {
	py := testref.Python3(t)
	trlDef := readDefinitions(t, "trl-1.9.0.txt")
	peftDef := readDefinitions(t, "peft-0.20.0.txt")
	run := mathRun(t)
	run.Adapter = "/runs/x/checkpoints/step-000100"
	out, res := export(t, run, "trl")
	script := filepath.Join(out, "train_grpo.py")
	if b, err := exec.Command(py, "-m", "py_compile", script).CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, b)
	}
	// The keyword arguments of each call, by Python's own parser.
	b, err := exec.Command(py, "-c", `
import ast, json, sys
calls = {}
for node in ast.walk(ast.parse(open(sys.argv[1]).read())):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        calls.setdefault(node.func.id, []).append({k.arg: ast.unparse(k.value) for k in node.keywords})
print(json.dumps(calls))
`, script).Output()
	if err != nil {
		t.Fatalf("%v %s", err, stderrOf(err))
	}
	var calls map[string][]map[string]string
	json.Unmarshal(b, &calls)
	for class, fields := range map[string]map[string]string{"GRPOConfig": trlDef.names, "LoraConfig": peftDef.names} {
		if len(calls[class]) != 1 {
			t.Fatalf("%d %s calls", len(calls[class]), class)
		}
		for k := range calls[class][0] {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s(%s=…): not a field at the pinned version", class, k)
			}
		}
	}
	for k := range calls["BitsAndBytesConfig"][0] {
		if !contains(trlDef.classes["BitsAndBytesConfig"], k) {
			t.Errorf("BitsAndBytesConfig(%s=…): not an argument", k)
		}
	}
	g := calls["GRPOConfig"][0]
	for _, k := range []string{"loss_type", "scale_rewards", "importance_sampling_level"} {
		if v := strings.Trim(g[k], "'"); !contains(trlDef.values[k], v) {
			t.Errorf("%s=%s: not one of %v", k, g[k], trlDef.values[k])
		}
	}
	c := run.Cfg
	want := map[string]string{"learning_rate": pyFloat(c.LearningRate), "num_generations": strconv.Itoa(c.NumGenerations),
		"beta": pyFloat(c.Beta), "max_completion_length": strconv.Itoa(c.MaxCompletionLength), "loss_type": `'dapo'`,
		"per_device_train_batch_size": strconv.Itoa(c.PerDeviceTrainBatchSize * c.NumGenerations), "max_steps": strconv.Itoa(c.MaxSteps)}
	for k, v := range want {
		if g[k] != v {
			t.Errorf("GRPOConfig %s=%s, want %s", k, g[k], v)
		}
	}
	if l := calls["LoraConfig"][0]; l["r"] != "16" || l["lora_alpha"] != "32" || l["target_modules"] != "'all-linear'" {
		t.Errorf("LoraConfig %v", l)
	}
	if q := calls["BitsAndBytesConfig"][0]; q["load_in_4bit"] != "True" || q["bnb_4bit_quant_type"] != "'nf4'" || q["bnb_4bit_use_double_quant"] != "True" {
		t.Errorf("BitsAndBytesConfig %v", q)
	}
	if s, _ := os.ReadFile(script); !strings.Contains(string(s), `ADAPTER = "/runs/x/checkpoints/step-000100"`) {
		t.Error("the adapter to start from is not in the script")
	}
	// train.jsonl: plain prompts (the built-in model has no chat template) and the answers.
	rows := readJSONL(t, filepath.Join(out, "train.jsonl"))
	if len(rows) != len(run.Examples) || rows[2]["prompt"] != run.Examples[2].Prompt || rows[2]["answer"] != run.Examples[2].Answer {
		t.Errorf("train.jsonl row 2: %v", rows[2])
	}
	checkTable(t, run, res)

	// With a chat template the prompts are conversational.
	run.ChatTemplate = true
	out, _ = export(t, run, "trl")
	rows = readJSONL(t, filepath.Join(out, "train.jsonl"))
	turns, _ := rows[0]["prompt"].([]any)
	if len(turns) != 1 || turns[0].(map[string]any)["role"] != "user" || turns[0].(map[string]any)["content"] != run.Examples[0].Prompt {
		t.Errorf("conversational prompt %v", rows[0]["prompt"])
	}
}

// TestOpenRLHFFlags: every flag of the launch is one of OpenRLHF 0.11.0's train_ppo_ray
// parser, with the number of values it takes and a value among its choices.
func TestOpenRLHFFlags(t *testing.T) {
	def := readDefinitions(t, "openrlhf-0.11.0.txt")
	run := mathRun(t)
	run.Cfg.Beta = 0.04
	out, res := export(t, run, "openrlhf")
	args := launchArgs(t, filepath.Join(out, "launch.sh"), "exec python3 -m openrlhf.cli.train_ppo_ray")
	got := map[string][]string{}
	for i := 0; i < len(args); {
		name := args[i]
		spec, ok := def.names[name]
		if !ok {
			t.Fatalf("%s is not a flag of OpenRLHF 0.11.0's train_ppo_ray", name)
		}
		j := i + 1
		for j < len(args) && !strings.HasPrefix(args[j], "--") {
			j++
		}
		vals := args[i+1 : j]
		want := 1
		for _, f := range strings.Fields(spec) {
			switch {
			case f == "switch":
				want = 0
			case strings.HasPrefix(f, "nargs="):
				if n, err := strconv.Atoi(f[6:]); err == nil {
					want = n
				} else {
					want = -1 // * or +
				}
			case strings.HasPrefix(f, "choices="):
				for _, v := range vals {
					if !contains(strings.Split(f[8:], ","), v) {
						t.Errorf("%s %s: not one of %s", name, v, f[8:])
					}
				}
			}
		}
		if want >= 0 && len(vals) != want {
			t.Errorf("%s takes %d value(s), given %v", name, want, vals)
		}
		if _, dup := got[name]; dup {
			t.Errorf("%s given twice", name)
		}
		got[name] = vals
		i = j
	}
	c := run.Cfg
	for k, v := range map[string]string{
		"--algo.advantage.estimator": "group_norm", "--reward.remote_url": DefaultRewardURL,
		"--rollout.n_samples_per_prompt": strconv.Itoa(c.NumGenerations), "--ds.lora.rank": strconv.Itoa(c.LoRA.R),
		"--ds.lora.alpha": "32", "--data.input_key": "prompt", "--data.label_key": "answer",
		"--algo.kl.init_coef": "0.04", "--algo.kl.estimator": "k3", "--actor.eps_clip_low_high": show(c.Epsilon) + " " + show(c.EpsilonHigh),
		"--rollout.max_new_tokens": strconv.Itoa(c.MaxCompletionLength), "--actor.num_nodes": "3", "--vllm.num_engines": "15",
	} {
		if strings.Join(got[k], " ") != v {
			t.Errorf("%s %v, want %s", k, got[k], v)
		}
	}
	for _, sw := range []string{"--ds.load_in_4bit", "--algo.kl.use_loss"} {
		if _, ok := got[sw]; !ok {
			t.Errorf("%s missing", sw)
		}
	}
	if _, ok := got["--ds.lora.target_modules"]; ok {
		t.Error("all-linear given as a module name")
	}
	rows := readJSONL(t, filepath.Join(out, "train.jsonl"))
	if len(rows) != len(run.Examples) || rows[5]["prompt"] != run.Examples[5].Prompt || rows[5]["answer"] != run.Examples[5].Answer {
		t.Errorf("train.jsonl row 5: %v", rows[5])
	}
	checkTable(t, run, res)
}

// checkTable: every key of the configuration is in the table, mapped or with a reason, and
// mapping.md is written.
func checkTable(t *testing.T, run Run, res *Result) {
	t.Helper()
	flat := map[string]any{}
	flatten("", run.Cfg.Map(), flat)
	seen := map[string]bool{}
	for _, r := range append(append([]Row(nil), res.Mapped...), res.None...) {
		for _, k := range strings.Split(r.Ours, ",") {
			seen[k] = true
		}
	}
	for _, r := range res.None {
		if r.Note == "" || r.Theirs != "" {
			t.Errorf("unmapped %+v has no reason", r)
		}
	}
	for k := range flat {
		if !seen[k] && !seen[strings.SplitN(k, ".", 2)[0]] {
			t.Errorf("%s: %s is not in the table", res.Engine, k)
		}
	}
	md, err := os.ReadFile(filepath.Join(res.Out, "mapping.md"))
	if err != nil || !strings.Contains(string(md), res.Version) || !strings.Contains(string(md), "## No equivalent in "+res.Engine) {
		t.Errorf("mapping.md: %v", err)
	}
}

func readJSONL(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestVerlRewardCompiles: reward.py compiles and defines compute_score with verl's arguments.
func TestVerlRewardCompiles(t *testing.T) {
	py := testref.Python3(t)
	out, _ := export(t, mathRun(t), "verl")
	if b, err := exec.Command(py, "-m", "py_compile", filepath.Join(out, "reward.py")).CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, b)
	}
	src, _ := os.ReadFile(filepath.Join(out, "reward.py"))
	if !regexp.MustCompile(`def compute_score\(data_source, solution_str, ground_truth, extra_info=None`).Match(src) {
		t.Error("compute_score's signature is not verl's")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
