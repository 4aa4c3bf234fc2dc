package rewards

import (
	"math"
	"testing"
)

// NTL scored from digit distributions the generator formed (NTLInput.DigitProbs) equals NTL
// scored from the digit logits themselves; a digit position without one is an error.
func TestNTLFromDigitProbs(t *testing.T) {
	v := testDigitVocab(t)
	text, ids, spans := completion(16, 15, 8, 3, 17, 15, 12, 15, 13)
	rows := make([][]float32, len(ids))
	rows[2] = logitsFor(v, map[int]float64{7: 0.25, 8: 0.5, 9: 0.25})
	rows[3] = logitsFor(v, map[int]float64{3: 0.5, 4: 0.5})
	rows[6] = logitsFor(v, map[int]float64{1: 0.9, 2: 0.1})
	probs := make([][]float32, len(ids))
	for i, r := range rows {
		if r == nil {
			continue
		}
		p, err := v.DigitProbs(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range p {
			probs[i] = append(probs[i], float32(x))
		}
	}
	for _, loss := range []NTLLoss{MSE, Wasserstein} {
		n := NTL{Vocab: v, Mode: AllTokensMode, Loss: loss, Tau: 1}
		want, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, DigitLogits: DigitRows(rows)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, DigitProbs: DigitRows(probs)})
		if err != nil {
			t.Fatal(err)
		}
		if got.Total != want.Total || got.Correct != want.Correct || math.Abs(got.Loss-want.Loss) > 1e-6 || math.Abs(got.Reward-want.Reward) > 1e-6 {
			t.Errorf("loss %v: from probabilities %+v, from logits %+v", loss, got, want)
		}
	}
	probs[3] = nil
	n := NTL{Vocab: v, Mode: AllTokensMode, Loss: MSE, Tau: 1}
	if _, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, DigitProbs: DigitRows(probs)}); err == nil {
		t.Errorf("a digit position without probabilities was scored")
	}
}
