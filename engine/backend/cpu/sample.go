package cpu

import (
	"math"
	"math/bits"
	"sort"
)

// sampler draws one token from a row of logits; its buffers are reused across calls.
type sampler struct {
	logp []float32
	idx  []int
	prob []float64
}

// repetitionPenalty applies transformers' repetition penalty to row in place: the logit of
// each token whose bit is set in seen is divided by pen when positive, multiplied when not.
func repetitionPenalty(row []float32, seen []int32, pen float32) {
	for w, set := range seen {
		for b := uint32(set); b != 0; b &= b - 1 {
			j := w*32 + bits.TrailingZeros32(b)
			if j >= len(row) {
				break
			}
			if row[j] < 0 {
				row[j] *= pen
			} else {
				row[j] /= pen
			}
		}
	}
}

// sampleMinP returns a token and its log-probability under softmax(logits/T) (T=1 when
// greedy), u being the row's uniform draw in [0,1). Temperature, then top-k, then top-p over
// the top-k renormalised, then min-p (minP > 0: the tokens at least minP times as likely as
// the most likely), as Hugging Face's logits warpers apply them.
func (s *sampler) sampleMinP(logits []float32, u float64, temperature float32, topK int, topP, minP float32) (int, float32) {
	V := len(logits)
	if temperature == 0 {
		// LogSoftmax's value at best alone: the row is not written out
		best := argmax(logits)
		mx, lse := logSumExp(logits, 1)
		return best, float32(float64(logits[best]-mx) - lse)
	}
	if cap(s.logp) < V {
		s.logp = make([]float32, V)
	}
	s.logp = s.logp[:V]
	LogSoftmax(s.logp, logits, 1/temperature)
	k := topK
	if k <= 0 || k > V {
		k = V
	}
	usesTopP := topP > 0 && topP < 1
	if k == V && !usesTopP {
		// min-p alone is a threshold on log p: log p_max + log minP (−inf when off)
		best := argmax(s.logp)
		thr := math.Inf(-1)
		if minP > 0 {
			thr = float64(s.logp[best]) + math.Log(float64(minP))
		}
		kept := 1.0
		if minP > 0 {
			kept = 0
			for _, lp := range s.logp {
				if float64(lp) >= thr {
					kept += math.Exp(float64(lp))
				}
			}
		}
		u *= kept
		var c float64
		for j, lp := range s.logp {
			if float64(lp) < thr {
				continue
			}
			c += math.Exp(float64(lp))
			if u < c {
				return j, lp
			}
		}
		return best, s.logp[best]
	}
	// Candidates in order of decreasing probability (lowest id first among equals).
	s.idx = s.idx[:0]
	for j := 0; j < V; j++ {
		s.idx = append(s.idx, j)
	}
	lp := s.logp
	less := func(a, b int) bool {
		if lp[a] != lp[b] {
			return lp[a] > lp[b]
		}
		return a < b
	}
	if k < V {
		selectTop(s.idx, k, less)
		s.idx = s.idx[:k]
	}
	sort.Slice(s.idx, func(a, b int) bool { return less(s.idx[a], s.idx[b]) })
	s.prob = s.prob[:0]
	var total float64
	for _, j := range s.idx {
		p := math.Exp(float64(lp[j]))
		s.prob = append(s.prob, p)
		total += p
	}
	n := len(s.idx)
	if usesTopP {
		var c float64
		for i, p := range s.prob {
			c += p / total
			if c >= float64(topP) {
				n = i + 1
				break
			}
		}
	}
	// min-p over what top-k and top-p kept: p/p_max does not change with renormalising
	for n > 1 && s.prob[n-1] < float64(minP)*s.prob[0] {
		n--
	}
	var kept float64
	for _, p := range s.prob[:n] {
		kept += p
	}
	u *= kept
	var c float64
	for i, p := range s.prob[:n] {
		c += p
		if u < c {
			return s.idx[i], lp[s.idx[i]]
		}
	}
	return s.idx[n-1], lp[s.idx[n-1]]
}

// argmax is the index of the largest value, the lowest among equals.
func argmax(x []float32) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}

// selectTop reorders idx so that its first k entries are the k smallest under less
// (quickselect; the order within them is left to the caller).
func selectTop(idx []int, k int, less func(a, b int) bool) {
	lo, hi := 0, len(idx)-1
	for lo < hi {
		pivot := idx[(lo+hi)/2]
		i, j := lo, hi
		for i <= j {
			for less(idx[i], pivot) {
				i++
			}
			for less(pivot, idx[j]) {
				j--
			}
			if i <= j {
				idx[i], idx[j] = idx[j], idx[i]
				i++
				j--
			}
		}
		switch {
		case k-1 <= j:
			hi = j
		case k-1 >= i:
			lo = i
		default:
			return
		}
	}
}
