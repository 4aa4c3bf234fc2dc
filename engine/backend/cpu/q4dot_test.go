package cpu

import (
	"fmt"
	"math"
	"testing"

	"rlhfstation/quant"
)

// TestQ4DotMatchesDequantized: the few-row product, with the assembly kernels and with their
// Go reference, against x·dequantize(W)ᵀ summed in float64, for every row count up to 64
// (each split into kernel calls of 8, 4, 2 and 1 rows), shapes whose rows split unevenly over
// the goroutines and column spans, NF4 and FP4, double quantization or not, blocks of 64 and
// 256 (a chunk's scale is its block's). One row alone takes the exact kernel here (the int16
// one: TestQ4Row16MatchesDequantized).
func TestQ4DotMatchesDequantized(t *testing.T) {
	type tc struct {
		out, in int
		opt     quant.Options
	}
	cases := []tc{
		{1, 64, quant.Default()},
		{7, 128, quant.Options{Type: quant.NF4, BlockSize: 64}},
		{131, 896, quant.Default()},
		{37, 4864, quant.Options{Type: quant.FP4, BlockSize: 256, DoubleQuant: true}},
		{300, 192, quant.Options{Type: quant.NF4, BlockSize: 128, DoubleQuant: true}},
	}
	kernels := testKernels()
	defer func(k string, on bool) { q4dotKernel, q4row16On = k, on }(q4dotKernel, q4row16On)
	q4row16On = false
	for ci, c := range cases {
		wf := randn(c.out*c.in, uint64(10+ci))
		wf[5] = 9 // an outlier block
		w, err := quant.Quantize(wf, c.out, c.in, "", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		if d == nil {
			t.Fatalf("%v: no few-row form", c)
		}
		dense := make([]float32, c.out*c.in)
		w.Dequantize(dense)
		for _, rows := range []int{1, 2, 3, 5, 7, 8, 9, 15, 16, 31, 33, 64} {
			x := randn(rows*c.in, uint64(100+rows))
			want := make([]float64, rows*c.out)
			var scale float64
			for r := 0; r < rows; r++ {
				for o := 0; o < c.out; o++ {
					var s, a float64
					for i := 0; i < c.in; i++ {
						p := float64(x[r*c.in+i]) * float64(dense[o*c.in+i])
						s += p
						a += math.Abs(p)
					}
					want[r*c.out+o] = s
					scale = max(scale, a)
				}
			}
			for _, k := range kernels {
				q4dotKernel = k
				y := randn(rows*c.out, 7) // overwritten, not added to
				d.MulT(y, x, rows)
				for j := range y {
					if e := math.Abs(float64(y[j]) - want[j]); e > 1e-6*scale || math.IsNaN(float64(y[j])) {
						t.Fatalf("%s %d×%d %v rows=%d: y[%d] = %v, want %v (|error| %.3g, Σ|products| %.3g)",
							k, c.out, c.in, c.opt, rows, j, y[j], want[j], e, scale)
					}
				}
			}
		}
	}
}

// TestQ4DotShapes: the few-row form exists exactly for whole-chunk rows and blocks.
func TestQ4DotShapes(t *testing.T) {
	for _, c := range []struct {
		out, in, bs int
		ok          bool
	}{{3, 64, 64, true}, {3, 96, 64, false}, {3, 128, 32, false}, {2, 256, 256, true}, {5, 65, 64, false}} {
		w, err := quant.Quantize(randn(c.out*c.in, 1), c.out, c.in, "", quant.Options{Type: quant.NF4, BlockSize: c.bs})
		if err != nil {
			t.Fatal(err)
		}
		if got := NewQ4Dot(w) != nil; got != c.ok {
			t.Errorf("%s: few-row form %v, want %v", fmt.Sprint(c), got, c.ok)
		}
	}
}

// TestF32DotMatchesFloat64: the few-row float32 product, assembly and Go reference, against
// float64 sums, for every row count it takes and widths with and without a tail past the
// last whole chunk.
func TestF32DotMatchesFloat64(t *testing.T) {
	kernels := testKernels()
	defer func(k string) { q4dotKernel = k }(q4dotKernel)
	for ci, c := range []struct{ out, in int }{{1, 1}, {5, 63}, {3, 64}, {77, 130}, {300, 896}, {9, 4864 + 17}} {
		w := randn(c.out*c.in, uint64(20+ci))
		for rows := 1; rows <= f32DotMaxRows+1; rows++ {
			x := randn(rows*c.in, uint64(200+rows))
			for _, k := range kernels {
				q4dotKernel = k
				y := randn(rows*c.out, 9)
				f32DotMulT(y, x, w, rows, c.in, c.out)
				for r := 0; r < rows; r++ {
					for o := 0; o < c.out; o++ {
						var s, a float64
						for i := 0; i < c.in; i++ {
							p := float64(x[r*c.in+i]) * float64(w[o*c.in+i])
							s += p
							a += math.Abs(p)
						}
						if e := math.Abs(float64(y[r*c.out+o]) - s); e > 1e-6*a+1e-30 || math.IsNaN(float64(y[r*c.out+o])) {
							t.Fatalf("%s %d×%d rows=%d: y[%d,%d] = %v, want %v", k, c.out, c.in, rows, r, o, y[r*c.out+o], s)
						}
					}
				}
			}
		}
	}
}

// TestBF16DotMatchesFloat64: the bf16 product, by the few-row kernels (assembly and Go
// reference) and by the GEMM with widened panels, against float64 sums of the widened values,
// for every row count the kernels take and past it, widths below one chunk, whole chunks and
// with a tail; and its input gradient dx += dy·W.
func TestBF16DotMatchesFloat64(t *testing.T) {
	kernels := testKernels()
	defer func(k string) { q4dotKernel = k }(q4dotKernel)
	for ci, c := range []struct{ out, in int }{{1, 1}, {5, 63}, {3, 64}, {77, 130}, {300, 896}, {9, 4864 + 17}} {
		wf := randn(c.out*c.in, uint64(30+ci))
		w := make([]uint16, len(wf))
		for i, v := range wf {
			w[i] = ToBF16(v)
		}
		for rows := 1; rows <= f32DotMaxRows+3; rows++ {
			if rows > 9 && rows%7 != 0 && rows != f32DotMaxRows && rows != f32DotMaxRows+1 {
				continue
			}
			x := randn(rows*c.in, uint64(300+rows))
			want, scale := make([]float64, rows*c.out), make([]float64, rows*c.out)
			for r := 0; r < rows; r++ {
				for o := 0; o < c.out; o++ {
					for i := 0; i < c.in; i++ {
						p := float64(x[r*c.in+i]) * float64(FromBF16(w[o*c.in+i]))
						want[r*c.out+o] += p
						scale[r*c.out+o] += math.Abs(p)
					}
				}
			}
			check := func(how string, y []float32) {
				t.Helper()
				for j, v := range y {
					if e := math.Abs(float64(v) - want[j]); e > 1e-6*scale[j]+1e-30 || math.IsNaN(float64(v)) {
						t.Fatalf("%s %d×%d rows=%d: y[%d] = %v, want %v", how, c.out, c.in, rows, j, v, want[j])
					}
				}
			}
			for _, k := range kernels {
				q4dotKernel = k
				if rows <= f32DotMaxRows {
					y := randn(rows*c.out, 9) // overwritten
					bf16Dot(y, x, w, rows, c.in, c.out)
					check(k, y)
				}
				y := randn(rows*c.out, 9)
				BF16MulT(y, x, w, rows, c.in, c.out)
				check(k+" BF16MulT", y)
			}
			y := randn(rows*c.out, 9)
			sgemmSource(false, rows, c.out, c.in, 1, x, c.in, bf16Transposed{w, c.in}, 0, y, c.out)
			check("gemm", y)
			// dx += dy·W against float64.
			dy, dx0 := randn(rows*c.out, 11), randn(rows*c.in, 12)
			dx := append([]float32(nil), dx0...)
			BF16MulAcc(dx, dy, w, rows, c.in, c.out)
			for r := 0; r < rows; r++ {
				for i := 0; i < c.in; i++ {
					s, a := float64(dx0[r*c.in+i]), math.Abs(float64(dx0[r*c.in+i]))
					for o := 0; o < c.out; o++ {
						p := float64(dy[r*c.out+o]) * float64(FromBF16(w[o*c.in+i]))
						s += p
						a += math.Abs(p)
					}
					if e := math.Abs(float64(dx[r*c.in+i]) - s); e > 1e-6*a+1e-30 {
						t.Fatalf("BF16MulAcc %d×%d rows=%d: dx[%d,%d] = %v, want %v", c.out, c.in, rows, r, i, dx[r*c.in+i], s)
					}
				}
			}
		}
	}
}

// testKernels are the few-row kernels a test runs: the Go reference, and the assembly where
// this CPU has it.
func testKernels() []string {
	if q4dotKernel != "go" {
		return []string{"go", q4dotKernel}
	}
	return []string{"go"}
}
