package cpu

import (
	"math"
	"runtime"

	"rlhfstation/engine/backend/cpu/gemm"
)

// lseChunk is how many values of a row one core takes at a time in the reductions over a
// vocabulary (its maximum, its sum of exponentials). A constant, not a
// function of the core count: the chunks' sums are added in chunk order, so the bits do not
// depend on how many cores took the chunks.
const lseChunk = 8192

// mapPiece is how many values of a row a core takes at a time in a pass that is a map (each
// value on its own: the piece does not change the bits). Smaller than a chunk, so that a
// helper whose thread is taken off its core in the middle of a piece holds the call up for
// less: math.Exp takes about 20 µs for 1,024 values here. A row of one piece stays on the
// caller.
const mapPiece = 1024

// eachPiece runs f over the pieces of size values of a row of n (lseChunk's chunks, or
// mapPiece's pieces), on the cores when there are two pieces or more and par is set (callers
// already inside For pass false).
func eachPiece(n, size int, par bool, f func(c, lo, hi int)) {
	np := (n + size - 1) / size
	g := func(c int) { f(c, c*size, min(c*size+size, n)) }
	if w := runtime.GOMAXPROCS(0); par && np >= 2 && w >= 2 {
		gemm.Parallel(np, w, g)
		return
	}
	for c := range np {
		g(c)
	}
}

// maxNaN returns the largest x[j]·scale that is not NaN (−Inf if none; which zero, when it is
// zero, is unspecified) and whether any x[j]·scale is NaN.
func maxNaN(x []float32, scale float32) (float32, bool) {
	m, nan, n := maxNaNAsm(x, scale)
	for _, v := range x[n:] {
		p := v * scale
		if p > m {
			m = p
		} else if p != p {
			nan = true
		}
	}
	return m, nan
}

// expSum returns Σ expf(x[j]·scale + b1) (expAffine's values) in float64: eight running sums,
// of the values j mod 8, added together in a fixed order.
func expSum(x []float32, scale, b1 float32) float64 {
	var acc [8]float64
	n := expSumAsm(x, scale, b1, &acc)
	var buf [8]float32
	for c := n; c < len(x); c += 8 {
		part := x[c:min(c+8, len(x))]
		expAffineGo(buf[:len(part)], part, scale, b1, 0)
		for i, e := range buf[:len(part)] {
			acc[i] += float64(e)
		}
	}
	return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

// rowMax is a row's largest x·scale, found chunk by chunk.
type rowMax struct {
	mx    float32 // as Go's max builtin folds it: NaN if any is NaN, +0 over −0
	top   float32 // the largest that is not NaN (−Inf if none)
	chunk int     // the first chunk whose largest non-NaN value is top
}

// maxOf finds the row's largest x·scale.
func maxOf(x []float32, scale float32, par bool) rowMax {
	nc := (len(x) + lseChunk - 1) / lseChunk
	ms, nans := make([]float32, nc), make([]bool, nc)
	eachPiece(len(x), lseChunk, par, func(c, lo, hi int) { ms[c], nans[c] = maxNaN(x[lo:hi], scale) })
	r := rowMax{top: float32(math.Inf(-1))}
	nan := false
	for c, m := range ms {
		if m > r.top {
			r.top, r.chunk = m, c
		}
		nan = nan || nans[c]
	}
	switch {
	case nan:
		r.mx = float32(math.NaN())
	case r.top == 0: // +0 if any value is +0
		r.mx = float32(math.Copysign(0, -1))
		for _, v := range x {
			if p := v * scale; p == 0 && !math.Signbit(float64(p)) {
				r.mx = 0
				break
			}
		}
	default:
		r.mx = r.top
	}
	return r
}

// argmaxOf is the index of the largest value of x, the lowest among equals, given x's
// maximum at scale 1: NaN is never larger than anything, so a row starting with NaN gives 0
// and a NaN later is passed over.
func argmaxOf(x []float32, r rowMax) int {
	if len(x) == 0 || x[0] != x[0] {
		return 0
	}
	lo := r.chunk * lseChunk
	for j, v := range x[lo:min(lo+lseChunk, len(x))] {
		if v == r.top {
			return lo + j
		}
	}
	return 0 // not reached: the chunk holds top
}

// argmax is the index of the largest value, the lowest among equals, on the cores for a
// long row.
func argmax(x []float32) int {
	return argmaxOf(x, maxOf(x, 1, true))
}

// logSumExp returns the row maximum m of x·invTemp (as Go's max builtin folds it) and
// log Σ exp(x·invTemp − m), the sum in float64 by chunks (expSum) added in chunk order; on
// the cores, when par is set, for a row of two chunks or more.
func logSumExp(x []float32, invTemp float32, par bool) (float32, float64) {
	mx := maxOf(x, invTemp, par).mx
	lse, _ := lseParts(x, invTemp, mx, par, nil)
	return mx, lse
}

// lseParts is logSumExp's sum given the row's maximum, each chunk's sum of exponentials kept
// in parts (grown to the chunks), which it returns.
func lseParts(x []float32, invTemp, mx float32, par bool, parts []float64) (float64, []float64) {
	parts = grow(parts, (len(x)+lseChunk-1)/lseChunk)
	eachPiece(len(x), lseChunk, par, func(c, lo, hi int) { parts[c] = expSum(x[lo:hi], invTemp, -mx) })
	var s float64
	for _, p := range parts {
		s += p
	}
	return math.Log(s), parts
}
