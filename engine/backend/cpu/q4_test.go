package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/internal/testref"
	"rlhfstation/quant"
)

func randn(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 3))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func maxRelDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		m = max(m, math.Abs(float64(b[i])))
	}
	return d / max(m, 1e-30)
}

// TestPanelsMatchSgemm: the 4-bit GEMM (panels expanded tile by tile) equals dequantize-then-
// Sgemm, forward (x·Wᵀ) and backward into the input (dy·W).
func TestPanelsMatchSgemm(t *testing.T) {
	shapes := []struct{ m, n, k int }{{1, 1, 1}, {37, 45, 70}, {5, 33, 129}, {300, 1100, 600}, {64, 17, 1500}}
	for _, opt := range []quant.Options{quant.Default(), {Type: quant.FP4, BlockSize: 32}} {
		for _, s := range shapes {
			// W is [out = n, in = k].
			w, err := quant.Quantize(randn(s.n*s.k, 1), s.n, s.k, "", opt)
			if err != nil {
				t.Fatal(err)
			}
			dense := make([]float32, s.n*s.k)
			w.Dequantize(dense)
			x := randn(s.m*s.k, 2)
			y1, y2 := make([]float32, s.m*s.n), make([]float32, s.m*s.n)
			gemm.SgemmSource(false, s.m, s.n, s.k, 1, x, s.k, q4Transposed{w}, 0, y1, s.n)
			gemm.Sgemm(false, true, s.m, s.n, s.k, 1, x, s.k, dense, s.k, 0, y2, s.n)
			if d := maxRelDiff(y1, y2); d > 1e-5 {
				t.Errorf("%v %v forward: max diff %.3g of max |y|", opt, s, d)
			}
			dy := randn(s.m*s.n, 3)
			dx1, dx2 := make([]float32, s.m*s.k), make([]float32, s.m*s.k)
			gemm.SgemmSource(false, s.m, s.k, s.n, 1, dy, s.n, q4Panels{w}, 0, dx1, s.k)
			gemm.Sgemm(false, false, s.m, s.k, s.n, 1, dy, s.n, dense, s.k, 0, dx2, s.k)
			if d := maxRelDiff(dx1, dx2); d > 1e-5 {
				t.Errorf("%v %v backward: max diff %.3g of max |dx|", opt, s, d)
			}
		}
	}
}

// BenchmarkLinear4bit times y = x·Wᵀ at M = 2048 tokens with W in NF4 (panels expanded tile by
// tile) against the float32 Sgemm on the dequantized W, interleaved so that a busy machine slows
// both alike; x_fp32 is the ratio of their GFLOP/s, x_openblas the 4-bit GEMM's against
// ../shared/tools/sgemm-anchor at the same M N K.
// run: go test ./engine/backend/cpu -run X -bench Linear4bit -benchtime 10x
func BenchmarkLinear4bit(b *testing.B) {
	const m = 2048
	for _, s := range []struct{ n, k int }{{512, 512}, {1536, 512}, {512, 1536}} {
		b.Run(fmt.Sprintf("M%d_N%d_K%d", m, s.n, s.k), func(b *testing.B) {
			w, err := quant.Quantize(randn(s.n*s.k, 1), s.n, s.k, "", quant.Default())
			if err != nil {
				b.Fatal(err)
			}
			dense := make([]float32, s.n*s.k)
			w.Dequantize(dense)
			x := randn(m*s.k, 2)
			y := make([]float32, m*s.n)
			fp32 := func() { gemm.Sgemm(false, true, m, s.n, s.k, 1, x, s.k, dense, s.k, 0, y, s.n) }
			nf4 := func() { gemm.SgemmSource(false, m, s.n, s.k, 1, x, s.k, q4Transposed{w}, 0, y, s.n) }
			fp32()
			nf4()
			var t32, t4 time.Duration
			for b.Loop() {
				t0 := time.Now()
				fp32()
				t1 := time.Now()
				nf4()
				t4 += time.Since(t1)
				t32 += t1.Sub(t0)
			}
			flops := 2 * float64(m) * float64(s.n) * float64(s.k) * float64(b.N)
			g4, g32 := flops/t4.Seconds()/1e9, flops/t32.Seconds()/1e9
			b.ReportMetric(g4, "nf4_GFLOP/s")
			b.ReportMetric(g32, "fp32_GFLOP/s")
			b.ReportMetric(g4/g32, "x_fp32")
			if a, err := anchor(m, s.n, s.k); err == nil {
				b.ReportMetric(g4/a, "x_openblas")
			} else {
				b.Log(err)
			}
		})
	}
}

var anchorLine = regexp.MustCompile(`: ([0-9.]+) GFLOP/s`)

func anchor(m, n, k int) (float64, error) {
	tool := filepath.Join(testref.RepoRoot(), "..", "shared", "tools", "sgemm-anchor")
	cmd := exec.Command(tool, strconv.Itoa(m), strconv.Itoa(n), strconv.Itoa(k))
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS="+strconv.Itoa(gemm.Threads()))
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %v", tool, err)
	}
	mm := anchorLine.FindSubmatch(out)
	if mm == nil {
		return 0, fmt.Errorf("%s printed no GFLOP/s", tool)
	}
	return strconv.ParseFloat(string(mm[1]), 64)
}
