package engine

import (
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

func loadTiny(t *testing.T) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	dir := tinyModelDir(t)
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

var scorerTexts = []Text{
	{Prompt: "Once upon a time", Completion: " there was a fox. It ran away!"},
	{Prompt: "Tom has 3 apples and buys 4 more. How many?", Completion: " He has 3 + 4 = 7 apples.\n#### 7", Answer: "7"},
	{Prompt: "", Completion: "The cat sat on the mat."},
	{Prompt: "Write a line.", Completion: ""},
	{Prompt: "Count:", Completion: " 12 13 14 #### 15", Answer: "14"},
}

// The scorer's perplexity rewards equal those computed text by text from the model's
// log-probabilities and the tokenizer's offsets, whatever the batch.
func TestScorerMatchesTextByTextReference(t *testing.T) {
	m, tok := loadTiny(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the built-in presets
	p, err := presets.Load("story")
	if err != nil {
		t.Fatal(err)
	}
	// The continuous shape shows differences that the step table would hide.
	lin := *p.PPL
	lin.Shape = rewards.Linear
	p.PPL = &lin
	base := rewards.Levels{Word: 300, Phrase: 400, Sentence: 350}
	s, err := NewScorer(m, tok, p, base)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Score(scorerTexts)
	if err != nil {
		t.Fatal(err)
	}
	ppl := rewards.PPL{Weights: p.PPL.Levels, Baselines: base, Shape: rewards.Linear, Thresholds: p.PPL.Thresholds}
	nonzero := 0
	for i, x := range scorerTexts {
		ctx := tok.Encode(x.Prompt, true).IDs
		enc := tok.Encode(x.Completion, false)
		lps, err := m.LogProbs([][]int{append(append([]int(nil), ctx...), enc.IDs...)}, 1, model.AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		var spans []rewards.Span
		var nll []float64
		for k := range enc.IDs {
			if len(ctx)+k == 0 {
				continue
			}
			spans = append(spans, rewards.Span{Start: enc.Offsets[k][0], End: enc.Offsets[k][1]})
			nll = append(nll, -float64(lps[0][len(ctx)+k]))
		}
		sc, err := ppl.ScoreText(x.Completion, spans, nll)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.ByFunc["ppl"][i]; math.Abs(got-sc.Reward) > 1e-9 {
			t.Errorf("text %d: reward %v, reference %v", i, got, sc.Reward)
		}
		if sc.Reward != 0 {
			nonzero++
		}
		single, err := s.Score([]Text{x})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(single.Total[0]-res.Total[i]) > 1e-9 {
			t.Errorf("text %d: alone %v, in the batch %v", i, single.Total[0], res.Total[i])
		}
	}
	if nonzero < 3 {
		t.Errorf("only %d texts with a reward other than 0: the comparison shows little", nonzero)
	}
	if res.Metrics["rewards/ppl/empty"] != 1 {
		t.Errorf("empty completions counted %v, want 1", res.Metrics["rewards/ppl/empty"])
	}
}

// NTL's digit logits come from the pass that gives the log-probabilities: they equal the
// logits of an incremental decode, position by position.
func TestScorerDigitLogits(t *testing.T) {
	m, tok := loadTiny(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the built-in presets
	p, _ := presets.Load("math")
	s, err := NewScorer(m, tok, p, rewards.Levels{Word: 300, Phrase: 400, Sentence: 350})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seqs [][]int
	var first []int
	for _, x := range scorerTexts[:2] {
		seq, f, _ := s.prepare(x)
		seqs, first = append(seqs, seq), append(first, f)
	}
	lps, got, err := s.logProbs(seqs, first)
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := m.LogProbs(seqs, 1, model.AdaptersOn); !reflect.DeepEqual(plain, lps) {
		t.Error("log-probabilities differ when the logits are seen")
	}
	V := m.Config.Vocab
	for i, seq := range seqs {
		cache := m.NewCache(1, len(seq))
		for p := 1; p < len(seq); p++ {
			logits, err := m.Forward(cache, [][]int{seq[p-1 : p]}, true, model.AdaptersOn)
			if err != nil {
				t.Fatal(err)
			}
			if p < first[i] {
				continue
			}
			want := s.digits.Gather(nil, logits[:V])
			g := got[i][p-first[i]]
			for d := range want {
				if math.Abs(float64(g[d]-want[d])) > 1e-4*(1+math.Abs(float64(want[d]))) {
					t.Fatalf("text %d position %d digit token %d: %v, incremental %v", i, p, d, g[d], want[d])
				}
			}
		}
	}
	res, err := s.Score(scorerTexts)
	if err != nil {
		t.Fatal(err)
	}
	// Correctness: the flexible extraction's last number against the answer; n/a without one.
	wantCorrect := []float64{math.NaN(), 1, math.NaN(), math.NaN(), 0}
	for i, w := range wantCorrect {
		g := res.ByFunc["correctness"][i]
		if math.IsNaN(w) != math.IsNaN(g) || (!math.IsNaN(w) && g != w) {
			t.Errorf("correctness %d = %v, want %v", i, g, w)
		}
	}
	if v := res.ByFunc["ntl"][1]; !(v > 0 && v <= 1) {
		t.Errorf("ntl reward of text 1: %v", v)
	}
}

// Texts longer than the context are cut (prompt from the front, then completion from the end)
// rather than refused.
func TestScorerLongText(t *testing.T) {
	m, tok := loadTiny(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the built-in presets
	p, _ := presets.Load("story")
	s, err := NewScorer(m, tok, p, rewards.Levels{Word: 300, Phrase: 400, Sentence: 350})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := strings.Repeat("the fox ran over the hill. ", 200)
	for _, x := range []Text{{Prompt: long, Completion: " and so on."}, {Prompt: "Go.", Completion: long}} {
		seq, first, smp := s.prepare(x)
		if len(seq) > m.Config.MaxPos || first >= len(seq) || len(smp.IDs) != len(seq)-first {
			t.Errorf("sequence of %d tokens, completion from %d, %d completion ids", len(seq), first, len(smp.IDs))
		}
		if _, err := s.Score([]Text{x}); err != nil {
			t.Error(err)
		}
	}
}
