package cpu

import (
	"math"
	"math/bits"
	"runtime"
	"sort"
)

// sampler draws one token from a row of logits; its buffers are reused across calls.
type sampler struct {
	logp        []float32
	idx         []int
	prob        []float64
	keys, keys2 []uint64  // sortAll's (key, id) pairs
	parts       []float64 // the log-softmax's sums of exponentials by chunk
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
// the most likely), as Hugging Face's logits warpers apply them. The passes over the whole
// vocabulary run on the cores; the sums that decide the token are the same sequential
// float64 sums whatever the cores.
func (s *sampler) sampleMinP(logits []float32, u float64, temperature float32, topK int, topP, minP float32) (int, float32) {
	V := len(logits)
	if temperature == 0 {
		// LogSoftmax's value at best alone: the row is not written out. One pass for the
		// maximum, argmax's and the log-sum-exp's.
		r := maxOf(logits, 1, true)
		best := argmaxOf(logits, r)
		lse, _ := lseParts(logits, 1, r.mx, true, nil)
		return best, float32(float64(logits[best]-r.mx) - lse)
	}
	s.logp = grow(s.logp, V)
	s.parts = logSoftmax(s.logp, logits, 1/temperature, s.parts)
	k := topK
	if k <= 0 || k > V {
		k = V
	}
	usesTopP := topP > 0 && topP < 1
	if k == V && !usesTopP {
		return s.drawAll(u, minP)
	}
	// Candidates in order of decreasing probability (lowest id first among equals).
	lp := s.logp
	if k < V {
		s.selectTopK(k)
		s.prob = grow(s.prob, k)
		eachPiece(k, mapPiece, true, func(_, lo, hi int) {
			for i, j := range s.idx[lo:hi] {
				s.prob[lo+i] = math.Exp(float64(lp[j]))
			}
		})
	} else {
		// Each key gives back its log-prob (keyLogp), so the exponentials run in sorted order.
		s.sortAll()
		s.prob = grow(s.prob, V)
		eachPiece(V, mapPiece, true, func(_, lo, hi int) {
			for i, v := range s.keys[lo:hi] {
				s.prob[lo+i] = math.Exp(float64(keyLogp(uint32(v >> 32))))
			}
		})
	}
	id := func(i int) int {
		if k < V {
			return s.idx[i]
		}
		return int(uint32(s.keys[i]))
	}
	var total float64
	for _, p := range s.prob {
		total += p
	}
	n := len(s.prob)
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
			return id(i), lp[id(i)]
		}
	}
	return id(n - 1), lp[id(n-1)]
}

// drawAll draws from the whole vocabulary by its cumulative sum in id order, min-p alone
// being a threshold on log p: log p_max + log minP (−inf when off). The exponentials are
// taken on the cores: without min-p, up to the chunk where the log-softmax's chunk sums put
// the draw (with a margin) in one go, and further a block of chunks at a time if the exact
// sum runs on; the sums that decide run in id order.
func (s *sampler) drawAll(u float64, minP float32) (int, float32) {
	lp := s.logp
	V := len(lp)
	best := argmax(lp)
	thr := math.Inf(-1)
	if minP > 0 {
		thr = float64(lp[best]) + math.Log(float64(minP))
	}
	s.prob = grow(s.prob, V)
	exps := func(lo, hi int) { // s.prob[lo:hi], 0 below the threshold
		eachPiece(hi-lo, mapPiece, true, func(_, a, b int) {
			for j := lo + a; j < lo+b; j++ {
				p := 0.0
				if float64(lp[j]) >= thr || lp[j] != lp[j] { // a NaN is summed, as before
					p = math.Exp(float64(lp[j]))
				}
				s.prob[j] = p
			}
		})
	}
	kept, done := 1.0, V
	if minP > 0 {
		exps(0, V)
		kept = 0
		for j, p := range s.prob {
			if float64(lp[j]) >= thr {
				kept += p
			}
		}
	} else {
		var total, cum float64
		for _, p := range s.parts {
			total += p
		}
		end := len(s.parts)
		for c, p := range s.parts {
			if cum += p; cum > (u+1e-4)*total {
				end = c + 1
				break
			}
		}
		done = min(end*lseChunk, V)
		exps(0, done)
	}
	u *= kept
	var c float64
	for j := 0; j < V; j++ {
		if j == done {
			done = min(done+lseChunk*runtime.GOMAXPROCS(0), V)
			exps(j, done)
		}
		if float64(lp[j]) < thr {
			continue
		}
		c += s.prob[j]
		if u < c {
			return j, lp[j]
		}
	}
	return best, lp[best]
}

