// Package export writes a run's setup for a distributed engine (DESIGN §17): verl, TRL or
// OpenRLHF. Each gets the prompts in its own data layout, a launch ready to run (verl's
// main_ppo Hydra overrides, a TRL GRPOTrainer script, OpenRLHF's train_ppo_ray flags) with the
// run's settings under that engine's names, rewards through `rlhfstation serve-reward`, the
// LoRA adapter to start from, and a mapping table of our key, theirs and the value, with every
// key that has no equivalent and why.
//
// The names written are those of the engines' public sources at the versions below; the tests
// check every one against lists of those definitions kept in testdata.
package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/internal/atomicfile"
)

// The versions the export targets: the release tags whose definitions were read.
const (
	VerlVersion     = "verl 0.7.0"
	TRLVersion      = "TRL 1.9.0 (transformers 5.x TrainingArguments, PEFT 0.20.0)"
	OpenRLHFVersion = "OpenRLHF 0.11.0"
)

// Engines are the targets, in the order shown.
var Engines = []string{"verl", "trl", "openrlhf"}

// DefaultRewardURL is where the launch expects `rlhfstation serve-reward`.
const DefaultRewardURL = "http://127.0.0.1:5000/get_reward"

// Run is what is exported.
type Run struct {
	Cfg      *config.Config
	Name     string         // the run's name (its folder's)
	Model    string         // the Hugging Face model folder, absolute
	Adapter  string         // a PEFT adapter folder to start from ("" for a fresh adapter)
	Examples []data.Example // the prompts
	// ChatTemplate reports whether prompts are rendered with a chat template (the model has
	// one and data.chat_template is not "none"): prompts are then written as chat lists.
	ChatTemplate bool
}

// Options say where and how.
type Options struct {
	To        string // verl, trl or openrlhf
	Out       string // the folder written
	RewardURL string // serve-reward's /get_reward (DefaultRewardURL when "")
}

// Row is one line of the mapping table. Theirs is "" for a key with no equivalent; Note says
// why, or how the value was derived.
type Row struct {
	Ours   string `json:"ours"`
	Theirs string `json:"theirs"`
	Value  string `json:"value"`
	Note   string `json:"note,omitempty"`
}

// Result says what was written.
type Result struct {
	Engine  string   `json:"engine"`
	Version string   `json:"version"`
	Out     string   `json:"out"`
	Files   []string `json:"files"`
	Launch  string   `json:"launch"` // the command that starts the run
	Mapped  []Row    `json:"mapped"`
	None    []Row    `json:"unmapped"`
}

// Write exports run for o.To into o.Out.
func Write(run Run, o Options) (*Result, error) {
	if o.RewardURL == "" {
		o.RewardURL = DefaultRewardURL
	}
	if len(run.Examples) == 0 {
		return nil, fmt.Errorf("export: the run has no prompts")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	m := &mapping{cfg: run.Cfg, used: map[string]bool{}}
	var files []file
	var err error
	res := &Result{Engine: o.To, Out: o.Out}
	switch o.To {
	case "verl":
		res.Version = VerlVersion
		files, err = verl(run, o, m)
	case "trl":
		res.Version = TRLVersion
		files, err = trl(run, o, m)
	case "openrlhf":
		res.Version = OpenRLHFVersion
		files, err = openrlhf(run, o, m)
	default:
		return nil, fmt.Errorf("export: --to %q: want one of %s", o.To, strings.Join(Engines, ", "))
	}
	if err != nil {
		return nil, err
	}
	m.rest(o.To)
	res.Mapped, res.None = m.rows, m.none
	files = append(files, file{"mapping.md", []byte(Table(res)), 0o644})
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(o.Out, f.name), f.data, f.perm); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		res.Files = append(res.Files, f.name)
	}
	res.Launch = filepath.Join(o.Out, "launch.sh")
	return res, nil
}

type file struct {
	name string
	data []byte
	perm os.FileMode
}

// mapping gathers the table while an engine's settings are written.
type mapping struct {
	cfg  *config.Config
	rows []Row
	none []Row
	used map[string]bool // our keys accounted for
}

// set records that our key (or keys, comma-separated) became theirs = value.
func (m *mapping) set(ours, theirs string, value any, note ...string) {
	m.rows = append(m.rows, Row{Ours: ours, Theirs: theirs, Value: show(value), Note: strings.Join(note, " ")})
	for _, k := range strings.Split(ours, ",") {
		m.used[strings.TrimSpace(k)] = true
	}
}

// unmapped records that our key has no equivalent, and why.
func (m *mapping) unmapped(ours string, value any, why string) {
	m.none = append(m.none, Row{Ours: ours, Value: show(value), Note: why})
	m.used[ours] = true
}

// rest lists the keys of the configuration not accounted for: rlhfstation's own settings.
func (m *mapping) rest(engine string) {
	flat := map[string]any{}
	flatten("", m.cfg.Map(), flat)
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if m.used[k] || m.used[strings.SplitN(k, ".", 2)[0]] {
			continue
		}
		why, ok := ownSettings[k]
		if !ok {
			why = unusedReason(k, m.cfg.LossType)
		}
		if why == "" {
			why = "no equivalent in " + engine
		}
		m.unmapped(k, flat[k], why)
	}
}

