package rewards

import (
	"math"
	"strings"
	"testing"
)

// tok builds spans and NLLs from a list of token strings: the completion is their
// concatenation.
func tok(t *testing.T, parts []string, nll []float64) (string, []Span) {
	t.Helper()
	if len(parts) != len(nll) {
		t.Fatalf("test setup: %d parts, %d nll", len(parts), len(nll))
	}
	var b strings.Builder
	spans := make([]Span, len(parts))
	for i, p := range parts {
		spans[i] = Span{b.Len(), b.Len() + len(p)}
		b.WriteString(p)
	}
	return b.String(), spans
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.15g, want %.15g", what, got, want)
	}
}

type wantWord struct {
	text   string
	nll    float64
	tokens int
	end    bool
}

func checkWords(t *testing.T, parts []string, nll []float64, want []wantWord) []Word {
	t.Helper()
	text, spans := tok(t, parts, nll)
	words, err := Words(text, spans, nll)
	if err != nil {
		t.Fatal(err)
	}
	if len(words) != len(want) {
		t.Fatalf("%q: %d words, want %d: %+v", text, len(words), len(want), words)
	}
	for k, w := range words {
		got := text[w.Start:w.End]
		if got != want[k].text || w.Tokens != want[k].tokens || w.SentenceEnd != want[k].end {
			t.Errorf("%q word %d = %q (%d tokens, end %v), want %q (%d tokens, end %v)",
				text, k, got, w.Tokens, w.SentenceEnd, want[k].text, want[k].tokens, want[k].end)
		}
		near(t, "NLL("+got+")", w.NLL, want[k].nll)
	}
	return words
}

func TestWordsSegmentation(t *testing.T) {
	// Leading spaces: the space-only token joins the next word.
	checkWords(t, []string{"  ", "Hello", " world"}, []float64{0.25, 1, 2}, []wantWord{
		{"Hello", 1.25, 2, false}, {"world", 2, 1, true},
	})
	// Trailing spaces: the space-only token joins the last word.
	checkWords(t, []string{"Hi", "  "}, []float64{1, 0.5}, []wantWord{{"Hi", 1.5, 2, true}})
	// A word split across many tokens, and a token that starts with a space.
	checkWords(t, []string{"un", "bel", "iev", "able", " day"}, []float64{0.5, 0.25, 0.125, 0.0625, 3}, []wantWord{
		{"unbelievable", 0.9375, 4, false}, {"day", 3, 1, true},
	})
	// A token holding the end of one word and the start of the next belongs to the first.
	checkWords(t, []string{"ab c", "d"}, []float64{1, 2}, []wantWord{{"ab", 1, 1, false}, {"cd", 2, 1, true}})
	// Tokens that split multi-byte characters: "é" is C3 A9; U+00A0 (C2 A0) is a space.
	checkWords(t, []string{"a", " n", "\xc3", "\xa9", "\xc2", "\xa0b"}, []float64{1, 2, 3, 4, 5, 6}, []wantWord{
		{"a", 1, 1, false}, {"né", 9, 3, false}, {"b", 11, 2, true},
	})
	// An empty token (end of text) at the end joins the last word.
	checkWords(t, []string{"Hi", " yo", ""}, []float64{1, 2, 4}, []wantWord{{"Hi", 1, 1, false}, {"yo", 6, 2, true}})
}

func TestSentenceEnds(t *testing.T) {
	checkWords(t, []string{"Hi!", " Go", "\n", "home", " now.", " 3.5", " ok?!", " a.b", " Wait..."},
		[]float64{1, 1, 1, 1, 1, 1, 1, 1, 1}, []wantWord{
			{"Hi!", 1, 1, true},     // ! followed by a space
			{"Go", 1, 1, true},      // a newline follows
			{"home", 2, 2, false},   // the newline token joined "home"
			{"now.", 1, 1, true},    // . followed by a space
			{"3.5", 1, 1, false},    // a period inside a word
			{"ok?!", 1, 1, true},    // ends with !
			{"a.b", 1, 1, false},    // . not followed by a space
			{"Wait...", 1, 1, true}, // . at the end of the text
		})
	// \r\n ends a sentence too, and so does the end of the text without punctuation.
	checkWords(t, []string{"x", "\r\n", "y"}, []float64{1, 1, 1}, []wantWord{{"x", 1, 1, true}, {"y", 2, 2, true}})
}

