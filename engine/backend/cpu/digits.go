package cpu

import "math"

// DigitProbs sets out[r·10+d] to the probability of digit d under the softmax over the
// digit tokens' logits only (ids[i] has digit values[i]; several tokens of a digit add up),
// in float64 after subtracting the maximum, as rewards.DigitVocab.DigitProbs.
func DigitProbs(out, logits []float32, ids, values []int32, rows, vocab int) {
	for r := 0; r < rows; r++ {
		row := logits[r*vocab : (r+1)*vocab]
		mx := math.Inf(-1)
		for _, id := range ids {
			mx = math.Max(mx, float64(row[id]))
		}
		var p [10]float64
		sum := 0.0
		for i, id := range ids {
			e := math.Exp(float64(row[id]) - mx)
			p[values[i]] += e
			sum += e
		}
		for d := range p {
			out[r*10+d] = float32(p[d] / sum)
		}
	}
}
