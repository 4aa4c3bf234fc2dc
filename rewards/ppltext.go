package rewards

import (
	"fmt"
	"strings"
)

// PPLText is the text the perplexity reward measures (a preset's `[ppl] text`).
type PPLText string

const (
	// CompletionText measures every word of the completion (the default).
	CompletionText PPLText = "completion"
	// ReasoningText measures the completion without its final `####` answer line: what a math
	// answer says on the way to its number. The number itself is judged by correctness and
	// NTL, and after a right derivation its tokens are all but certain, so scoring them would
	// reward repeating the last step rather than fluent reasoning.
	ReasoningText PPLText = "reasoning"
)

// ParsePPLText accepts "completion" (or "") and "reasoning".
func ParsePPLText(s string) (PPLText, error) {
	switch PPLText(s) {
	case "", CompletionText:
		return CompletionText, nil
	case ReasoningText:
		return ReasoningText, nil
	}
	return "", fmt.Errorf("perplexity text %q: want \"completion\" or \"reasoning\"", s)
}

func (t PPLText) describe() string {
	if t == ReasoningText {
		return "the reasoning (texts without their final `####` line)"
	}
	return "whole texts"
}

// Words are the words the perplexity levels are computed over (see Words): with
// ReasoningText, those of the final answer line (AnswerLine) are left out, with their tokens.
func (t PPLText) Words(text string, spans []Span, nll []float64) ([]Word, error) {
	words, err := Words(text, spans, nll)
	if err != nil || t != ReasoningText {
		return words, err
	}
	start, end, ok := AnswerLine(text)
	if !ok {
		return words, nil
	}
	kept := words[:0]
	for _, w := range words {
		if w.Start < start || w.Start >= end {
			kept = append(kept, w)
		}
	}
	return kept, nil
}

// HasReasoning reports whether a reference answer holds reasoning to measure: a word, outside
// its final answer line, that is not a number. "72", "$1,200" and "#### 72" hold none.
func HasReasoning(text string) bool {
	if start, end, ok := AnswerLine(text); ok {
		text = text[:start] + text[end:]
	}
	for _, w := range strings.Fields(text) {
		if strings.Trim(w, "0123456789.,$-") != "" {
			return true
		}
	}
	return false
}
