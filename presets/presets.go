// Package presets holds the reward presets of DESIGN §7: TOML files embedded in the binary
// (story, technical, code, math) that a user may replace or add to in
// $XDG_CONFIG_HOME/rlhfstation/presets/NAME.toml. A preset weighs the reward functions, sets
// the perplexity reward's threshold table and shape, and may override GRPO settings.
package presets

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"rlhfstation/rewards"
)

//go:embed builtin/*.toml
var builtin embed.FS

// BuiltIn lists the embedded presets in display order. math-aggressive and math-forgiving
// extend math with the NTL temperatures users know: tau 0.5 (only near-exact digit
// distributions earn the reward) and tau 2.0 (digits near the answer earn partial credit);
// math-tools adds the built-in calculator environment.
var BuiltIn = []string{"story", "technical", "code", "math", "math-aggressive", "math-forgiving", "math-tools"}

// Default is the preset a run uses when none is named.
const Default = "story"

// SourceBuiltIn is the Source of an embedded preset.
const SourceBuiltIn = "built-in"

// Preset is a decoded and validated preset. A reward section that is absent is nil: that
// reward is off.
type Preset struct {
	Name        string
	Source      string // SourceBuiltIn or the file's path
	Description string
	PPL         *PPL
	NTL         *NTL
	Correctness *Correctness
	Format      *Format
	// Extends is the preset this one starts from ("" for none); Root is the end of that
	// chain (the preset itself when it extends none): what built-in prompts a run uses.
	Extends, Root string
	// Commands are the [[rewards]] of kind "command", in file order.
	Commands []CommandReward
	// Environments are the [[environments]] entries, in file order.
	Environments []Environment
	// GRPO holds the [grpo] table as decoded (int64, float64, string, bool, []any, map[string]any);
	// the engine's configuration checks its keys and types.
	GRPO map[string]any
}

// PPL is the multi-level perplexity reward's settings.
type PPL struct {
	Weight     float64
	Levels     rewards.Weights // word, phrase, sentence
	Shape      rewards.Shape
	Thresholds rewards.Thresholds
	Text       rewards.PPLText // what is measured: the whole completion, or the reasoning (math)
	// Inapplicable is set by a caller that has no reference text of the Text kind to make
	// baselines of (see rewards.PPL); it is not a preset key.
	Inapplicable string
}

// NTL is the number token loss reward's settings.
type NTL struct {
	Weight float64
	Mode   rewards.NTLMode
	Loss   rewards.NTLLoss
	Tau    float64
	// Schedule (temperature_schedule: constant, linear, cosine) moves tau from Tau at the first
	// step to TauEnd at the last.
	Schedule string
	TauEnd   float64
	// ConfidenceWeight is hybrid mode's weight of the confidence term.
	ConfidenceWeight float64
	// LossWeight is λ of NTL as an auxiliary loss: λ·NTL of the policy's digit probabilities
	// at the aligned answer positions is added to the GRPO loss (0: NTL is a reward only).
	LossWeight float64
}

// Correctness is the answer-correctness reward's settings.
type Correctness struct {
	Weight     float64
	Extraction rewards.Extraction
}

// Format is the `#### N` format reward's settings.
type Format struct{ Weight float64 }

// UserDir is where user presets live: $XDG_CONFIG_HOME/rlhfstation/presets, with
// XDG_CONFIG_HOME defaulting to ~/.config. It is "" when neither can be found.
func UserDir() string {
	base := os.Getenv("XDG_CONFIG_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "rlhfstation", "presets")
}

// userFile is the path of a user preset, "" when there is no such file.
func userFile(name string) string {
	dir := UserDir()
	if dir == "" {
		return ""
	}
	p := filepath.Join(dir, name+".toml")
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p
	}
	return ""
}

func isBuiltIn(name string) bool {
	for _, b := range BuiltIn {
		if b == name {
			return true
		}
	}
	return false
}

// Load gives the preset called name: the user's file when there is one, else the built-in.
func Load(name string) (Preset, error) {
	_, data, source, err := find(name, false)
	if err != nil {
		return Preset{}, err
	}
	return Decode(name, source, data)
}

