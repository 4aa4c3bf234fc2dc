package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/quant"
)

// The 4-bit linear and the same weight dequantized to float32 are one op by two paths: they
// agree to 1e-5.
func TestQWeightEqualsDequantizedDense(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][3]int{{5, 33, 70}, {17, 128, 64}, {3, 200, 130}} {
		rows, out, in := sh[0], sh[1], sh[2]
		w := make([]float32, out*in)
		for i := range w {
			w[i] = float32(r.NormFloat64() * 0.05)
		}
		qw, err := quant.Quantize(w, out, in, "float32", quant.Default())
		if err != nil {
			t.Fatal(err)
		}
		dense := make([]float32, out*in)
		qw.Dequantize(dense)
		x, dy := make([]float32, rows*in), make([]float32, rows*out)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range dy {
			dy[i] = float32(r.NormFloat64())
		}
		q := newQWeight(qw)
		y, want := make([]float32, rows*out), make([]float32, rows*out)
		q.MulT(y, x, rows)
		gemm.SgemmRef(false, true, rows, out, in, 1, x, in, dense, in, 0, want, out)
		near(t, "MulT", y, want)
		dx, wantDX := make([]float32, rows*in), make([]float32, rows*in)
		for i := range dx {
			dx[i] = 0.5
			wantDX[i] = 0.5
		}
		q.MulAcc(dx, dy, rows)
		gemm.SgemmRef(false, false, rows, in, out, 1, dy, out, dense, in, 1, wantDX, in)
		near(t, "MulAcc", dx, wantDX)
	}
}

func near(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %g, dequantized dense %g", what, i, got[i], want[i])
		}
	}
}
