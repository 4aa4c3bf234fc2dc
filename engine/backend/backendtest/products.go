package backendtest

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

func init() {
	register("gemm", true, gemmOps)
	register("matmul", true, matmulOps)
	register("q4", true, q4Ops)
}

// gemmShapes cover the CPU's GEMM paths (and a device's tiles): one element, partial
// micro-tiles (14×32 and 28×16 on AVX-512, 6×16 on AVX2), k over one cache block (256),
// few columns (the narrow and transposed paths), few rows of op(A) (direct and dot-product
// paths), a problem large enough to be split over goroutines, and empty sides.
var gemmShapes = [][3]int{ // m, n, k
	{1, 1, 1}, {3, 5, 7}, {13, 31, 17}, {15, 33, 257}, {90, 16, 40}, {40, 70, 64},
	{100, 130, 97}, {337, 33, 20}, {2, 300, 129}, {29, 3, 65}, {0, 5, 3}, {4, 0, 3}, {4, 5, 0},
}

// gemmOps: GEMM in the four transpositions with leading dimensions, alpha and beta
// (beta = 0 must not read C, which starts as NaN), and GEMMBatched with strides.
func gemmOps(e *env) {
	coefs := [][2]float32{{1, 0}, {-0.5, 1}, {2, 0.25}}
	for si, sh := range pick(e, gemmShapes) {
		m, n, k := sh[0], sh[1], sh[2]
		for ti := 0; ti < 4; ti++ {
			ta, tb := ti&2 != 0, ti&1 != 0
			ab := coefs[(si+ti)%len(coefs)]
			alpha, beta := ab[0], ab[1]
			pad := 3 * ((si + ti) % 2) // leading dimensions beyond the columns on every other case
			g := gemmCase{e: e, ta: ta, tb: tb, m: m, n: n, k: k, alpha: alpha, beta: beta, pad: pad}
			e.check("GEMM", g.String(), func() { g.run() })
		}
	}
	for _, c := range pick(e, []struct {
		m, n, k, batch int
		ta, tb         bool
		shareB         bool
	}{{5, 7, 9, 3, false, false, false}, {17, 33, 40, 4, false, true, false}, {9, 40, 20, 2, true, false, true}, {64, 16, 64, 3, false, true, true}}) {
		g := gemmCase{e: e, ta: c.ta, tb: c.tb, m: c.m, n: c.n, k: c.k, alpha: 1, beta: 0.5, pad: 1, batch: c.batch, shareB: c.shareB}
		e.check("GEMMBatched", g.String(), func() { g.run() })
	}
}

type gemmCase struct {
	e           *env
	ta, tb      bool
	m, n, k     int
	alpha, beta float32
	pad         int
	batch       int  // GEMMBatched when > 0
	shareB      bool // strideB = 0
	actB        bool // B an activation too (the model's bf16 copies of LoRA's A)
}

func (g gemmCase) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	s := fmt.Sprintf("%s%s m=%d n=%d k=%d alpha=%g beta=%g", t(g.ta), t(g.tb), g.m, g.n, g.k, g.alpha, g.beta)
	if g.pad > 0 {
		s += fmt.Sprintf(" ld+%d", g.pad)
	}
	if g.batch > 0 {
		s += fmt.Sprintf(" batch=%d", g.batch)
		if g.shareB {
			s += " strideB=0"
		}
	}
	return s
}

// aRole and cRole are the roles of A and C in the mixed run: LoRA's products, an activation
// times a float32 weight into float32 (x·Aᵀ) or accumulated into an activation (y += …).
func (g gemmCase) aRole() role {
	if g.batch > 0 {
		return f32
	}
	return act
}

func (g gemmCase) cRole() role {
	if g.batch > 0 || g.beta == 0 {
		return f32
	}
	return act
}

// dims returns the stored rows and columns of A, B and C and their leading dimensions.
func (g gemmCase) dims() (ar, ac, lda, br, bc, ldb, ldc int) {
	ar, ac = g.m, g.k
	if g.ta {
		ar, ac = g.k, g.m
	}
	br, bc = g.k, g.n
	if g.tb {
		br, bc = g.n, g.k
	}
	return ar, ac, max(ac, 1) + g.pad, br, bc, max(bc, 1) + g.pad, max(g.n, 1) + g.pad
}