// ownSettings are keys that belong to rlhfstation itself, with the reason no engine takes them.
var ownSettings = map[string]string{
	"preset":           "the rewards come from serve-reward, which is started with this preset",
	"baselines":        "the perplexity baselines are serve-reward's (--baselines)",
	"accept_baselines": "a serve-reward setting (--accept-baselines)",
	"device":           "the engines run on their GPUs",
	"output_dir":       "the engine writes its own output folder",
	"run_name":         "used as the experiment's name",
	"data.path":        "the prompts are exported into the engine's data file",
	"data.prompt_key":  "the prompts are exported under the engine's own key",
	"data.answer_key":  "the answers are exported under the engine's own key",
	"logging_steps":    "the engine logs every step",
	"monitor":          "rlhfstation's anomaly rules: `rlhfstation watch` applies them to the engine's logs",
	"report.to":        "rlhfstation's own trackers",
	"rewards":          "command rewards run inside serve-reward, not in the engine",
	"environments":     "rlhfstation's environment protocol: verl's agent loop, TRL's environment_factory and OpenRLHF's agent functions each have their own",
}

// unusedReason says why a GRPO key this run leaves at rest needs no counterpart ("" when none
// applies).
func unusedReason(key, lossType string) string {
	switch {
	case key == "filter_groups":
		return "dynamic sampling is off"
	case key == "max_num_gen_batches":
		return "a bound of rlhfstation's dynamic sampling"
	case key == "min_p":
		return "0: off"
	case key == "delta" || key == "off_policy_mask_threshold":
		return "0: off"
	case strings.HasPrefix(key, "entropy_coef_") || key == "entropy_target" || key == "use_adaptive_entropy":
		return "the adaptive entropy controller's; off in this run"
	case key == "reward_weights":
		return "the preset's weights apply inside serve-reward, which returns one combined reward"
	case key == "steps_per_generation":
		return "0: one generation batch per optimizer step, as the engine does"
	case key == "save_total_limit":
		return "0 keeps every checkpoint, the engine's default"
	case key == "warmup_steps":
		return "0: the warm-up is warmup_ratio's"
	case key == "warmup_ratio":
		return "warmup_steps is set and used"
	case strings.HasPrefix(key, "sapo_") && lossType != "sapo":
		return "SAPO's temperatures; this run's loss_type is " + lossType
	case strings.HasPrefix(key, "vespo_") && lossType != "vespo":
		return "VESPO's parameters; this run's loss_type is " + lossType
	}
	return ""
}

func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && k != "monitor" && k != "chat_template_kwargs" {
			flatten(key, sub, out)
			continue
		}
		out[key] = v
	}
}

// show formats a value for the table.
func show(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []string:
		return "[" + strings.Join(v, ", ") + "]"
	case config.Modules:
		return "[" + strings.Join(v, ", ") + "]"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Table is the mapping as Markdown: the mapped keys, then those with no equivalent.
func Table(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# rlhfstation → %s\n\nTargets %s (the definitions read from its public source at that version).\n\n", r.Engine, r.Version)
	b.WriteString("| ours | theirs | value | note |\n| --- | --- | --- | --- |\n")
	for _, row := range r.Mapped {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(row.Ours), cell(row.Theirs), cell(row.Value), cell(row.Note))
	}
	fmt.Fprintf(&b, "\n## No equivalent in %s\n\n| ours | value | why |\n| --- | --- | --- |\n", r.Engine)
	for _, row := range r.None {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(row.Ours), cell(row.Value), cell(row.Note))
	}
	return b.String()
}

func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// messages are an example's prompt as chat turns.
func messages(x data.Example) []data.Message {
	if len(x.Messages) > 0 {
		return x.Messages
	}
	return []data.Message{{Role: "user", Content: x.Prompt}}
}

// text is an example's prompt as plain text (chat turns joined, for a model with no template).
func text(x data.Example) string {
	if x.Prompt != "" || len(x.Messages) == 0 {
		return x.Prompt
	}
	var b strings.Builder
	for _, m := range x.Messages {
		b.WriteString(m.Content)
	}
	return b.String()
}

// promptRows are the rows of train.jsonl for TRL and OpenRLHF: each example's columns, its
// prompt (as chat turns when the model has a template, else plain text) and its answer.
func promptRows(run Run) []map[string]any {
	rows := make([]map[string]any, len(run.Examples))
	for i, x := range run.Examples {
		r := map[string]any{}
		for k, v := range x.Extra {
			r[k] = v
		}
		r["prompt"] = text(x)
		if run.ChatTemplate {
			r["prompt"] = turns(x)
		}
		r["answer"] = x.Answer
		rows[i] = r
	}
	return rows
}

// jsonl writes rows as JSON lines.
func jsonl(rows []map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '_' || r == '-' || r == ':' || r == '=' || r == ',' || r == '+' ||
			r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pyString is s as a Python string literal.
func pyString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pyFloat is f as a Python literal.
func pyFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".en") {
		s += ".0"
	}
	return s
}

// lossAgg is verl's loss_agg_mode for our loss_type (verl core_algos.agg_loss).
func lossAgg(lossType string) string {
	switch lossType {
	case "grpo":
		return "seq-mean-token-mean" // each sequence's token mean, then the mean over sequences
	case "dr_grpo":
		return "seq-mean-token-sum-norm" // a sum over tokens / a constant (max_completion_length)
	}
	return "token-mean" // bnpo, dapo, cispo, sapo: a sum over tokens / the number of tokens
}