// find reads preset name's file: the user's when there is one (unless builtinOnly), else the
// built-in. The Preset returned is empty; the file's bytes and source are what count.
func find(name string, builtinOnly bool) (Preset, []byte, string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return Preset{}, nil, "", fmt.Errorf("bad preset name %q", name)
	}
	if p := userFile(name); p != "" && !builtinOnly {
		data, err := os.ReadFile(p)
		return Preset{}, data, p, err
	}
	if isBuiltIn(name) {
		data, err := builtin.ReadFile("builtin/" + name + ".toml")
		return Preset{}, data, SourceBuiltIn, err
	}
	if builtinOnly {
		return Preset{}, nil, "", fmt.Errorf("no built-in preset %q", name)
	}
	names, _ := Names()
	return Preset{}, nil, "", fmt.Errorf("unknown preset %q (presets: %s)", name, strings.Join(names, ", "))
}

// Names lists every preset name: the built-in ones in order, then the user's, sorted.
func Names() ([]string, error) {
	names := append([]string(nil), BuiltIn...)
	dir := UserDir()
	if dir == "" {
		return names, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return names, nil
	}
	if err != nil {
		return names, fmt.Errorf("reading user presets: %w", err)
	}
	var user []string
	for _, e := range entries {
		n, ok := strings.CutSuffix(e.Name(), ".toml")
		if !ok || e.IsDir() || n == "" || strings.HasPrefix(n, ".") || isBuiltIn(n) {
			continue
		}
		user = append(user, n)
	}
	sort.Strings(user)
	return append(names, user...), nil
}

// Info describes one preset for listings. Err is set, and Preset empty, when its file does
// not load.
type Info struct {
	Name      string
	Source    string
	Overrides bool // a user file replacing a built-in preset
	Preset    Preset
	Err       error
}

// List describes every preset. A user file that fails to load is listed with its error;
// the error returned is only about reading the user folder.
func List() ([]Info, error) {
	names, err := Names()
	infos := make([]Info, 0, len(names))
	for _, n := range names {
		info := Info{Name: n, Source: SourceBuiltIn}
		if p := userFile(n); p != "" {
			info.Source = p
			info.Overrides = isBuiltIn(n)
		}
		info.Preset, info.Err = Load(n)
		infos = append(infos, info)
	}
	return infos, err
}

// RewardNames lists the preset's reward sections in their fixed order (ppl, ntl, correctness,
// format; those the preset has, weight 0 included), then its command rewards in file order:
// what the entries of reward_weights stand for.
func (p Preset) RewardNames() []string {
	var out []string
	for _, w := range p.weights() {
		out = append(out, w.name)
	}
	return out
}

// WithRewardWeights is p with the weights of its reward sections replaced by w, one per
// section in RewardNames order: TRL's reward_weights. A weight of 0 turns a reward off.
func (p Preset) WithRewardWeights(w []float64) (Preset, error) {
	ws := p.weights()
	if len(w) != len(ws) {
		return p, fmt.Errorf("reward_weights has %d values but preset %s has %d rewards (%s)", len(w), p.Name, len(ws), strings.Join(p.RewardNames(), ", "))
	}
	for i, x := range w {
		if !validWeight(x) {
			return p, fmt.Errorf("reward_weights[%d] = %v (%s): must be a finite number not below 0", i, x, ws[i].name)
		}
	}
	// Copy the sections so that p's own are left as they were.
	if p.PPL != nil {
		c := *p.PPL
		p.PPL = &c
	}
	if p.NTL != nil {
		c := *p.NTL
		p.NTL = &c
	}
	if p.Correctness != nil {
		c := *p.Correctness
		p.Correctness = &c
	}
	if p.Format != nil {
		c := *p.Format
		p.Format = &c
	}
	p.Commands = append([]CommandReward(nil), p.Commands...)
	p.Environments = append([]Environment(nil), p.Environments...)
	for i := range p.Environments {
		p.Environments[i].Rewards = append([]EnvReward(nil), p.Environments[i].Rewards...)
	}
	for i, sw := range p.weights() {
		*sw.weight = w[i]
	}
	return p, nil
}

