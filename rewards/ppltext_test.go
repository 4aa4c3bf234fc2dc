package rewards

import "testing"

// spansOf gives each byte of text its own token with NLL nll(i).
func spansOf(text string, nll func(i int) float64) ([]Span, []float64) {
	spans, nlls := make([]Span, len(text)), make([]float64, len(text))
	for i := range text {
		spans[i], nlls[i] = Span{i, i + 1}, nll(i)
	}
	return spans, nlls
}

func TestAnswerLine(t *testing.T) {
	for _, c := range []struct {
		text       string
		start, end int
		ok         bool
	}{
		{"so 9 + 7 = 16.\n#### 16", 15, 22, true},
		{"#### 3\n#### 16\nthanks", 7, 14, true},
		{"so 16 plums", 0, 0, false},
	} {
		s, e, ok := AnswerLine(c.text)
		if s != c.start || e != c.end || ok != c.ok {
			t.Errorf("AnswerLine(%q) = %d, %d, %v; want %d, %d, %v", c.text, s, e, ok, c.start, c.end, c.ok)
		}
	}
}

// The reasoning's words are the completion's without those of its final `####` line, with
// their own NLLs; the levels are those of the text without that line.
func TestReasoningWords(t *testing.T) {
	text := "She has 9 + 7 = 16 plums.\n#### 16\nok"
	spans, nll := spansOf(text, func(i int) float64 { return 0.1 * float64(i%7) })
	all, err := CompletionText.Words(text, spans, nll)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReasoningText.Words(text, spans, nll)
	if err != nil {
		t.Fatal(err)
	}
	var words []string
	for _, w := range got {
		words = append(words, text[w.Start:w.End])
	}
	want := []string{"She", "has", "9", "+", "7", "=", "16", "plums.", "ok"}
	if len(all) != 11 || len(words) != len(want) {
		t.Fatalf("reasoning words %q of %d; want %q of 11", words, len(all), want)
	}
	for i := range want {
		if words[i] != want[i] {
			t.Fatalf("reasoning words %q, want %q", words, want)
		}
	}
	// The same levels as the reasoning text scored on its own with the same NLLs (the
	// newline before the answer line is a token of spaces: it went with "####").
	text = "She has 9 + 7 = 16 plums.\n#### 16"
	spans, nll = spansOf(text, func(i int) float64 { return 0.1 * float64(i%7) })
	got, _ = ReasoningText.Words(text, spans, nll)
	cut := "She has 9 + 7 = 16 plums."
	alone, _ := CompletionText.Words(cut, spans[:len(cut)], nll[:len(cut)])
	l1, _ := MultiLevel(got)
	l2, _ := MultiLevel(alone)
	if l1 != l2 || len(got) != 8 {
		t.Fatalf("reasoning levels %+v of %d words, the cut text's %+v", l1, len(got), l2)
	}
	// A bare answer has no reasoning: no words, reward 0 as an empty completion.
	p := PPL{Weights: Weights{0.2, 0.3, 0.5}, Baselines: Levels{2, 2, 2}, Shape: Step, Thresholds: DefaultThresholds, Text: ReasoningText}
	s, n := spansOf(" #### 16", func(int) float64 { return 0.01 })
	if sc, err := p.ScoreText(" #### 16", s, n); err != nil || !sc.Empty || sc.Reward != 0 {
		t.Fatalf("bare answer: %+v, %v; want empty with reward 0", sc, err)
	}
}

func TestHasReasoning(t *testing.T) {
	for text, want := range map[string]bool{
		"72": false, "$1,200.50": false, "#### 72": false, "72\n#### 72": false, "-3": false, "": false,
		"48/2 = 24 clips.\n#### 72": true, "so 72": true, "#### 72\nbecause": true,
	} {
		if got := HasReasoning(text); got != want {
			t.Errorf("HasReasoning(%q) = %v, want %v", text, got, want)
		}
	}
}

// An inapplicable perplexity reward gives every sample NaN (not applicable, adding nothing to
// r) and no batch metrics, and needs no baselines.
func TestInapplicablePPL(t *testing.T) {
	p := PPL{Weights: Weights{0.2, 0.3, 0.5}, Shape: Step, Thresholds: DefaultThresholds, Text: ReasoningText, Inapplicable: "bare numbers"}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	p.Inapplicable = ""
	if err := p.Validate(); err == nil {
		t.Fatal("no baselines accepted for an applicable reward")
	}
	p.Inapplicable = "bare numbers"
	s, n := spansOf("so 9 + 7 = 16.\n#### 16", func(int) float64 { return 0.01 })
	res, err := Compose([]Weighted{{Func: p, Weight: 1}, {Func: Correctness{Flexible}, Weight: 1}},
		[]Sample{{Completion: "so 9 + 7 = 16.\n#### 16", Spans: s, NLL: n, Answer: "16"}})
	if err != nil {
		t.Fatal(err)
	}
	if !NotApplicable(res.ByFunc["ppl"][0]) || res.Total[0] != 1 {
		t.Fatalf("ppl %v, total %v; want NaN and 1 (correctness alone)", res.ByFunc["ppl"], res.Total)
	}
	if _, ok := res.Metrics["ppl/word"]; ok {
		t.Fatalf("metrics %v: ppl/word logged for an inapplicable reward", res.Metrics)
	}
}

func TestBaselinesCheckText(t *testing.T) {
	old := Baselines{} // a file from before `text`: whole texts
	if _, err := old.CheckText(CompletionText, false); err != nil {
		t.Fatal(err)
	}
	if _, err := old.CheckText(ReasoningText, false); err == nil {
		t.Fatal("baselines of whole texts accepted for the reasoning")
	}
	if w, err := old.CheckText(ReasoningText, true); err != nil || w == "" {
		t.Fatalf("accepted: %q, %v; want a warning", w, err)
	}
}