func TestWordsErrors(t *testing.T) {
	if _, err := Words("abc", []Span{{0, 4}}, []float64{1}); err == nil || !strings.Contains(err.Error(), "token 0") {
		t.Errorf("span past the end: err = %v", err)
	}
	if _, err := Words("abc", []Span{{0, 3}}, nil); err == nil {
		t.Error("mismatched lengths: no error")
	}
	if _, err := Words("abc", []Span{{0, 3}}, []float64{math.NaN()}); err == nil {
		t.Error("NaN NLL: no error")
	}
}

func TestLevelsHandComputed(t *testing.T) {
	// "The cat sat." with NLL(The)=1, NLL(cat)=2, NLL(sat.)=0.5+0.5+1=2.
	text, spans := tok(t, []string{"The", " cat", " s", "at", "."}, []float64{1, 2, 0.5, 0.5, 1})
	words, err := Words(text, spans, []float64{1, 2, 0.5, 0.5, 1})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := MultiLevel(words)
	if !ok {
		t.Fatal("no words")
	}
	near(t, "P_word", l.Word, math.Exp(5.0/3))
	// P_2 = mean(e^{(1+2)/2}, e^{(2+2)/2}); P_3 = e^{5/3}; no P_4.
	p2 := (math.Exp(1.5) + math.Exp(2)) / 2
	near(t, "P_phrase", l.Phrase, (p2+math.Exp(5.0/3))/2)
	near(t, "P_sentence", l.Sentence, math.Exp(5.0/3))

	// Five words, three sentences: "A b. C\nd e" with NLLs 1, 2, 3, 4, 5.
	text, spans = tok(t, []string{"A", " b.", " C", "\nd", " e"}, []float64{1, 2, 3, 4, 5})
	words, _ = Words(text, spans, []float64{1, 2, 3, 4, 5})
	l, _ = MultiLevel(words)
	near(t, "P_word", l.Word, math.Exp(3))
	p2 = (math.Exp(1.5) + math.Exp(2.5) + math.Exp(3.5) + math.Exp(4.5)) / 4
	p3 := (math.Exp(2) + math.Exp(3) + math.Exp(4)) / 3
	p4 := (math.Exp(2.5) + math.Exp(3.5)) / 2
	near(t, "P_phrase", l.Phrase, (p2+p3+p4)/3)
	// Sentences: {A b.} {C} {d e}.
	near(t, "P_sentence", l.Sentence, (math.Exp(1.5)+math.Exp(3)+math.Exp(4.5))/3)
}