type sectionWeight struct {
	name   string
	weight *float64
}

// weights are the reward sections' weights, in RewardNames order.
func (p Preset) weights() []sectionWeight {
	var out []sectionWeight
	if p.PPL != nil {
		out = append(out, sectionWeight{"ppl", &p.PPL.Weight})
	}
	if p.NTL != nil {
		out = append(out, sectionWeight{"ntl", &p.NTL.Weight})
	}
	if p.Correctness != nil {
		out = append(out, sectionWeight{"correctness", &p.Correctness.Weight})
	}
	if p.Format != nil {
		out = append(out, sectionWeight{"format", &p.Format.Weight})
	}
	for i := range p.Commands {
		out = append(out, sectionWeight{p.Commands[i].Name, &p.Commands[i].Weight})
	}
	for i := range p.Environments {
		env := &p.Environments[i]
		for j := range env.Rewards {
			out = append(out, sectionWeight{env.Name + "." + env.Rewards[j].Name, &env.Rewards[j].Weight})
		}
	}
	return out
}

// Funcs builds the preset's weighted reward functions for the engine (and the score
// command). baselines are the perplexity baselines B_l; vocab, the digit tokens, is needed
// only when the preset uses NTL. Rewards with weight 0 are left out. Command rewards are made
// but not started: see rewards.StartCommands.
func (p Preset) Funcs(baselines rewards.Levels, vocab *rewards.DigitVocab) ([]rewards.Weighted, error) {
	var fs []rewards.Weighted
	if p.PPL != nil && p.PPL.Weight > 0 {
		f := rewards.PPL{Weights: p.PPL.Levels, Baselines: baselines, Shape: p.PPL.Shape, Thresholds: p.PPL.Thresholds,
			Text: p.PPL.Text, Inapplicable: p.PPL.Inapplicable}
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("preset %s: %w", p.Name, err)
		}
		fs = append(fs, rewards.Weighted{Func: f, Weight: p.PPL.Weight})
	}
	if p.NTL != nil && p.NTL.Weight > 0 {
		f := rewards.NTL{Vocab: vocab, Mode: p.NTL.Mode, Loss: p.NTL.Loss, Tau: p.NTL.Tau, ConfidenceWeight: p.NTL.ConfidenceWeight}
		if p.NTL.Schedule != "" && p.NTL.Schedule != rewards.ScheduleConstant {
			f.Schedule = &rewards.TauSchedule{Kind: p.NTL.Schedule, Start: p.NTL.Tau, End: p.NTL.TauEnd}
		}
		if vocab == nil {
			return nil, fmt.Errorf("preset %s uses NTL: %w", p.Name, rewards.ErrNoDigitTokens)
		}
		if err := f.Validate(); err != nil {
			return nil, fmt.Errorf("preset %s: %w", p.Name, err)
		}
		fs = append(fs, rewards.Weighted{Func: f, Weight: p.NTL.Weight})
	}
	if p.Correctness != nil && p.Correctness.Weight > 0 {
		fs = append(fs, rewards.Weighted{Func: rewards.Correctness{Extraction: p.Correctness.Extraction}, Weight: p.Correctness.Weight})
	}
	if p.Format != nil && p.Format.Weight > 0 {
		fs = append(fs, rewards.Weighted{Func: rewards.Format{}, Weight: p.Format.Weight})
	}
	for _, c := range p.Commands {
		if c.Weight == 0 {
			continue
		}
		f, err := rewards.NewCommand(c.Name, c.Command, c.Timeout)
		if err != nil {
			return nil, fmt.Errorf("preset %s: %w", p.Name, err)
		}
		fs = append(fs, rewards.Weighted{Func: f, Weight: c.Weight})
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("preset %s has no reward with a weight above 0", p.Name)
	}
	return fs, nil
}

// validWeight accepts finite weights that are not negative.
func validWeight(w float64) bool { return w >= 0 && !math.IsInf(w, 0) }