func size(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

func (g gemmCase) run() {
	e := g.e
	ar, ac, lda, br, bc, ldb, ldc := g.dims()
	batch := max(g.batch, 1)
	sa, sb, sc := size(ar, ac, lda)+2, size(br, bc, ldb)+1, size(g.m, g.n, ldc)+3
	if g.shareB {
		sb = 0
	}
	a := e.randn((batch-1)*sa+size(ar, ac, lda), 1)
	b := e.randn((batch-1)*sb+size(br, bc, ldb), 1)
	c0 := e.randn((batch-1)*sc+size(g.m, g.n, ldc), 1)
	e.zerosOK = g.k == 0 && g.beta == 0
	got := e.twin(func(s *side) []backend.Buf {
		var c backend.Buf
		if g.beta == 0 {
			c = s.outAs(g.cRole(), len(c0))
			if g.batch == 0 { // beta = 0: C is written, not read; only the rest of C stays NaN
				s.fail("Upload", s.b.Upload(c, nanExcept(c0, g.m, g.n, ldc)))
			}
		} else {
			c = s.accAs(g.cRole(), c0)
		}
		if g.batch > 0 {
			s.do("GEMMBatched", s.b.GEMMBatched(g.ta, g.tb, g.m, g.n, g.k, g.alpha, s.in(a), lda, sa, s.in(b), ldb, sb, g.beta, c, ldc, sc, g.batch))
		} else {
			bIn := s.in(b)
			if g.actB {
				bIn = s.inAs(act, b)
			}
			s.do("GEMM", s.b.GEMM(g.ta, g.tb, g.m, g.n, g.k, g.alpha, s.inAs(g.aRole(), a), lda, bIn, ldb, g.beta, c, ldc))
		}
		return []backend.Buf{c}
	})
	if got == nil {
		return
	}
	want := f64s(c0)
	if g.beta == 0 && g.batch == 0 {
		want = f64s(nanExcept(c0, g.m, g.n, ldc))
	}
	for q := 0; q < batch; q++ {
		A, B, C := a[q*sa:], b[q*sb:], want[q*sc:]
		for i := 0; i < g.m; i++ {
			for j := 0; j < g.n; j++ {
				var sum float64
				for p := 0; p < g.k; p++ {
					ai, bi := i*lda+p, p*ldb+j
					if g.ta {
						ai = p*lda + i
					}
					if g.tb {
						bi = j*ldb + p
					}
					av, bv := A[ai], B[bi]
					sum += float64(av) * float64(bv)
				}
				v := float64(g.alpha) * sum
				if g.beta != 0 {
					v += float64(g.beta) * C[i*ldc+j]
				}
				C[i*ldc+j] = v
			}
		}
	}
	e.oracle("alpha·op(A)·op(B) + beta·C", got[0], want, 3e-7*float64(g.k)+1e-6, 1e-5)
}

// nanExcept is c with every element of the m×n matrix (leading dimension ld) NaN and the
// elements between rows (beyond n) kept: an op that reads C when beta = 0 makes NaNs, one
// that writes between the rows changes the rest.
func nanExcept(c []float32, m, n, ld int) []float32 {
	r := append([]float32(nil), c...)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			r[i*ld+j] = float32(math.NaN())
		}
	}
	return r
}

