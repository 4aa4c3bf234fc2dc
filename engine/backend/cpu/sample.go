package cpu

import (
	"math"
	"sort"
)

// sampler draws one token from a row of logits; its buffers are reused across calls.
type sampler struct {
	logp []float32
	idx  []int
	prob []float64
}

// sample returns a token and its log-probability under softmax(logits/T) (T=1 when
// greedy), u being the row's uniform draw in [0,1). Temperature, then top-k, then top-p over
// the top-k renormalised, as Hugging Face's logits warpers apply them.
func (s *sampler) sample(logits []float32, u float64, temperature float32, topK int, topP float32) (int, float32) {
	V := len(logits)
	if cap(s.logp) < V {
		s.logp = make([]float32, V)
	}
	s.logp = s.logp[:V]
	if temperature == 0 {
		best := argmax(logits)
		LogSoftmax(s.logp, logits, 1)
		return best, s.logp[best]
	}
	LogSoftmax(s.logp, logits, 1/temperature)
	k := topK
	if k <= 0 || k > V {
		k = V
	}
	usesTopP := topP > 0 && topP < 1
	if k == V && !usesTopP {
		var c float64
		for j, lp := range s.logp {
			c += math.Exp(float64(lp))
			if u < c {
				return j, lp
			}
		}
		best := argmax(s.logp)
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
