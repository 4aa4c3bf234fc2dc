package cpu

import (
	"runtime"

	"rlhfstation/engine/backend/cpu/gemm"
)

// For runs fn over [0, n) in contiguous chunks, one per core at most. grain is the fewest
// items that are worth a goroutine of their own: smaller work (decode-size steps) runs
// inline on the caller's goroutine, so its overhead stays negligible.
func For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	w := min(runtime.GOMAXPROCS(0), n/grain)
	if w <= 1 {
		fn(0, n)
		return
	}
	chunk := (n + w - 1) / w
	// The GEMM's helpers: a fresh goroutine starts 100-200 µs late on this project's virtual
	// machines, longer than most of these ops take.
	gemm.Parallel((n+chunk-1)/chunk, w, func(i int) { fn(i*chunk, min(i*chunk+chunk, n)) })
}

// ForPieces is For in ranges the cores take as they free, long first and short last
// (gemm.Ranges), each of grain items at least. The few-row products of decoding run it: a
// core that another process holds joins late and takes less, and the cores finish within a
// short range of each other.
func ForPieces(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	gemm.Ranges(n, grain, runtime.GOMAXPROCS(0), fn)
}

// grainFor returns how many rows of width cols make a goroutine's worth of work
// (about 32k multiply-adds).
func grainFor(cols int) int {
	return max(1, (1<<15)/max(cols, 1))
}

// reduceChunk is the fixed number of rows whose parameter gradients are summed together
// before the per-chunk partial sums are added in order: the result does not depend on the
// number of cores.
const reduceChunk = 64

// columnSums adds, into dst[cols], the sums over rows of the per-row contributions that
// rowFn writes into its part[cols] (which starts zeroed) for rows [lo, hi).
func columnSums(dst []float32, rows, cols int, rowFn func(part []float32, lo, hi int)) {
	nchunks := (rows + reduceChunk - 1) / reduceChunk
	if nchunks == 0 {
		return
	}
	parts := make([]float32, nchunks*cols)
	For(nchunks, max(1, grainFor(cols)/reduceChunk), func(c0, c1 int) {
		for c := c0; c < c1; c++ {
			rowFn(parts[c*cols:(c+1)*cols], c*reduceChunk, min((c+1)*reduceChunk, rows))
		}
	})
	for c := 0; c < nchunks; c++ {
		p := parts[c*cols : (c+1)*cols]
		for j, v := range p {
			dst[j] += v
		}
	}
}
