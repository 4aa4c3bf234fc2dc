package presets

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/rewards"
)

// noUserPresets points XDG_CONFIG_HOME at an empty folder and returns the presets folder.
func noUserPresets(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	return filepath.Join(dir, "rlhfstation", "presets")
}

func TestBuiltInPresets(t *testing.T) {
	noUserPresets(t)
	want := map[string]rewards.Weights{ // DESIGN §7
		"story":     {Word: 0.1, Phrase: 0.3, Sentence: 0.6},
		"technical": {Word: 0.4, Phrase: 0.4, Sentence: 0.2},
		"code":      {Word: 0.4, Phrase: 0.5, Sentence: 0.1},
		"math":      {Word: 0.2, Phrase: 0.3, Sentence: 0.5},
		// The math variants inherit everything but NTL's tau.
		"math-aggressive": {Word: 0.2, Phrase: 0.3, Sentence: 0.5},
		"math-forgiving":  {Word: 0.2, Phrase: 0.3, Sentence: 0.5},
		"math-tools":      {Word: 0.2, Phrase: 0.3, Sentence: 0.5}, // math with the calculator
	}
	tau := map[string]float64{"math": 1, "math-aggressive": 0.5, "math-forgiving": 2, "math-tools": 1}
	for _, name := range BuiltIn {
		p, err := Load(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Source != SourceBuiltIn || p.Description == "" || p.PPL == nil {
			t.Fatalf("%s: %+v", name, p)
		}
		// Math measures the reasoning, the variants by inheritance; prose the whole completion.
		if text := map[bool]rewards.PPLText{true: rewards.ReasoningText, false: rewards.CompletionText}[strings.HasPrefix(name, "math")]; p.PPL.Text != text {
			t.Errorf("%s: ppl text %q, want %q", name, p.PPL.Text, text)
		}
		if p.PPL.Levels != want[name] || p.PPL.Weight != 1 || p.PPL.Shape != rewards.Step {
			t.Errorf("%s: ppl %+v, want levels %+v", name, *p.PPL, want[name])
		}
		if len(p.PPL.Thresholds) != len(rewards.DefaultThresholds) {
			t.Fatalf("%s: thresholds %v", name, p.PPL.Thresholds)
		}
		for k, th := range p.PPL.Thresholds {
			if th != rewards.DefaultThresholds[k] {
				t.Errorf("%s: threshold %d = %+v, want %+v", name, k, th, rewards.DefaultThresholds[k])
			}
		}
		if (name == "math-tools") != (len(p.Environments) == 1 && p.Environments[0].Kind == "calculator" &&
			p.Environments[0].Weight("answer_via_tool") == 1 && p.Environments[0].Weight("tool_correct") == 0.5 &&
			p.Environments[0].Weight("used_tool") == 0) {
			t.Errorf("%s: environments %+v", name, p.Environments)
		}
		if strings.HasPrefix(name, "math") {
			if p.NTL == nil || p.NTL.Mode != rewards.FinalAnswerMode || p.NTL.Loss != rewards.Wasserstein || p.NTL.Tau != tau[name] ||
				p.NTL.TauEnd != tau[name] || p.NTL.Schedule != rewards.ScheduleConstant || p.NTL.Weight <= 0 {
				t.Errorf("%s NTL: %+v", name, p.NTL)
			}
			if p.Root != "math" || (name != "math") != (p.Extends == "math") {
				t.Errorf("%s: root %q extends %q", name, p.Root, p.Extends)
			}
			// math-tools pays for a right answer through the calculator's answer_via_tool
			if p.Correctness == nil || (p.Correctness.Weight <= 0) != (name == "math-tools") {
				t.Errorf("%s correctness: %+v", name, p.Correctness)
			}
			if scale, _ := p.GRPO["scale_rewards"].(string); (scale == "none") != (name == "math-tools") {
				t.Errorf("%s: scale_rewards %q", name, scale)
			}
		} else if p.NTL != nil || p.Correctness != nil || p.Format != nil || p.Root != name {
			t.Errorf("%s has rewards other than perplexity, or root %q", name, p.Root)
		}
	}
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "story, technical, code, math") {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := Load("../story"); err == nil {
		t.Error("path as a preset name accepted")
	}
}

func TestPresetFuncs(t *testing.T) {
	noUserPresets(t)
	p, _ := Load("math")
	vocab, _ := rewards.NewDigitVocab([]int{5, 6}, []int{1, 2})
	fs, err := p.Funcs(rewards.Levels{Word: 10, Phrase: 10, Sentence: 10}, vocab)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fs {
		names = append(names, f.Func.Name())
	}
	if strings.Join(names, ",") != "ppl,ntl,correctness" {
		t.Errorf("math functions %v", names)
	}
	if _, err := p.Funcs(rewards.Levels{Word: 10, Phrase: 10, Sentence: 10}, nil); !errors.Is(err, rewards.ErrNoDigitTokens) {
		t.Errorf("math without digit tokens: %v", err)
	}
	if _, err := p.Funcs(rewards.Levels{}, vocab); err == nil {
		t.Error("zero baselines accepted")
	}
}

// reward_weights replace the weights of the preset's sections in order, a 0 turning one off,
// and leave the loaded preset as it was.
func TestRewardWeights(t *testing.T) {
	noUserPresets(t)
	p, _ := Load("math")
	if got := strings.Join(p.RewardNames(), ","); got != "ppl,ntl,correctness" {
		t.Fatalf("math reward names %s", got)
	}
	q, err := p.WithRewardWeights([]float64{0, 0.5, 2})
	if err != nil {
		t.Fatal(err)
	}
	vocab, _ := rewards.NewDigitVocab([]int{5, 6}, []int{1, 2})
	fs, err := q.Funcs(rewards.Levels{Word: 10, Phrase: 10, Sentence: 10}, vocab)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fs {
		got = append(got, fmt.Sprintf("%s×%g", f.Func.Name(), f.Weight))
	}
	if strings.Join(got, ",") != "ntl×0.5,correctness×2" {
		t.Errorf("weighted functions %v", got)
	}
	if p.PPL.Weight != 1 || p.NTL.Weight != 1 {
		t.Errorf("the loaded preset changed: ppl ×%v ntl ×%v", p.PPL.Weight, p.NTL.Weight)
	}
	if _, err := p.WithRewardWeights([]float64{1, 1}); err == nil || !strings.Contains(err.Error(), "reward_weights has 2 values but preset math has 3 rewards (ppl, ntl, correctness)") {
		t.Errorf("wrong count: %v", err)
	}
	if _, err := p.WithRewardWeights([]float64{1, math.Inf(1), 1}); err == nil || !strings.Contains(err.Error(), "reward_weights[1]") {
		t.Errorf("infinite weight: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		doc  string
		want []string
	}{
		{"description = \"x\"\n[ppl]\nword = 1\nwieght = 2\n", []string{`f.toml:4: unknown key "ppl.wieght"`}},
		{"[ppl]\nword = 1\n\n[rewardz]\nx = 1\n", []string{`f.toml:4: unknown key "rewardz"`}},
		{"[ppl]\nword = 1\nthresholds = [\n  { improvement = 0.03, reward = 1.0 },\n  { improvment = 0.02, reward = 0.5 },\n]\n",
			[]string{`f.toml:3: ppl.thresholds: threshold 2: improvement 0`, `f.toml:5: unknown key "ppl.thresholds.improvment"`}},
		{"[ppl]\nword = 1\nthresholds = [\n  { improvement = 0.01, reward = 0.5 },\n  { improvement = 0.02, reward = 0.4 },\n]\n",
			[]string{`f.toml:3: ppl.thresholds: thresholds must be in descending order`}},
		{"[ppl]\nweight = -1\nword = 1\n", []string{`f.toml:2: ppl.weight: weight -1`}},
		{"[ppl]\nword = -0.5\nphrase = 1\n", []string{`f.toml:2: ppl.word: level weight -0.5`}},
		{"[ppl]\nword = 1\nshape = \"cubic\"\n", []string{`f.toml:3: ppl.shape: unknown reward shape "cubic"`}},
		{"[ppl]\nword = 1\ntext = \"answer\"\n", []string{`f.toml:3: ppl.text: perplexity text "answer": want "completion" or "reasoning"`}},
		{"[ntl]\nmode = \"digits\"\nloss = \"l1\"\ntau = 0\n", []string{
			`f.toml:2: ntl.mode: unknown NTL mode "digits"`, `f.toml:3: ntl.loss: unknown NTL loss "l1"`, `f.toml:4: ntl.tau: tau 0`}},
		{"[ntl]\ntemperature_schedule = \"step\"\nconfidence_weight = 2.0\n", []string{
			`f.toml:2: ntl.temperature_schedule: unknown temperature_schedule "step"`, `f.toml:3: ntl.confidence_weight: confidence_weight 2`}},
		{"[ntl]\nloss_weight = -0.1\n", []string{`f.toml:2: ntl.loss_weight: loss_weight -0.1 must be a finite number not below 0`}},
		{"[correctness]\nextraction = \"fuzzy\"\n", []string{`f.toml:2: correctness.extraction: unknown extraction "fuzzy"`}},
		{"[ntl]\n\ntau = \"a\"\n", []string{`f.toml:3: ntl.tau: incompatible types`}},
		{"[ppl]\nword = 1\nword = 2\n", []string{`f.toml:3: `}},
		{"description = \"only\"\n", []string{`f.toml: no reward`}},
		{"[ppl]\nword = 0\n", []string{`f.toml:1: ppl: perplexity weights are all zero`}},
	}
	for _, c := range cases {
		_, err := Decode("f", "/tmp/f.toml", []byte(c.doc))
		if err == nil {
			t.Errorf("%q: no error", c.doc)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(c.want) {
			t.Errorf("%q: %d errors, want %d:\n%v", c.doc, len(lines), len(c.want), err)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(lines[i], w) || !strings.HasPrefix(lines[i], "/tmp/f.toml") {
				t.Errorf("%q: error %q, want it to contain %q", c.doc, lines[i], w)
			}
		}
	}
	// Defaults of a section's omitted keys; ints where floats are expected; GRPO kept as is.
	p, err := Decode("f", "/tmp/f.toml", []byte("[ppl]\nsentence = 1\n[ntl]\n[format]\nweight = 2\n[grpo]\nbeta = 0.1\nnum_generations = 4\nlr = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.PPL.Weight != 1 || p.PPL.Levels != (rewards.Weights{Sentence: 1}) || p.PPL.Shape != rewards.Step || len(p.PPL.Thresholds) != 5 {
		t.Errorf("ppl defaults: %+v", *p.PPL)
	}
	if *p.NTL != (NTL{Weight: 1, Mode: rewards.FinalAnswerMode, Loss: rewards.Wasserstein, Tau: 1, TauEnd: 1,
		Schedule: rewards.ScheduleConstant, ConfidenceWeight: 0.2}) || p.Format.Weight != 2 {
		t.Errorf("ntl defaults: %+v, format %+v", *p.NTL, *p.Format)
	}
	if p.GRPO["beta"] != 0.1 || p.GRPO["num_generations"] != int64(4) || p.GRPO["lr"] != int64(3) {
		t.Errorf("grpo table %v", p.GRPO)
	}
}

func TestUserPresets(t *testing.T) {
	dir := noUserPresets(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, doc string) string {
		p := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	storyPath := write("story", "description = \"my story\"\n[ppl]\nword = 1\nshape = \"linear\"\n[grpo]\ntemperature = 0.7\n")
	write("poems", "description = \"poems\"\n[ppl]\nsentence = 1\n")
	brokenPath := write("broken", "[ppl]\nword = 1\ncolour = 3\n")
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a preset"), 0o644)

	p, err := Load("story")
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != storyPath || p.Description != "my story" || p.PPL.Shape != rewards.Linear || p.GRPO["temperature"] != 0.7 {
		t.Errorf("user story: %+v", p)
	}
	if _, err := Load("poems"); err != nil {
		t.Errorf("new user preset: %v", err)
	}
	_, err = Load("broken")
	if err == nil || !strings.Contains(err.Error(), brokenPath+":3: unknown key \"ppl.colour\"") {
		t.Errorf("broken user preset: %v", err)
	}

	infos, err := List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range infos {
		s := in.Name + "@" + filepath.Base(in.Source)
		if in.Overrides {
			s += "!"
		}
		if in.Err != nil {
			s += "(error)"
		}
		got = append(got, s)
	}
	want := "story@story.toml!,technical@built-in,code@built-in,math@built-in,math-aggressive@built-in,math-forgiving@built-in,math-tools@built-in,broken@broken.toml(error),poems@poems.toml"
	if strings.Join(got, ",") != want {
		t.Errorf("list = %v\nwant %v", strings.Join(got, ","), want)
	}
}

// A preset that extends another starts from it and changes only the keys it sets; one that
// extends its own name starts from the built-in preset of that name.
func TestExtends(t *testing.T) {
	dir := noUserPresets(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, doc string) string {
		p := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("math", "extends = \"math\"\n[ntl]\nmode = \"hybrid\"\nconfidence_weight = 0.3\n[grpo]\nbeta = 0.01\n")
	write("cool", "extends = \"math\"\n[ntl]\ntemperature_schedule = \"cosine\"\ntau = 2.0\ntau_end = 0.5\nloss_weight = 0.25\n[grpo]\ntemperature = 0.9\n")
	aPath := write("a", "extends = \"b\"\n")
	write("b", "extends = \"a\"\n")
	badPath := write("bad", "extends = \"math-forgiving\"\n[ntl]\ntau_end = -1\n")
	write("nobase", "extends = \"nothing\"\n")

	m, err := Load("math")
	if err != nil {
		t.Fatal(err)
	}
	if m.NTL.Mode != rewards.HybridMode || m.NTL.ConfidenceWeight != 0.3 || m.NTL.Tau != 1 || m.Correctness == nil || m.GRPO["beta"] != 0.01 || m.Root != "math" {
		t.Errorf("user math over built-in math: %+v ntl %+v", m, m.NTL)
	}
	// cool extends the user's math (which extends the built-in): all three layers show.
	c, err := Load("cool")
	if err != nil {
		t.Fatal(err)
	}
	if c.NTL.Mode != rewards.HybridMode || c.NTL.Schedule != rewards.ScheduleCosine || c.NTL.Tau != 2 || c.NTL.TauEnd != 0.5 || c.NTL.LossWeight != 0.25 ||
		c.GRPO["beta"] != 0.01 || c.GRPO["temperature"] != 0.9 || c.PPL.Levels.Sentence != 0.5 || c.Root != "math" {
		t.Errorf("cool: %+v ntl %+v grpo %v", c, c.NTL, c.GRPO)
	}
	vocab, _ := rewards.NewDigitVocab([]int{5, 6}, []int{1, 2})
	fs, err := c.Funcs(rewards.Levels{Word: 10, Phrase: 10, Sentence: 10}, vocab)
	if err != nil {
		t.Fatal(err)
	}
	ntl := fs[1].Func.(rewards.NTL)
	if ntl.Schedule == nil || *ntl.Schedule != (rewards.TauSchedule{Kind: rewards.ScheduleCosine, Start: 2, End: 0.5}) || ntl.ConfidenceWeight != 0.3 {
		t.Errorf("cool's NTL function: %+v", ntl)
	}
	if _, err := Load("a"); err == nil || !strings.Contains(err.Error(), aPath+`: extends "b"`) || !strings.Contains(err.Error(), "(a cycle?)") {
		t.Errorf("cycle: %v", err)
	}
	if _, err := Load("bad"); err == nil || !strings.Contains(err.Error(), badPath+":3: ntl.tau_end: tau_end -1") {
		t.Errorf("bad value over a base: %v", err)
	}
	if _, err := Load("nobase"); err == nil || !strings.Contains(err.Error(), `extends "nothing": unknown preset "nothing"`) {
		t.Errorf("unknown base: %v", err)
	}
}

func TestUserDirDefault(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", "/home/someone")
	if d := UserDir(); d != "/home/someone/.config/rlhfstation/presets" {
		t.Errorf("UserDir = %q", d)
	}
}
