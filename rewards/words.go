// Package rewards holds the reward signals of DESIGN §6 as pure functions: multi-level
// perplexity against baselines, number token loss, answer correctness and format, and the
// weighted composition the GRPO engine calls. It imports nothing of the engine: callers hand
// it completion text, token byte offsets, per-token NLLs and digit-token logits.
package rewards

import (
	"fmt"
	"math"
	"sort"
	"unicode"
	"unicode/utf8"
)

// Span is a token's bytes [Start, End) within the completion text.
type Span struct{ Start, End int }

// Word is a maximal run of non-space characters of the completion (DESIGN §6.1) with the
// tokens that belong to it and NLL(w), the sum of their NLLs.
type Word struct {
	Start, End  int     // bytes of the word in the text
	FirstToken  int     // index of its first token; -1 when no token maps to it
	Tokens      int     // how many tokens belong to it
	NLL         float64 // NLL(w) = Σ nll_i over its tokens
	SentenceEnd bool    // a sentence ends after this word
}

// Words splits text into words and gives each word the NLL of its tokens. spans[i] are the
// bytes of token i in text and nll[i] its NLL. A token belongs to the word that holds its first
// non-space byte; a token of spaces only (or of no bytes, such as an end-of-text token) joins
// the next word, or the last word when none follows. Bytes, not tokens, decide, so a token that
// splits a multi-byte character is placed by the character its first byte belongs to.
// A text with no word gives no words and no error.
func Words(text string, spans []Span, nll []float64) ([]Word, error) {
	if len(spans) != len(nll) {
		return nil, fmt.Errorf("rewards: %d token spans but %d NLLs", len(spans), len(nll))
	}
	words, wordAt := splitWords(text)
	for i, s := range spans {
		if s.Start < 0 || s.End < s.Start || s.End > len(text) {
			return nil, fmt.Errorf("rewards: token %d has bytes [%d,%d) outside the completion (%d bytes)", i, s.Start, s.End, len(text))
		}
		if math.IsNaN(nll[i]) {
			return nil, fmt.Errorf("rewards: token %d has a NaN NLL", i)
		}
	}
	if len(words) == 0 {
		return nil, nil
	}
	for i, s := range spans {
		w := -1
		for b := s.Start; b < s.End; b++ {
			if wordAt[b] >= 0 {
				w = int(wordAt[b])
				break
			}
		}
		if w < 0 { // spaces only: the next word, else the last one
			w = sort.Search(len(words), func(k int) bool { return words[k].Start >= s.End })
			if w == len(words) {
				w = len(words) - 1
			}
		}
		wd := &words[w]
		if wd.Tokens == 0 {
			wd.FirstToken = i
		}
		wd.Tokens++
		wd.NLL += nll[i]
	}
	markSentenceEnds(text, words)
	return words, nil
}

// splitWords finds the maximal runs of non-space characters and, per byte, the word holding it
// (-1 for spaces). Bytes that are not valid UTF-8 count as non-space.
func splitWords(text string) ([]Word, []int32) {
	wordAt := make([]int32, len(text))
	var words []Word
	in := false
	for b := 0; b < len(text); {
		r, size := utf8.DecodeRuneInString(text[b:])
		space := r != utf8.RuneError && unicode.IsSpace(r)
		switch {
		case space && in:
			words[len(words)-1].End = b
			in = false
		case !space && !in:
			words = append(words, Word{Start: b, FirstToken: -1})
			in = true
		}
		for k := b; k < b+size; k++ {
			wordAt[k] = -1
			if !space {
				wordAt[k] = int32(len(words) - 1)
			}
		}
		b += size
	}
	if in {
		words[len(words)-1].End = len(text)
	}
	return words, wordAt
}

// markSentenceEnds applies DESIGN §6.1: a sentence ends at '.', '!' or '?' followed by space or
// the end of the text (so at the end of a word), or at a newline (between two words).
// The last word always closes the last sentence.
func markSentenceEnds(text string, words []Word) {
	for k := range words {
		w := &words[k]
		switch text[w.End-1] {
		case '.', '!', '?':
			w.SentenceEnd = true
		}
		if k+1 == len(words) {
			w.SentenceEnd = true
			continue
		}
		for b := w.End; b < words[k+1].Start; b++ {
			if text[b] == '\n' {
				w.SentenceEnd = true
				break
			}
		}
	}
}