// matmulOps: the linear layer, forward with and without bias, backward into each of input,
// weight and bias (each optional).
func matmulOps(e *env) {
	for _, c := range pick(e, [][3]int{{1, 8, 5}, {7, 33, 17}, {64, 96, 70}, {130, 64, 200}, {3, 4097, 2}, {17, 2, 4097}}) {
		rows, in, outDim := c[0], c[1], c[2]
		shape := fmt.Sprintf("rows=%d in=%d out=%d", rows, in, outDim)
		x, w, bias := e.randn(rows*in, 1), e.randn(outDim*in, 1/math.Sqrt(float64(in))), e.randn(outDim, 1)
		dout := e.randn(rows*outDim, 1)
		dx0, dw0, db0 := e.randn(rows*in, 0.3), e.randn(outDim*in, 0.3), e.randn(outDim, 0.3)
		e.check("MatmulForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out, outNB := s.outAs(act, rows*outDim), s.outAs(act, rows*outDim)
				s.do("MatmulForward", s.b.MatmulForward(out, s.inAs(act, x), s.inAs(weight, w), s.in(bias), rows, in, outDim))
				s.do("MatmulForward without bias", s.b.MatmulForward(outNB, s.inAs(act, x), s.inAs(weight, w), backend.Buf{}, rows, in, outDim))
				return []backend.Buf{out, outNB}
			})
			if got == nil {
				return
			}
			want, wantNB := make([]float64, rows*outDim), make([]float64, rows*outDim)
			for r := 0; r < rows; r++ {
				for o := 0; o < outDim; o++ {
					var sum float64
					for i := 0; i < in; i++ {
						sum += float64(x[r*in+i]) * float64(w[o*in+i])
					}
					want[r*outDim+o], wantNB[r*outDim+o] = sum+float64(bias[o]), sum
				}
			}
			tol := 3e-7*float64(in) + 1e-6
			e.oracle("x·Wᵀ + b", got[0], want, tol, 1e-5)
			e.oracle("x·Wᵀ", got[1], wantNB, tol, 1e-5)
		})
		e.check("MatmulBackward", shape, func() {
			e.twin(func(s *side) []backend.Buf {
				dx, dw, db := s.accAs(act, dx0), s.acc(dw0), s.acc(db0)
				s.do("MatmulBackward", s.b.MatmulBackward(dx, dw, db, s.inAs(act, dout), s.inAs(act, x), s.inAs(weight, w), rows, in, outDim))
				dx1 := s.accAs(act, dx0) // a frozen weight: the input gradient alone
				s.do("MatmulBackward, input only", s.b.MatmulBackward(dx1, backend.Buf{}, backend.Buf{}, s.inAs(act, dout), backend.Buf{}, s.inAs(weight, w), rows, in, outDim))
				dw1 := s.acc(dw0) // the first layer: no input gradient
				s.do("MatmulBackward, weight only", s.b.MatmulBackward(backend.Buf{}, dw1, backend.Buf{}, s.inAs(act, dout), s.inAs(act, x), backend.Buf{}, rows, in, outDim))
				return []backend.Buf{dx, dw, db, dx1, dw1}
			})
		})
		e.fd("MatmulBackward", shape, fdCase{
			inputs: [][]float32{x, w, bias}, diff: []int{0, 1, 2},
			forward: func(xs [][]float32) []float32 {
				out := zeros(rows * outDim)
				e.ref.MatmulForward(hf(out), hf(xs[0]), hf(xs[1]), hf(xs[2]), rows, in, outDim)
				return out
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				dx, dw, db := zeros(rows*in), zeros(outDim*in), zeros(outDim)
				e.ref.MatmulBackward(hf(dx), hf(dw), hf(db), hf(g), hf(xs[0]), hf(xs[1]), rows, in, outDim)
				return [][]float32{dx, dw, db}
			},
		})
	}
}

