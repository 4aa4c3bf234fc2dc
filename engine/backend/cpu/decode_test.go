package cpu

import (
	"math"
	"runtime"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// TestLinearEpilogueBits: the epilogue (four adapter columns at a time, any split of the
// columns) gives the bits of the unfused order, one column at a time: (t + bias + s·Σₖ
// xa·B) then res + that, for every subset of the terms and ranks 1 to 16.
func TestLinearEpilogueBits(t *testing.T) {
	const n = 37
	for _, r := range []int{1, 3, 16} {
		tv, res, bias := randn(n, 1), randn(n, 2), randn(n, 3)
		xa, lb := randn(r, 4), randn(n*r, 5)
		for mask := 0; mask < 8; mask++ {
			rs, bs, x := res, bias, xa
			if mask&1 == 0 {
				rs = nil
			}
			if mask&2 == 0 {
				bs = nil
			}
			if mask&4 == 0 {
				x = nil
			}
			want := make([]float32, n)
			for j := range want {
				v := tv[j]
				if bs != nil {
					v += bs[j]
				}
				if x != nil {
					var s float32
					for k := 0; k < r; k++ {
						s += x[k] * lb[j*r+k]
					}
					v += 0.75 * s
				}
				if rs != nil {
					v = rs[j] + v
				}
				want[j] = v
			}
			for _, cut := range []int{0, 1, 6, 33, n} {
				got := make([]float32, n)
				linearEpilogue(got, tv, rs, bs, x, lb, 0.75, 0, cut)
				linearEpilogue(got, tv, rs, bs, x, lb, 0.75, cut, n)
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("r=%d terms %03b cut %d: y[%d] = %v, want %v", r, mask, cut, j, got[j], want[j])
					}
				}
			}
		}
	}
}

// TestQ4LinearIntoItsResidual: Q4Linear with y the residual itself (a block's stream updated in
// place) gives what it gives into another buffer, at 1 row and at 5 (the epilogue split over
// the cores by columns, every row of each).
func TestQ4LinearIntoItsResidual(t *testing.T) {
	const in, out, r, ld = 128, 4864, 16, 20
	w, err := quant.Quantize(randn(out*in, 7), out, in, "", quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true})
	if err != nil {
		t.Fatal(err)
	}
	b := New()
	q, err := b.UploadQ4(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{1, 5} {
		x, res, bias := randn(rows*in, 8), randn(rows*out, 9), randn(out, 10)
		xa, lb := randn(rows*ld, 11), randn(out*r, 12)
		apart := make([]float32, rows*out)
		if err := b.Q4Linear(backend.HostF32(apart), backend.HostF32(res), backend.HostF32(x), q, backend.HostF32(bias), backend.HostF32(xa), ld, backend.HostF32(lb), r, 0.5, rows); err != nil {
			t.Fatal(err)
		}
		inPlace := append([]float32(nil), res...)
		if err := b.Q4Linear(backend.HostF32(inPlace), backend.HostF32(inPlace), backend.HostF32(x), q, backend.HostF32(bias), backend.HostF32(xa), ld, backend.HostF32(lb), r, 0.5, rows); err != nil {
			t.Fatal(err)
		}
		for j := range apart {
			if math.Float32bits(apart[j]) != math.Float32bits(inPlace[j]) {
				t.Fatalf("rows=%d: y[%d] = %v in place, %v into another buffer", rows, j, inPlace[j], apart[j])
			}
		}
		if apart[0] == res[0] {
			t.Fatalf("rows=%d: y[0] is the residual unchanged", rows)
		}
	}
}

// TestGreedyLogProbBits: a greedy draw's log-prob, computed without writing the row's
// log-softmax, has the bits of LogSoftmax at the drawn token (a vocabulary's row, one whose
// largest logit repeats: the lowest id; and the edges: masked -inf logits, all equal, a
// vocabulary of one, all masked and NaN, where both give NaN).
func TestGreedyLogProbBits(t *testing.T) {
	inf, nan := float32(math.Inf(-1)), float32(math.NaN())
	for _, row := range [][]float32{randn(151936, 13), {0.5, 3, -1, 3, 2}, {inf, 1, inf, -2}, {2, 2, 2, 2}, {7}, {inf, inf}, {nan, 1}, {1, nan, 3}} {
		var s sampler
		tok, lp := s.sampleMinP(row, 0.3, 0, 0, 0, 0)
		want := make([]float32, len(row))
		LogSoftmax(want, row, 1)
		if tok != argmaxScan(row) || math.Float32bits(lp) != math.Float32bits(want[tok]) {
			t.Fatalf("greedy over %d logits: token %d, log-prob %v; want %d, %v", len(row), tok, lp, argmaxScan(row), want[argmaxScan(row)])
		}
	}
}

