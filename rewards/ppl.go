package rewards

import (
	"fmt"
	"math"
)

// Levels are the three perplexity levels of DESIGN §6.1, all normalised per word.
type Levels struct {
	Word     float64 `json:"word"`
	Phrase   float64 `json:"phrase"`
	Sentence float64 `json:"sentence"`
}

// Weights are a preset's weights of the word, phrase and sentence levels.
type Weights struct {
	Word     float64 `json:"word"`
	Phrase   float64 `json:"phrase"`
	Sentence float64 `json:"sentence"`
}

// phraseSizes are the window lengths n of the phrase level.
var phraseSizes = [...]int{2, 3, 4}

// WordPerplexity is P_word = exp(mean_w NLL(w)).
func WordPerplexity(words []Word) float64 {
	if len(words) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, w := range words {
		sum += w.NLL
	}
	return math.Exp(sum / float64(len(words)))
}

// PhrasePerplexity is P_phrase: for each n in {2,3,4}, P_n is the arithmetic mean over windows
// of n consecutive words of exp(Σ_window NLL(w) / n); P_phrase is the mean of the P_n that
// exist, or P_word when the text has fewer than two words.
func PhrasePerplexity(words []Word) float64 {
	sum, count := 0.0, 0
	for _, n := range phraseSizes {
		if len(words) < n {
			continue
		}
		sum += meanWindowPerplexity(words, n)
		count++
	}
	if count == 0 {
		return WordPerplexity(words)
	}
	return sum / float64(count)
}

// meanWindowPerplexity is P_n, with a running window sum.
func meanWindowPerplexity(words []Word, n int) float64 {
	window := 0.0
	for _, w := range words[:n] {
		window += w.NLL
	}
	sum := math.Exp(window / float64(n))
	for k := n; k < len(words); k++ {
		window += words[k].NLL - words[k-n].NLL
		sum += math.Exp(window / float64(n))
	}
	return sum / float64(len(words)-n+1)
}

// SentencePerplexity is P_sentence: the arithmetic mean over sentences s of
// p_s = exp(Σ_{w∈s} NLL(w) / |s|). Sentences come from Word.SentenceEnd.
func SentencePerplexity(words []Word) float64 {
	if len(words) == 0 {
		return math.NaN()
	}
	sum, sentences := 0.0, 0
	nll, size := 0.0, 0
	for k, w := range words {
		nll += w.NLL
		size++
		if w.SentenceEnd || k == len(words)-1 {
			sum += math.Exp(nll / float64(size))
			sentences++
			nll, size = 0, 0
		}
	}
	return sum / float64(sentences)
}

// MultiLevel computes the three levels of a completion's words; ok is false when there is no
// word (an empty completion, which gets reward 0).
func MultiLevel(words []Word) (l Levels, ok bool) {
	if len(words) == 0 {
		return Levels{math.NaN(), math.NaN(), math.NaN()}, false
	}
	return Levels{
		Word:     WordPerplexity(words),
		Phrase:   PhrasePerplexity(words),
		Sentence: SentencePerplexity(words),
	}, true
}

// Aggregate is the shown perplexity exp(Σ_l w_l ln P_l).
func Aggregate(l Levels, w Weights) float64 {
	return math.Exp(w.Word*math.Log(l.Word) + w.Phrase*math.Log(l.Phrase) + w.Sentence*math.Log(l.Sentence))
}

// Improvement is I = Σ_l w_l (B_l − P_l) / B_l against baselines B: positive when the
// completion is less perplexing than the reference text.
func Improvement(l, base Levels, w Weights) float64 {
	return w.Word*(base.Word-l.Word)/base.Word +
		w.Phrase*(base.Phrase-l.Phrase)/base.Phrase +
		w.Sentence*(base.Sentence-l.Sentence)/base.Sentence
}

// Validate rejects negative or non-finite weights and weights that are all zero.
func (w Weights) Validate() error {
	for _, v := range []struct {
		name string
		x    float64
	}{{"word", w.Word}, {"phrase", w.Phrase}, {"sentence", w.Sentence}} {
		if v.x < 0 || math.IsNaN(v.x) || math.IsInf(v.x, 0) {
			return fmt.Errorf("perplexity weight %s = %v: weights must be finite and not negative", v.name, v.x)
		}
	}
	if w.Word+w.Phrase+w.Sentence == 0 {
		return fmt.Errorf("perplexity weights are all zero")
	}
	return nil
}