// descKey maps a log-prob to a key whose ascending order is the log-probs' descending order,
// −0 as +0 (they compare equal).
func descKey(v float32) uint32 {
	b := math.Float32bits(v)
	switch {
	case b == 1<<31:
		return 0x7fffffff
	case b&(1<<31) != 0:
		return b
	}
	return ^b & 0x7fffffff
}

// keyLogp is descKey's inverse (−0 comes back as +0).
func keyLogp(d uint32) float32 {
	if d&(1<<31) == 0 {
		d = ^d & 0x7fffffff
	}
	return math.Float32frombits(d)
}

// sortAll sets s.keys to every (key, id) pair, the id in the low 32 bits, in order of
// decreasing log-prob, the lowest id first among equals: a stable radix sort a byte of the
// key at a time, passing over a byte that all keys share.
func (s *sampler) sortAll() {
	lp := s.logp
	V := len(lp)
	a, b := grow(s.keys, V), grow(s.keys2, V)
	var h [4][256]int32
	for j, v := range lp {
		d := descKey(v)
		a[j] = uint64(d)<<32 | uint64(j)
		h[0][d&0xff]++
		h[1][d>>8&0xff]++
		h[2][d>>16&0xff]++
		h[3][d>>24]++
	}
	for p := range h {
		shift := uint(32 + 8*p)
		cnt := &h[p]
		if cnt[a[0]>>shift&0xff] == int32(V) {
			continue
		}
		var off [256]int32
		var o int32
		for d, c := range cnt {
			off[d] = o
			o += c
		}
		for _, v := range a {
			d := v >> shift & 0xff
			b[off[d]] = v
			off[d]++
		}
		a, b = b, a
	}
	s.keys, s.keys2 = a, b
}

// selectTopK sets s.idx to the k most likely ids in order of decreasing log-prob, the lowest
// id first among equals. A histogram of the keys' top 12 bits (an eighth of an octave) finds
// the bucket the k-th falls in; the ids in it and above are the candidates, whose k best the
// quickselect and sort then order (the whole vocabulary's radix sort when they are many).
func (s *sampler) selectTopK(k int) {
	lp := s.logp
	V := len(lp)
	var h [4096]int32
	for _, v := range lp {
		h[descKey(v)>>20]++
	}
	var bucket, cum int
	for bucket = range h {
		if cum += int(h[bucket]); cum >= k {
			break
		}
	}
	if cum > V/4 {
		s.sortAll()
		s.idx = grow(s.idx, k)
		for i, v := range s.keys[:k] {
			s.idx[i] = int(uint32(v))
		}
		return
	}
	s.idx = s.idx[:0]
	for j, v := range lp {
		if int(descKey(v)>>20) <= bucket {
			s.idx = append(s.idx, j)
		}
	}
	less := func(a, b int) bool {
		if lp[a] != lp[b] {
			return lp[a] > lp[b]
		}
		return a < b
	}
	selectTop(s.idx, k, less)
	s.idx = s.idx[:k]
	sort.Slice(s.idx, func(a, b int) bool { return less(s.idx[a], s.idx[b]) })
}

// grow returns buf with length n, reallocated only when its capacity is short.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
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
