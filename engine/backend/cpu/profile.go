package cpu

import (
	"sync/atomic"
	"time"

	"rlhfstation/engine/backend/cpu/gemm"
)

// GEMM accounting for benchmarks: while enabled, every product the ops make is timed and
// its floating-point operations counted, so that a benchmark can report the share of time
// spent in GEMM and the rate it ran at.
var (
	profiling atomic.Bool
	gemmNanos atomic.Int64
	gemmFlops atomic.Int64
	gemmCalls atomic.Int64
)

// GEMMStats is what the ops spent in GEMM since ResetGEMMStats.
type GEMMStats struct {
	Calls   int64
	Seconds float64
	Flops   float64 // 2·m·n·k per product
}

// ProfileGEMM turns GEMM accounting on or off.
func ProfileGEMM(on bool) { profiling.Store(on) }

// ResetGEMMStats clears the counters.
func ResetGEMMStats() {
	gemmNanos.Store(0)
	gemmFlops.Store(0)
	gemmCalls.Store(0)
}

// ReadGEMMStats returns the counters.
func ReadGEMMStats() GEMMStats {
	return GEMMStats{Calls: gemmCalls.Load(), Seconds: float64(gemmNanos.Load()) / 1e9, Flops: float64(gemmFlops.Load())}
}

// sgemm is gemm.Sgemm with the accounting above.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	// A·Bᵀ with few rows of A (decoding, and LoRA's products beside it) streams B once.
	few := f32DotOn && !transA && transB && m <= f32DotMaxRows && n > 0 && k > 0
	if !profiling.Load() {
		if few {
			f32Dot(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		} else {
			gemm.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}
		return
	}
	t := time.Now()
	if few {
		f32Dot(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	} else {
		gemm.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
	gemmNanos.Add(int64(time.Since(t)))
	gemmFlops.Add(2 * int64(m) * int64(n) * int64(k))
	gemmCalls.Add(1)
}

// sgemmSource is gemm.SgemmSource, counted as sgemm is.
func sgemmSource(transA bool, m, n, k int, alpha float32, a []float32, lda int,
	src gemm.PanelSource, beta float32, c []float32, ldc int) {
	if !profiling.Load() {
		gemm.SgemmSource(transA, m, n, k, alpha, a, lda, src, beta, c, ldc)
		return
	}
	t := time.Now()
	gemm.SgemmSource(transA, m, n, k, alpha, a, lda, src, beta, c, ldc)
	gemmNanos.Add(int64(time.Since(t)))
	gemmFlops.Add(2 * int64(m) * int64(n) * int64(k))
	gemmCalls.Add(1)
}
