package cpu

import (
	"math"
	"runtime"
	"slices"
	"sort"
	"testing"
)

// sampleRef is sampleMinP as it was before its passes went to the cores (one scalar pass for
// argmax, a comparison sort of the whole vocabulary for top-p, a quickselect for top-k), on
// the same log-softmax: the new passes must pick the same token with the same log-prob.
func (s *sampler) sampleRef(logits []float32, u float64, temperature float32, topK int, topP, minP float32) (int, float32) {
	V := len(logits)
	if temperature == 0 {
		// LogSoftmax's value at best alone: the row is not written out
		best := argmaxScan(logits)
		mx, lse := logSumExp(logits, 1, false)
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
		best := argmaxScan(s.logp)
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

// TestSampleMatchesRef: every path of the draw (the whole vocabulary with and without min-p,
// top-k by its histogram and by the radix sort, top-p over the sorted vocabulary, and their
// mixes) gives sampleRef's token and log-prob on rows with ties, masked logits, a token
// holding all the mass, and Qwen2.5's vocabulary, for several draws, on one core and two.
func TestSampleMatchesRef(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	inf := float32(math.Inf(-1))
	big := randn(151936, 31)
	ties := randn(3*lseChunk+11, 32) // many equal values: ids decide the order
	for j := range ties {
		ties[j] = float32(math.Round(float64(ties[j])*2)) / 2
	}
	flat := make([]float32, 2*lseChunk+1) // all equal: the radix sort's whole-vocabulary path
	rows := [][]float32{{1, 3, 3, 0}, {2, 0.5, 0.5, 0.4}, {inf, 1, inf, -2, 1}, {0, -200, -200, -300}, big, ties, flat}
	for j := range big {
		big[j] *= 3
	}
	type cfg struct {
		temp    float32
		k       int
		p, minP float32
		bigToo  bool
	}
	us := []float64{0, 0.37, 0.999999}
	cfgs := []cfg{
		{temp: 1, bigToo: true},
		{temp: 0.7, minP: 0.05, bigToo: true},
		{temp: 1, p: 0.9, bigToo: true},
		{temp: 1, k: 50, p: 0.9, bigToo: true},
		{temp: 1.3, k: 5, minP: 0.1, bigToo: true},
		{temp: 1, k: 1},
		{temp: 0.8, k: 3, p: 0.5},
		{temp: 1, k: 2 * lseChunk, p: 0.95}, // k beyond a quarter of the flat row: sortAll
		{temp: 2, p: 0.3, minP: 0.5},
		{temp: 1, minP: 1}, // the tokens tied with the best sit on the threshold
	}
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for ri, row := range rows {
			for _, c := range cfgs {
				if len(row) == len(big) && !c.bigToo {
					continue
				}
				for _, u := range us {
					var s, r sampler
					tok, lp := s.sampleMinP(row, u, c.temp, c.k, c.p, c.minP)
					wtok, wlp := r.sampleRef(row, u, c.temp, c.k, c.p, c.minP)
					if tok != wtok || math.Float32bits(lp) != math.Float32bits(wlp) {
						t.Fatalf("%d cores, row %d (%d logits), %+v, u=%g: token %d log-prob %v; want %d %v", procs, ri, len(row), c, u, tok, lp, wtok, wlp)
					}
				}
			}
		}
	}
}

// TestCandidateOrder: sortAll and selectTopK give the comparison sort's order (decreasing
// log-prob, lowest id first among equals) on rows with many ties and on Qwen2.5's vocabulary.
func TestCandidateOrder(t *testing.T) {
	ties := randn(3*lseChunk+11, 32)
	for j := range ties {
		ties[j] = float32(math.Round(float64(ties[j])*2)) / 2
	}
	for _, row := range [][]float32{{1, 3, 3, 0, 2}, ties, randn(151936, 33), make([]float32, 1000)} {
		var s sampler
		s.logp = make([]float32, len(row))
		LogSoftmax(s.logp, row, 1)
		lp := s.logp
		want := make([]int, len(row))
		for j := range want {
			want[j] = j
		}
		sort.Slice(want, func(a, b int) bool {
			if lp[want[a]] != lp[want[b]] {
				return lp[want[a]] > lp[want[b]]
			}
			return want[a] < want[b]
		})
		s.sortAll()
		s.idx = s.idx[:0]
		for _, v := range s.keys {
			s.idx = append(s.idx, int(uint32(v)))
		}
		if !slices.Equal(s.idx, want) {
			t.Fatalf("%d logits: sortAll's order differs from the comparison sort's", len(row))
		}
		for _, k := range []int{1, 2, 5, 50, 1000, len(row) / 3, len(row) - 1} {
			if k < 1 || k > len(row) {
				continue
			}
			s.selectTopK(k)
			if !slices.Equal(s.idx, want[:k]) {
				t.Fatalf("%d logits: selectTopK(%d) = %v…, want %v…", len(row), k, s.idx[:min(k, 8)], want[:min(k, 8)])
			}
		}
	}
}

// TestDescKeyOrder: descKey orders values as > does, −0 and +0 alike, and keyLogp undoes it.
func TestDescKeyOrder(t *testing.T) {
	inf := float32(math.Inf(1))
	v := []float32{-inf, -math.MaxFloat32, -3, -1, -math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 0,
		math.SmallestNonzeroFloat32, 1e-30, 1, 2.5, math.MaxFloat32, inf}
	for _, a := range v {
		for _, b := range v {
			ka, kb := descKey(a), descKey(b)
			if (ka < kb) != (a > b) || (ka == kb) != (a == b) {
				t.Fatalf("descKey(%v) = %#x, descKey(%v) = %#x", a, ka, b, kb)
			}
			if back := keyLogp(ka); back != a || math.Signbit(float64(back)) != (math.Signbit(float64(a)) && a != 0) {
				t.Fatalf("keyLogp(descKey(%v)) = %v", a, back)
			}
		}
	}
}

// TestDrawAllPastPrediction: when the chunk sums put the draw too early (here: all the mass
// in the first chunk), the walk takes the exponentials further and still draws sampleRef's
// token.
func TestDrawAllPastPrediction(t *testing.T) {
	row := randn(5*lseChunk+3, 34)
	for _, u := range []float64{0.2, 0.6, 0.999} {
		var s, r sampler
		s.logp = make([]float32, len(row))
		s.parts = logSoftmax(s.logp, row, 1, nil)
		for c := range s.parts {
			s.parts[c] = 0
		}
		s.parts[0] = 1
		tok, lp := s.drawAll(u, 0)
		wtok, wlp := r.sampleRef(row, u, 1, 0, 0, 0)
		if tok != wtok || lp != wlp || tok < lseChunk {
			t.Fatalf("u=%g: token %d log-prob %v; want %d %v (past the first chunk)", u, tok, lp, wtok, wlp)
		}
	}
}