func TestOneWordAndEmpty(t *testing.T) {
	text, spans := tok(t, []string{"Hel", "lo"}, []float64{1.5, 0.5})
	words, _ := Words(text, spans, []float64{1.5, 0.5})
	l, ok := MultiLevel(words)
	if !ok {
		t.Fatal("one word: not ok")
	}
	// No phrase window: P_phrase = P_word.
	near(t, "P_word", l.Word, math.Exp(2))
	near(t, "P_phrase", l.Phrase, math.Exp(2))
	near(t, "P_sentence", l.Sentence, math.Exp(2))

	p := PPL{Weights: Weights{0.1, 0.3, 0.6}, Baselines: Levels{10, 10, 10}, Shape: Step, Thresholds: DefaultThresholds}
	for _, c := range []struct {
		text  string
		spans []Span
	}{{"", nil}, {"   \n ", []Span{{0, 2}, {2, 5}}}} {
		sc, err := p.ScoreText(c.text, c.spans, make([]float64, len(c.spans)))
		if err != nil {
			t.Fatal(err)
		}
		if !sc.Empty || sc.Reward != 0 {
			t.Errorf("%q: empty %v reward %v, want empty with reward 0", c.text, sc.Empty, sc.Reward)
		}
	}
	vals, metrics, err := p.Score([]Sample{{Completion: ""}, {Completion: "Hi", Spans: []Span{{0, 2}}, NLL: []float64{math.Log(9)}}})
	if err != nil {
		t.Fatal(err)
	}
	if metrics["rewards/ppl/empty"] != 1 || vals[0] != 0 {
		t.Errorf("empty count %v, reward %v", metrics["rewards/ppl/empty"], vals[0])
	}
	// "Hi" has every level 9 against baselines 10: I = 0.1, reward 1.
	near(t, "ppl/word", metrics["ppl/word"], 9)
	near(t, "ppl/improvement", metrics["ppl/improvement"], 0.1)
	near(t, "reward", vals[1], 1)

	// Batch levels are geometric means: words of perplexity 4 and 16 average to 8.
	_, metrics, err = p.Score([]Sample{
		{Completion: "a", Spans: []Span{{0, 1}}, NLL: []float64{math.Log(4)}},
		{Completion: "b", Spans: []Span{{0, 1}}, NLL: []float64{math.Log(16)}}})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ppl/word (geometric)", metrics["ppl/word"], 8)
	near(t, "ppl/improvement of the batch levels", metrics["ppl/improvement"], 0.2)

	// A batch without a word (a random model sampling ids its tokenizer has no text for) has
	// no levels: they are absent, not NaN, so the monitor raises no non_finite alert.
	vals, metrics, err = p.Score([]Sample{{Completion: ""}, {Completion: " ", Spans: []Span{{0, 1}}, NLL: []float64{1}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("all empty: %s = %v", k, v)
		}
	}
	if _, ok := metrics["ppl/word"]; ok || metrics["rewards/ppl/empty"] != 2 || vals[0] != 0 || vals[1] != 0 {
		t.Errorf("all empty: metrics %v, rewards %v", metrics, vals)
	}
}

func TestAggregateAndImprovement(t *testing.T) {
	w := Weights{0.1, 0.3, 0.6}
	l := Levels{9, 10, 12}
	near(t, "aggregate", Aggregate(l, w), math.Pow(9, 0.1)*math.Pow(10, 0.3)*math.Pow(12, 0.6))
	// I = 0.1·(10−9)/10 + 0.3·0 + 0.6·(10−12)/10 = 0.01 − 0.12.
	near(t, "improvement", Improvement(l, Levels{10, 10, 10}, w), -0.11)
	near(t, "improvement", Improvement(Levels{8, 15, 3}, Levels{10, 20, 4}, Weights{0.4, 0.4, 0.2}), 0.4*0.2+0.4*0.25+0.2*0.25)

	// End to end: one word with NLL ln 9.9 against baselines 10: I = 1% → step 0.7, linear 0.7;
	// with NLL ln 10.1: I = −1% → step 0, linear −0.7.
	for _, c := range []struct {
		p         float64
		step, lin float64
	}{{9.9, 0.7, 0.7}, {10.1, 0, -0.7}, {9.8, 0.9, 0.9}} {
		for _, shape := range []Shape{Step, Linear} {
			pp := PPL{Weights: w, Baselines: Levels{10, 10, 10}, Shape: shape, Thresholds: DefaultThresholds}
			sc, err := pp.ScoreText("word", []Span{{0, 4}}, []float64{math.Log(c.p)})
			if err != nil {
				t.Fatal(err)
			}
			want := c.step
			if shape == Linear {
				want = c.lin
			}
			if math.Abs(sc.Reward-want) > 1e-9 {
				t.Errorf("P=%v %s: reward %v, want %v (I=%v)", c.p, shape, sc.Reward, want, sc.Improvement)
			}
		}
	}
}

func TestShapes(t *testing.T) {
	cases := []struct{ i, step, linear float64 }{
		{1, 1, 1},
		{0.03, 1, 1},
		{0.025, 0.9, 0.95},
		{0.02, 0.9, 0.9},
		{0.015, 0.7, 0.8},
		{0.01, 0.7, 0.7},
		{0.0075, 0.5, 0.6},
		{0.005, 0.5, 0.5},
		{0.00275, 0.2, 0.35},
		{0.0005, 0.2, 0.2},
		{0.00025, 0, 0.1},
		{0, 0, 0},
		{-0.00025, 0, -0.1},
		{-0.0075, 0, -0.6},
		{-0.03, 0, -1},
		{-0.5, 0, -1},
	}
	for _, c := range cases {
		if got := Step.Reward(c.i, DefaultThresholds); got != c.step {
			t.Errorf("step(%v) = %v, want %v", c.i, got, c.step)
		}
		if got := Linear.Reward(c.i, DefaultThresholds); math.Abs(got-c.linear) > 1e-12 {
			t.Errorf("linear(%v) = %v, want %v", c.i, got, c.linear)
		}
	}
	if !math.IsNaN(Step.Reward(math.NaN(), DefaultThresholds)) {
		t.Error("NaN improvement should stay NaN")
	}
}

func TestThresholdsValidate(t *testing.T) {
	if err := DefaultThresholds.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Thresholds{
		nil,
		{{0.01, 0.5}, {0.02, 0.4}},
		{{0.02, 0.5}, {0.01, 0.6}},
		{{0.02, 1.5}},
		{{-0.01, 0.5}},
	}
	for _, b := range bad {
		if err := b.Validate(); err == nil {
			t.Errorf("%v: no error", b)
		}
	}
	if _, err := ParseShape("cubic"); err == nil {
		t.Error("unknown shape accepted")
	}
}
