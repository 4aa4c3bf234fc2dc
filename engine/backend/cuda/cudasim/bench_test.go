package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"rlhfstation/internal/testref"
)

// benchKernel times launches of f over blocks×threads (one launch and its sync a
// repetition) and reports nanoseconds per CUDA thread.
func benchKernel(b *testing.B, name string, blocks, threads uint32, args func(a *api) []any) {
	a := stand(b)
	a.newContext(b)
	f := a.load(b, testKernels(b, a)).fn(b, name)
	as := args(a)
	a.ok(b, "warm-up", a.launch(f, d1(blocks, threads), 0, as...))
	a.ok(b, "cuCtxSynchronize", a.cuCtxSynchronize())
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		a.ok(b, "launch", a.launch(f, d1(blocks, threads), 0, as...))
		a.ok(b, "cuCtxSynchronize", a.cuCtxSynchronize())
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/float64(blocks*threads), "ns/thread")
}

// BenchmarkPlainKernel: a kernel that never waits runs as a loop over its threads.
func BenchmarkPlainKernel(b *testing.B) {
	const n = 1 << 20
	benchKernel(b, "add_one", n/256, 256, func(a *api) []any { return []any{alloc(b, a, 4*n), int64(n)} })
}

// BenchmarkBarrierKernel: a block reduction with a barrier per step (each thread a fiber).
func BenchmarkBarrierKernel(b *testing.B) {
	const blocks, threads = 1024, 256
	benchKernel(b, "block_sum", blocks, threads, func(a *api) []any {
		return []any{alloc(b, a, 4*blocks), alloc(b, a, 4*blocks*threads)}
	})
}

// BenchmarkShuffleKernel: RMSNorm of 4096 rows of 192, five butterfly shuffles a row.
func BenchmarkShuffleKernel(b *testing.B) {
	const rows, dim = 4096, 192
	benchKernel(b, "rmsnorm", rows/8, 256, func(a *api) []any {
		return []any{alloc(b, a, 4*rows*dim), alloc(b, a, 4*rows*dim), alloc(b, a, 4*dim), int32(rows), int32(dim), float32(1e-5)}
	})
}

// BenchmarkGEMM: cublasSgemm's GFLOP/s beside OpenBLAS on as many threads
// (../shared/tools/sgemm-anchor), measured in the same run.
func BenchmarkGEMM(b *testing.B) {
	for _, s := range [][3]int{{512, 512, 512}, {1024, 1024, 1024}, {64, 2048, 1024}} {
		m, n, k := s[0], s[1], s[2]
		b.Run(strconv.Itoa(m)+"x"+strconv.Itoa(n)+"x"+strconv.Itoa(k), func(b *testing.B) {
			a := stand(b)
			a.newContext(b)
			var h uintptr
			a.ok(b, "cublasCreate", a.cublasCreate(&h))
			defer a.cublasDestroy(h)
			A, B, C := alloc(b, a, 4*m*k), alloc(b, a, 4*k*n), alloc(b, a, 4*m*n)
			a.cuMemsetD32(A, 0x3c000000, uint64(m*k))
			a.cuMemsetD32(B, 0x3c000000, uint64(k*n))
			one, zero := float32(1), float32(0)
			run := func() {
				if st := a.cublasSgemm(h, 0, 0, int32(m), int32(n), int32(k), &one, A, int32(m), B, int32(k), &zero, C, int32(m)); st != 0 {
					b.Fatalf("cublasSgemm: %d", st)
				}
				a.ok(b, "cuCtxSynchronize", a.cuCtxSynchronize())
			}
			run()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				run()
			}
			gf := 2 * float64(m) * float64(n) * float64(k) * float64(b.N) / time.Since(start).Seconds() / 1e9
			b.ReportMetric(gf, "GFLOP/s")
			if anchor, err := openBLAS(m, n, k); err == nil {
				b.ReportMetric(anchor, "openblas_GFLOP/s")
				b.ReportMetric(gf/anchor, "ratio")
			} else {
				b.Logf("no anchor: %v", err)
			}
		})
	}
}

var anchorLine = regexp.MustCompile(`: ([0-9.]+) GFLOP/s`)

// openBLAS runs ../shared/tools/sgemm-anchor (row-major NN, same flop count) on as many
// threads as the device process uses.
func openBLAS(m, n, k int) (float64, error) {
	tool := filepath.Join(testref.RepoRoot(), "..", "shared", "tools", "sgemm-anchor")
	cmd := exec.Command(tool, strconv.Itoa(m), strconv.Itoa(n), strconv.Itoa(k))
	threads := runtime.NumCPU()
	if s := os.Getenv("CUDASIM_WORKERS"); s != "" {
		threads, _ = strconv.Atoi(s)
	}
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+strconv.Itoa(threads))
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	mm := anchorLine.FindSubmatch(out)
	if mm == nil {
		return 0, os.ErrNotExist
	}
	return strconv.ParseFloat(string(mm[1]), 64)
}

// BenchmarkLaunchOverhead: a one-block launch and its sync with 1000 live allocations of
// 64 KiB each (the end-of-buffer checks after each kernel must not scale with their bytes).
func BenchmarkLaunchOverhead(b *testing.B) {
	a := stand(b)
	a.newContext(b)
	f := a.load(b, testKernels(b, a)).fn(b, "add_one")
	var p uint64
	for i := 0; i < 1000; i++ {
		p = alloc(b, a, 64<<10-512+i%3*100)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.ok(b, "launch", a.launch(f, d1(1, 32), 0, p, int64(32)))
		a.ok(b, "cuCtxSynchronize", a.cuCtxSynchronize())
	}
}