// q4Ops: 4-bit weights (NF4 and FP4, with and without double quantization, block sizes 64
// and 128, a weight whose size is not a multiple of the block nor even, more than 256 blocks
// so that double quantization has several nested blocks): dequantization bit for bit, the
// product and its input gradient on few rows (a device's fused path) and many.
func q4Ops(e *env) {
	for _, c := range pick(e, []struct {
		out, in int
		opt     quant.Options
	}{
		{70, 96, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{33, 65, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: false}},
		{130, 257, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{48, 80, quant.Options{Type: quant.FP4, BlockSize: 128, DoubleQuant: true}},
		{17, 31, quant.Options{Type: quant.FP4, BlockSize: 64, DoubleQuant: false}},
	}) {
		shape := fmt.Sprintf("%s %d×%d block %d double=%v", c.opt.Type, c.out, c.in, c.opt.BlockSize, c.opt.DoubleQuant)
		wf := e.randn(c.out*c.in, 0.05)
		wf[3] = 0.4 // an outlier: one block's absmax far above the rest
		w, err := quant.Quantize(wf, c.out, c.in, "float32", c.opt)
		if err != nil {
			e.t.Fatal(err)
		}
		dense := dequantize(w)
		e.check("Q4Dequantize", shape, func() {
			if e.mixed != nil {
				return // float32 only
			}
			q, err := e.b.UploadQ4(w)
			if !e.must("UploadQ4", err) {
				return
			}
			defer e.b.FreeQ4(q)
			if q.Rows != c.out || q.Cols != c.in {
				e.errorf("UploadQ4 made a %d×%d weight of a %d×%d one", q.Rows, q.Cols, c.out, c.in)
			}
			base, err := e.b.Alloc(backend.F32, c.out*c.in+4)
			if !e.must("Alloc", err) {
				return
			}
			defer e.b.Free(base)
			out := base.Slice(1, c.out*c.in)
			if !e.must("Q4Dequantize", e.b.Q4Dequantize(out, q)) {
				return
			}
			got := make([]float32, c.out*c.in)
			if e.must("Download", e.b.Download(got, out)) {
				e.exact("dequantized weight against code·absmax", got, dense)
			}
			ref := make([]float32, c.out*c.in)
			w.Dequantize(ref)
			e.exact("package quant's dequantization against code·absmax", ref, dense)
		})
		for _, rows := range pick(e, []int{1, 3, 16, 17, 40}) {
			rshape := fmt.Sprintf("%s rows=%d", shape, rows)
			x, dy := e.randn(rows*c.in, 1), e.randn(rows*c.out, 1)
			dx0 := e.randn(rows*c.in, 0.3)
			type q4s struct {
				b backend.Backend
				q *backend.Q4
			}
			var made []q4s
			q4 := func(s *side) *backend.Q4 {
				q, err := s.b.UploadQ4(w)
				s.fail("UploadQ4", err)
				made = append(made, q4s{s.b, q})
				return q
			}
			e.check("Q4MulT", rshape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					y := s.outAs(act, rows*c.out)
					if q := q4(s); q != nil {
						s.do("Q4MulT", s.b.Q4MulT(y, s.inAs(act, x), q, rows))
					}
					return []backend.Buf{y}
				})
				if got != nil {
					want := make([]float64, rows*c.out)
					for r := 0; r < rows; r++ {
						for o := 0; o < c.out; o++ {
							for i := 0; i < c.in; i++ {
								want[r*c.out+o] += float64(x[r*c.in+i]) * float64(dense[o*c.in+i])
							}
						}
					}
					e.oracle("x·dequantize(W)ᵀ", got[0], want, 3e-7*float64(c.in)*0.05+1e-6, 1e-5)
				}
			})
			e.check("Q4MulAcc", rshape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					dx := s.accAs(act, dx0)
					if q := q4(s); q != nil {
						s.do("Q4MulAcc", s.b.Q4MulAcc(dx, s.inAs(act, dy), q, rows))
					}
					return []backend.Buf{dx}
				})
				if got != nil {
					want := f64s(dx0)
					for r := 0; r < rows; r++ {
						for i := 0; i < c.in; i++ {
							for o := 0; o < c.out; o++ {
								want[r*c.in+i] += float64(dy[r*c.out+o]) * float64(dense[o*c.in+i])
							}
						}
					}
					e.oracle("dx + dy·dequantize(W)", got[0], want, 3e-7*float64(c.out)*0.05+1e-6, 1e-5)
				}
			})
			e.check("Q4Embedding", rshape, func() {
				ids := make([]int32, rows)
				for r := range ids {
					ids[r] = int32((r*7 + rows) % c.out)
				}
				ids[0] = int32(c.out - 1) // the last row
				got := e.twin(func(s *side) []backend.Buf {
					y := s.outAs(act, rows*c.in)
					if q := q4(s); q != nil {
						s.do("Q4Embedding", s.b.Q4Embedding(y, s.i32(ids), backend.Buf{}, q, backend.Buf{}))
					}
					return []backend.Buf{y}
				})
				if got != nil {
					want := make([]float64, rows*c.in)
					for r, id := range ids {
						for i := 0; i < c.in; i++ {
							want[r*c.in+i] = float64(dense[int(id)*c.in+i])
						}
					}
					e.oracle("rows ids of dequantize(W)", got[0], want, 1e-7, 4e-3)
				}
			})
			qr, _ := e.ref.UploadQ4(w)
			e.fd("Q4MulAcc", rshape, fdCase{
				inputs: [][]float32{x}, diff: []int{0},
				forward: func(xs [][]float32) []float32 {
					y := zeros(rows * c.out)
					e.ref.Q4MulT(hf(y), hf(xs[0]), qr, rows)
					return y
				},
				backward: func(xs [][]float32, g []float32) [][]float32 {
					dx := zeros(rows * c.in)
					e.ref.Q4MulAcc(hf(dx), hf(g), qr, rows)
					return [][]float32{dx}
				},
			})
			for _, m := range made {
				if m.q != nil {
					m.b.FreeQ4(m.q)
				}
			}
		}
	}
}

// dequantize is bitsandbytes' formula written plainly: a block's scale is its absmax, or with
// double quantization NestedCode[QAbsmax[b]]·NestedAbsmax[b/256] + Offset (float32 at each
// step), and value i is code[nibble i]·scale, nibbles high first.
func dequantize(w *quant.Weight) []float32 {
	code := quant.NF4Code
	if w.Type == quant.FP4 {
		code = quant.FP4Code
	}
	out := make([]float32, w.Len())
	for i := range out {
		b := i / w.BlockSize
		var scale float32
		if w.Nested() {
			scale = float32(w.NestedCode[w.QAbsmax[b]]*w.NestedAbsmax[b/w.NestedBlockSize]) + w.Offset
		} else {
			scale = w.Absmax[b]
		}
		nib := w.Packed[i/2] >> 4
		if i%2 == 1 {
			nib = w.Packed[i/2] & 15
		}
		out[i] = code[nib] * scale
	}
	return out
}