// TestQ4LinearsGroupBits: a group of 4-bit linears sharing x (a block's q, k and v: one
// large and two small weights, biases, an adapter on two of them) run as one parallel region
// gives the bits of one linear at a time, each its product (MulT, or MulTSampled in the
// decode step's backend) and then its epilogue over all its columns, at 1 to 64 rows of x and
// with 1 to 4 cores, whose pieces then fall across the weights' boundaries.
func TestQ4LinearsGroupBits(t *testing.T) {
	// in = 256: a piece's grain is then 256 output rows (q4PieceGrain), so from 2 cores the
	// 448 rows go in 2 ranges (gemm.Ranges), [0, 256) and [256, 448), the second spanning all
	// three weights.
	const in, r, ld = 256, 4, 12
	outs := []int{320, 64, 64}
	b := New()
	ws := make([]*backend.Q4, len(outs))
	for i, n := range outs {
		w, err := quant.Quantize(randn(n*in, uint64(20+i)), n, in, "", quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true})
		if err != nil {
			t.Fatal(err)
		}
		if ws[i], err = b.UploadQ4(w); err != nil {
			t.Fatal(err)
		}
		if _, ok := ws[i].State.(*Q4Dot); !ok {
			t.Fatal("UploadQ4 gave no few-row form")
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 3, 4} {
		runtime.GOMAXPROCS(procs)
		for _, rows := range []int{1, 2, 3, 9, q4DotMaxRows} {
			x, xa := randn(rows*in, 30), randn(rows*ld, 31)
			for _, sampled := range []bool{false, true} {
				var sb backend.Backend = b
				if sampled {
					sb = b.Sampling()
				}
				ls := make([]backend.Q4Out, len(outs))
				want := make([][]float32, len(outs))
				for i, n := range outs {
					ls[i] = backend.Q4Out{W: ws[i], Y: backend.HostF32(make([]float32, rows*n)), Bias: backend.HostF32(randn(n, uint64(40+i)))}
					if i > 0 {
						ls[i].B, ls[i].R, ls[i].Off, ls[i].Scale = backend.HostF32(randn(n*r, uint64(50+i))), r, 4*i, 0.5
					}
					p := make([]float32, rows*n)
					d := ws[i].State.(*Q4Dot)
					if sampled {
						d.MulTSampled(p, x, rows)
					} else {
						d.MulT(p, x, rows)
					}
					want[i] = make([]float32, rows*n)
					bias := ls[i].Bias.F32()
					for k := 0; k < rows; k++ {
						var xr, lb []float32
						if i > 0 {
							xr, lb = xa[k*ld+4*i:k*ld+4*i+r], ls[i].B.F32()
						}
						linearEpilogue(want[i][k*n:(k+1)*n], p[k*n:(k+1)*n], nil, bias, xr, lb, 0.5, 0, n)
					}
				}
				if err := sb.Q4Linears(ls, backend.HostF32(x), backend.HostF32(xa), ld, rows); err != nil {
					t.Fatal(err)
				}
				for i := range outs {
					got := ls[i].Y.F32()
					for j := range want[i] {
						if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
							t.Fatalf("%d cores, rows=%d sampled=%v: linear %d y[%d] = %v, want %v", procs, rows, sampled, i, j, got[j], want[i][j])
						}
					}
				}
			}
		}
	}
}

// TestQ4LinearsWidthsDiffer: linears of a group share x, so one whose input width differs is
// an error naming it (as on the CUDA backend), not a product that reads x at its own stride,
// whether the few-row kernels take the group (2 rows) or the GEMM does (65).
func TestQ4LinearsWidthsDiffer(t *testing.T) {
	b := New()
	var ws [2]*backend.Q4
	for i, in := range []int{256, 512} {
		w, err := quant.Quantize(randn(64*in, uint64(60+i)), 64, in, "", quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true})
		if err != nil {
			t.Fatal(err)
		}
		if ws[i], err = b.UploadQ4(w); err != nil {
			t.Fatal(err)
		}
	}
	for _, rows := range []int{2, q4DotMaxRows + 1} {
		ls := []backend.Q4Out{{W: ws[0], Y: backend.HostF32(make([]float32, rows*64))}, {W: ws[1], Y: backend.HostF32(make([]float32, rows*64))}}
		x := backend.HostF32(randn(rows*512, 61))
		for _, sb := range []backend.Backend{b, b.Sampling()} {
			err := sb.Q4Linears(ls, x, backend.Buf{}, 0, rows)
			if err == nil || !strings.Contains(err.Error(), "linear 1 takes 512 inputs, linear 0 256") {
				t.Fatalf("rows=%d: Q4Linears over widths 256 and 512 gave %v, want an error naming linear 1", rows, err)
			}
		}
	}
}
