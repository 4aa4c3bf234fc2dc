package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// The model's ops, named and ordered as the CPU backend's functions (engine/backend/cpu):
// outputs first, backward ops accumulating into their gradients.

// The residual stream (the embedding's output, each block's input and output) is float32,
// the inputs of products bf16: mixed precision as PyTorch's autocast keeps it. Norms read
// the float32 stream and write bf16 (or float32); residual adds take a bf16 projection into
// the float32 stream; their backward ops run in float32. The bf16-only forms exist too.

// EmbeddingForward sets out[r] = wte[ids[r]] (+ wpe[pos[r]]) for rows = ids.Len().
func (b *Backend) EmbeddingForward(out, ids, pos, wte, wpe Buf, dim int) error {
	rows := ids.Len()
	return b.queue(firstErr(act("out", out, rows*dim), need("ids", ids, I32, rows), act("wte", wte, dim),
		opt("pos", pos, I32, rows), optAct("wpe", wpe, dim), sameType("embedding tables", wte, wpe)),
		func(o *owner) error { return o.embed(out, i32(ids), i32(pos), wte, wpe, rows, dim) })
}

// EmbeddingBackward accumulates dwte[ids[r]] += dout[r] and dwpe[pos[r]] += dout[r] (float32
// tables, either absent; dout float32, or bf16 through a float32 copy).
func (b *Backend) EmbeddingBackward(dwte, dwpe, dout, ids, pos Buf, dim int) error {
	rows := ids.Len()
	if err := act("dout", dout, rows*dim); err != nil {
		return err
	}
	if dout.DType() == BF16 {
		d32, err := b.Alloc(F32, rows*dim)
		if err != nil {
			return err
		}
		defer b.Free(d32)
		if err := b.Cast(d32, dout.Slice(0, rows*dim)); err != nil {
			return err
		}
		dout = d32
	}
	return b.queue(firstErr(need("dout", dout, F32, rows*dim), need("ids", ids, I32, rows), opt("dwte", dwte, F32, dim),
		opt("dwpe", dwpe, F32, dim), opt("pos", pos, I32, rows)),
		func(o *owner) error {
			return o.embedBack(f32(dwte), f32(dwpe), f32(dout), i32(ids), i32(pos), rows, dim)
		})
}

// RMSNormForward sets out = x·rstd·(offset + weight) per row, keeping rstd.
func (b *Backend) RMSNormForward(out, rstd, inp, weight Buf, rows, dim int, eps float64, offset float32) error {
	return b.queue(firstErr(act("out", out, rows*dim), need("rstd", rstd, F32, rows), act("inp", inp, rows*dim),
		need("weight", weight, F32, dim)),
		func(o *owner) error {
			return o.rmsnorm(out, f32(rstd), inp, f32(weight), rows, dim, float32(eps), offset)
		})
}

// RMSNormBackward accumulates dinp and dweight (absent when frozen).
func (b *Backend) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buf, rows, dim int, offset float32) error {
	return b.queue(firstErr(act("dinp", dinp, rows*dim), opt("dweight", dweight, F32, dim), act("dout", dout, rows*dim),
		act("inp", inp, rows*dim), need("weight", weight, F32, dim), need("rstd", rstd, F32, rows)),
		func(o *owner) error {
			return o.rmsnormBack(dinp, f32(dweight), dout, inp, f32(weight), f32(rstd), rows, dim, offset)
		})
}

// LayerNormForward sets out = (x−mean)·rstd·weight + bias per row, keeping mean and rstd.
func (b *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias Buf, rows, dim int, eps float64) error {
	return b.queue(firstErr(act("out", out, rows*dim), need("mean", mean, F32, rows), need("rstd", rstd, F32, rows),
		act("inp", inp, rows*dim), need("weight", weight, F32, dim), need("bias", bias, F32, dim)),
		func(o *owner) error {
			return o.layernorm(out, f32(mean), f32(rstd), inp, f32(weight), f32(bias), rows, dim, float32(eps))
		})
}

// LayerNormBackward accumulates dinp, dweight and dbias (both absent when frozen).
func (b *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buf, rows, dim int) error {
	if dweight.Nil() != dbias.Nil() { // as the CPU: the weight and bias train together
		return fmt.Errorf("cuda: LayerNormBackward wants both weight and bias gradients or neither")
	}
	return b.queue(firstErr(act("dinp", dinp, rows*dim), opt("dweight", dweight, F32, dim), opt("dbias", dbias, F32, dim),
		act("dout", dout, rows*dim), act("inp", inp, rows*dim), need("weight", weight, F32, dim),
		need("mean", mean, F32, rows), need("rstd", rstd, F32, rows)),
		func(o *owner) error {
			return o.layernormBack(dinp, f32(dweight), f32(dbias), dout, inp, f32(weight), f32(mean), f32(rstd), rows, dim)
		})
}

// ResidualForward sets out = a + b over n elements (out, a: the float32 stream, b: bf16;
// or all bf16). out may alias a.
func (b *Backend) ResidualForward(out, x, y Buf, n int) error {
	return b.queue(firstErr(act("out", out, n), act("a", x, n), act("b", y, n)),
		func(o *owner) error { return o.residual(out, x, y, n) })
}

// ResidualBackward accumulates da += dout and db += dout (either absent; any of float32 and
// bf16).
func (b *Backend) ResidualBackward(da, db, dout Buf, n int) error {
	return b.queue(firstErr(act("dout", dout, n), optAct("da", da, n), optAct("db", db, n)),
		func(o *owner) error {
			if da.Addr() != 0 {
				if err := o.add(da, dout, 1, n); err != nil {
					return err
				}
			}
			if db.Addr() != 0 {
				return o.add(db, dout, 1, n)
			}
			return nil
		})
}

// Add accumulates acc += alpha·x (float32 or bf16 each).
func (b *Backend) Add(acc, x Buf, alpha float32, n int) error {
	return b.queue(firstErr(act("acc", acc, n), act("x", x, n)), func(o *owner) error { return o.add(acc, x, alpha, n) })
}

// The element-wise ops take bf16 or float32: all of one type to their kernels, mixtures
// through float32 copies (inF32).

// GELUForward sets out = GELU(inp) (tanh approximation).
func (b *Backend) GELUForward(out, inp Buf, n int) error {
	if mixedTypes(out, inp) {
		return b.inF32([]Buf{out}, nil, []Buf{inp}, func(o, a, i []Buf) error { return b.GELUForward(o[0], i[0], n) })
	}
	return b.queue(firstErr(act("out", out, n), act("inp", inp, n)), func(o *owner) error {
		if out.DType() == F32 {
			return o.geluForwardF32(o.flat(int64(n)), f32(out), f32(inp), int64(n))
		}
		return o.gelu(bf(out), bf(inp), n)
	})
}

// GELUBackward accumulates dinp += dout·GELU'(inp).
func (b *Backend) GELUBackward(dinp, dout, inp Buf, n int) error {
	if mixedTypes(dinp, dout, inp) {
		return b.inF32(nil, []Buf{dinp}, []Buf{dout, inp}, func(o, a, i []Buf) error { return b.GELUBackward(a[0], i[0], i[1], n) })
	}
	return b.queue(firstErr(act("dinp", dinp, n), act("dout", dout, n), act("inp", inp, n)),
		func(o *owner) error {
			if dinp.DType() == F32 {
				return o.geluBackwardF32(o.flat(int64(n)), f32(dinp), f32(dout), f32(inp), int64(n))
			}
			return o.geluBack(bf(dinp), bf(dout), bf(inp), n)
		})
}

// SwiGLUForward sets out = SiLU(gate)·up.
func (b *Backend) SwiGLUForward(out, gate, up Buf, n int) error {
	if mixedTypes(out, gate, up) {
		return b.inF32([]Buf{out}, nil, []Buf{gate, up}, func(o, a, i []Buf) error { return b.SwiGLUForward(o[0], i[0], i[1], n) })
	}
	return b.queue(firstErr(act("out", out, n), act("gate", gate, n), act("up", up, n)),
		func(o *owner) error {
			if out.DType() == F32 {
				return o.swigluForwardF32(o.flat(int64(n)), f32(out), f32(gate), f32(up), int64(n))
			}
			return o.swiglu(bf(out), bf(gate), bf(up), n)
		})
}

// SwiGLUBackward accumulates dgate and dup.
func (b *Backend) SwiGLUBackward(dgate, dup, dout, gate, up Buf, n int) error {
	if mixedTypes(dgate, dup, dout, gate, up) {
		return b.inF32(nil, []Buf{dgate, dup}, []Buf{dout, gate, up}, func(o, a, i []Buf) error { return b.SwiGLUBackward(a[0], a[1], i[0], i[1], i[2], n) })
	}
	return b.queue(firstErr(act("dgate", dgate, n), act("dup", dup, n), act("dout", dout, n), act("gate", gate, n), act("up", up, n)),
		func(o *owner) error {
			if dgate.DType() == F32 {
				return o.swigluBackwardF32(o.flat(int64(n)), f32(dgate), f32(dup), f32(dout), f32(gate), f32(up), int64(n))
			}
			return o.swigluBack(bf(dgate), bf(dup), bf(dout), bf(gate), bf(up), n)
		})
}

// GeGLUForward sets out = GELU(gate)·up (tanh approximation).
func (b *Backend) GeGLUForward(out, gate, up Buf, n int) error {
	if mixedTypes(out, gate, up) {
		return b.inF32([]Buf{out}, nil, []Buf{gate, up}, func(o, a, i []Buf) error { return b.GeGLUForward(o[0], i[0], i[1], n) })
	}
	return b.queue(firstErr(act("out", out, n), act("gate", gate, n), act("up", up, n)),
		func(o *owner) error {
			if out.DType() == F32 {
				return o.gegluForwardF32(o.flat(int64(n)), f32(out), f32(gate), f32(up), int64(n))
			}
			return o.geglu(bf(out), bf(gate), bf(up), n)
		})
}

// GeGLUBackward accumulates dgate and dup.
func (b *Backend) GeGLUBackward(dgate, dup, dout, gate, up Buf, n int) error {
	if mixedTypes(dgate, dup, dout, gate, up) {
		return b.inF32(nil, []Buf{dgate, dup}, []Buf{dout, gate, up}, func(o, a, i []Buf) error { return b.GeGLUBackward(a[0], a[1], i[0], i[1], i[2], n) })
	}
	return b.queue(firstErr(act("dgate", dgate, n), act("dup", dup, n), act("dout", dout, n), act("gate", gate, n), act("up", up, n)),
		func(o *owner) error {
			if dgate.DType() == F32 {
				return o.gegluBackwardF32(o.flat(int64(n)), f32(dgate), f32(dup), f32(dout), f32(gate), f32(up), int64(n))
			}
			return o.gegluBack(bf(dgate), bf(dup), bf(dout), bf(gate), bf(up), n)
		})
}

// SoftcapForward sets out = cap·tanh(inp/cap) over float32 values (out may be inp).
func (b *Backend) SoftcapForward(out, inp Buf, n int, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cuda: soft-capping at %g", cap)
	}
	return b.queue(firstErr(need("out", out, F32, n), need("inp", inp, F32, n)),
		func(o *owner) error { return o.softcapForwardF32(o.flat(int64(n)), f32(out), f32(inp), int64(n), cap) })
}

// SoftcapBackward accumulates dinp += dout·(1 − (out/cap)²) (float32).
func (b *Backend) SoftcapBackward(dinp, dout, out Buf, n int, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cuda: soft-capping at %g", cap)
	}
	return b.queue(firstErr(need("dinp", dinp, F32, n), need("dout", dout, F32, n), need("out", out, F32, n)),
		func(o *owner) error {
			return o.softcapBackwardF32(o.flat(int64(n)), f32(dinp), f32(dout), f32(out), int64(n), cap)
		})
}

// BiasForward adds bias[cols] (float32) to every row of out[rows,cols].
func (b *Backend) BiasForward(out, bias Buf, rows, cols int) error {
	return b.queue(firstErr(act("out", out, rows*cols), need("bias", bias, F32, cols)), func(o *owner) error {
		if out.DType() == F32 {
			return o.biasForwardF32(cols2d(rows, cols), f32(out), f32(bias), int32(rows), int32(cols))
		}
		return o.bias(bf(out), f32(bias), rows, cols)
	})
}

// BiasBackward accumulates dbias += Σ_rows dout.
func (b *Backend) BiasBackward(dbias, dout Buf, rows, cols int) error {
	return b.queue(firstErr(need("dbias", dbias, F32, cols), act("dout", dout, rows*cols)), func(o *owner) error {
		if dout.DType() == F32 {
			d := dims{grid: [3]uint32{uint32(ceilDiv(cols, 32)), uint32(min(ceilDiv(rows, 8), 64)), 1}, block: [3]uint32{32, 8, 1}}
			return o.biasBackwardF32(d, f32(dbias), f32(dout), int32(rows), int32(cols))
		}
		return o.biasBack(f32(dbias), bf(dout), rows, cols)
	})
}

// cublasType maps a Buf type to cuBLAS's.
func cublasType(t DType) (int, bool) {
	switch t {
	case F32:
		return dtF32, true
	case BF16:
		return dtBF16, true
	}
	return 0, false
}

// GEMM sets C[m,n] = alpha·op(A)·op(B) + beta·C, row-major with leading dimensions, as the
// CPU's sgemm. A and B are bf16 or float32; when their types differ the float32 one is
// rounded to bf16 first (a LoRA weight meeting bf16 activations), so the product runs on
// tensor cores; C is bf16 or float32 (sums in float32 either way).
func (b *Backend) GEMM(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, bb Buf, ldb int, beta float32, c Buf, ldc int) error {
	return b.GEMMBatched(transA, transB, m, n, k, alpha, a, lda, 0, bb, ldb, 0, beta, c, ldc, 0, 1)
}

// GEMMBatched is GEMM over batch items strideA, strideB, strideC elements apart.
func (b *Backend) GEMMBatched(transA, transB bool, m, n, k int, alpha float32, a Buf, lda, strideA int, bb Buf, ldb, strideB int,
	beta float32, c Buf, ldc, strideC, batch int) error {
	if m == 0 || n == 0 || batch == 0 {
		return nil
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	span := func(rows, cols, ld, stride int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (batch-1)*stride + (rows-1)*ld + cols
	}
	if lda < ac || ldb < bc || ldc < n {
		return fmt.Errorf("cuda: GEMM leading dimensions %d, %d, %d below the rows' %d, %d, %d", lda, ldb, ldc, ac, bc, n)
	}
	at, ok1 := cublasType(a.DType())
	bt, ok2 := cublasType(bb.DType())
	ct, ok3 := cublasType(c.DType())
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("cuda: GEMM of %s × %s into %s", a.DType(), bb.DType(), c.DType())
	}
	if a.Len() < span(ar, ac, lda, strideA) || bb.Len() < span(br, bc, ldb, strideB) || c.Len() < span(m, n, ldc, strideC) {
		return fmt.Errorf("cuda: GEMM operands too short (%d, %d, %d elements)", a.Len(), bb.Len(), c.Len())
	}
	if err := firstErr(onDevice("A", a, 0), onDevice("B", bb, 0), onDevice("C", c, 0)); err != nil {
		return err
	}
	if k > 0 && (a.Nil() || bb.Nil()) || c.Nil() {
		return fmt.Errorf("cuda: GEMM with an absent operand (A %v, B %v, C %v)", a, bb, c)
	}
	if k == 0 { // no product: C = beta·C, as BLAS defines it
		return b.scaleRows(c, beta, m, n, ldc, strideC, batch)
	}
	if batch == 1 && !transA && transB && m <= fewRowsMax && n <= narrowMax {
		return b.gemmNTFew(m, n, k, alpha, a, lda, bb, ldb, beta, c, ldc)
	}
	g := &gemmArgs{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: a.Addr(), aType: at, lda: lda, strideA: int64(strideA), b: bb.Addr(), bType: bt, ldb: ldb, strideB: int64(strideB),
		c: c.Addr(), cType: ct, ldc: ldc, strideC: int64(strideC), batch: batch}
	aN, bN := span(ar, ac, lda, strideA), span(br, bc, ldb, strideB)
	b.d.enqueue(func(o *owner) error { return o.gemmMixed(g, aN, bN) })
	return nil
}

// The shapes GEMM(false, true) takes its own kernel for rather than cuBLAS: up to
// fewRowsMax rows of A and narrowMax columns of C (LoRA's x·Aᵀ of a decode step, r × the
// linears sharing x wide).
const (
	fewRowsMax = 64
	narrowMax  = 256
)

// gemmNTFew queues gemm_nt_few (kernels/step.cu): a block per 2 columns of C and 8 rows of
// A, its warps (one per 256 of k, 1 to 16) splitting k, 8 values a load where the operands'
// layout allows (vec).
func (b *Backend) gemmNTFew(m, n, k int, alpha float32, a Buf, lda int, bb Buf, ldb int, beta float32, c Buf, ldc int) error {
	isF32 := func(x Buf) int32 {
		if x.DType() == F32 {
			return 1
		}
		return 0
	}
	vec := int32(0)
	if k%8 == 0 && lda%8 == 0 && ldb%8 == 0 && a.Addr()%16 == 0 && bb.Addr()%16 == 0 {
		vec = 1
	}
	d := gemmNTFewDims(m, n, k)
	return b.queue(nil, func(o *owner) error {
		return o.gemmNtFew(d, devptr[uint8](c.Addr()), isF32(c), int32(ldc), devptr[uint8](a.Addr()), isF32(a), int32(lda),
			devptr[uint8](bb.Addr()), isF32(bb), int32(ldb), int32(m), int32(n), int32(k), alpha, beta, vec)
	})
}

// gemmNTFewDims is gemm_nt_few's launch (GNT_N = 2 columns and GNT_M = 8 rows a block, up to
// GNT_WARPS = 16 warps).
func gemmNTFewDims(m, n, k int) dims {
	warps := min(max(ceilDiv(k, 256), 1), 16)
	return dims{grid: [3]uint32{uint32(ceilDiv(n, 2)), uint32(ceilDiv(m, 8)), 1}, block: [3]uint32{uint32(32 * warps), 1, 1}}
}

// scaleRows sets C = beta·C over batch items of m rows of n values (ld apart).
func (b *Backend) scaleRows(c Buf, beta float32, m, n, ld, stride, batch int) error {
	scale := func(x Buf) error {
		if beta == 0 {
			b.Zero(x)
			return nil
		}
		return b.Add(x, x, beta-1, x.Len())
	}
	switch {
	case beta == 1 || m == 0 || n == 0:
		return nil
	case ld == n && (batch == 1 || stride == m*n): // contiguous: one op
		return scale(c.Slice(0, batch*m*n))
	}
	for bi := 0; bi < batch; bi++ {
		for r := 0; r < m; r++ {
			if err := scale(c.Slice(bi*stride+r*ld, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// gemmMixed runs a product whose operands' types cuBLAS may not take together: A and B of
// different types, or float32 A and B into a bf16 C. The float32 inputs (aN or bN values) are
// rounded to bf16 in scratch first, so that the product runs on tensor cores.
func (o *owner) gemmMixed(g *gemmArgs, aN, bN int) error {
	if g.aType == g.bType && (g.aType == dtBF16 || g.cType == dtF32) {
		return o.gemm(g)
	}
	h := *g
	conv := func(p uintptr, n int) (uintptr, error) {
		t, err := o.tmp(2 * n)
		if err != nil {
			return 0, err
		}
		if err := o.castF32ToBF16(devptr[bf16](t), devptr[float32](p), n); err != nil {
			o.done(t)
			return 0, err
		}
		return t, nil
	}
	var err error
	if h.aType == dtF32 {
		if h.a, err = conv(g.a, aN); err != nil {
			return err
		}
		defer o.done(h.a)
		h.aType = dtBF16
	}
	if h.bType == dtF32 {
		if h.b, err = conv(g.b, bN); err != nil {
			return err
		}
		defer o.done(h.b)
		h.bType = dtBF16
	}
	return o.gemm(&h)
}

// MatmulForward sets out[rows,outDim] = inp·weightᵀ + bias (weight [outDim,in]).
func (b *Backend) MatmulForward(out, inp, weight, bias Buf, rows, in, outDim int) error {
	if rows == 0 {
		return nil
	}
	if err := b.GEMM(false, true, rows, outDim, in, 1, inp, in, weight, in, 0, out, outDim); err != nil {
		return err
	}
	if bias.Addr() != 0 {
		return b.BiasForward(out, bias, rows, outDim)
	}
	return nil
}

// MatmulBackward accumulates dinp += dout·weight, dweight += doutᵀ·inp, dbias += Σ dout
// (any absent).
func (b *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buf, rows, in, outDim int) error {
	if rows == 0 {
		return nil
	}
	if dinp.Addr() != 0 {
		if err := b.GEMM(false, false, rows, in, outDim, 1, dout, outDim, weight, in, 1, dinp, in); err != nil {
			return err
		}
	}
	if dweight.Addr() != 0 {
		if err := b.GEMM(true, false, outDim, in, rows, 1, dout, outDim, inp, in, 1, dweight, in); err != nil {
			return err
		}
	}
	if dbias.Addr() != 0 {
		return b.BiasBackward(dbias, dout, rows, outDim)
	}
	return nil
}

// NewRoPETable uploads the cos and sin tables for positions [0, maxPos), tabulated on the
// host in float64 as the CPU's.
func (b *Backend) NewRoPETable(invFreq []float64, maxPos int) (*RoPETable, error) {
	half := len(invFreq)
	cs, sn := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := 0; p < maxPos; p++ {
		for i, f := range invFreq {
			s, c := math.Sincos(float64(p) * f)
			cs[p*half+i], sn[p*half+i] = float32(c), float32(s)
		}
	}
	r := &RoPETable{Half: half, MaxPos: maxPos}
	var err error
	if r.Cos, err = b.Alloc(F32, len(cs)); err != nil {
		return nil, err
	}
	if r.Sin, err = b.Alloc(F32, len(sn)); err != nil {
		return nil, err
	}
	return r, firstErr(b.Upload(r.Cos, cs), b.Upload(r.Sin, sn))
}

// RoPEForward rotates x [rows, heads·2·Half] in place, row r at position pos[r].
func (b *Backend) RoPEForward(x, pos Buf, heads int, r *RoPETable) error {
	return b.rope(x, pos, heads, r, 1)
}

// RoPEBackward rotates the gradient back.
func (b *Backend) RoPEBackward(dx, pos Buf, heads int, r *RoPETable) error {
	return b.rope(dx, pos, heads, r, -1)
}

func (b *Backend) rope(x, pos Buf, heads int, r *RoPETable, sign float32) error {
	rows := pos.Len()
	if r == nil || r.Cos.IsHost() {
		return fmt.Errorf("cuda: RoPE with a table not made by this backend")
	}
	hd := r.Width()
	if hd < 2*r.Half {
		return fmt.Errorf("cuda: RoPE over heads of %d with %d rotated dimensions", hd, 2*r.Half)
	}
	return b.queue(firstErr(act("x", x, rows*heads*hd), need("pos", pos, I32, rows)),
		func(o *owner) error {
			if x.DType() == F32 {
				d := dims{grid: [3]uint32{uint32(min(rows, 1<<30)), uint32(min(heads, maxGridY)), 1}, block: [3]uint32{uint32(ceilDiv(r.Half, 32) * 32), 1, 1}}
				return o.ropeForwardF32(d, f32(x), i32(pos), f32(r.Cos), f32(r.Sin), int32(rows), int32(heads), int32(r.Half), int32(hd), sign)
			}
			return o.rope(bf(x), i32(pos), f32(r.Cos), f32(r.Sin), rows, heads, r.Half, hd, sign)
		})
}

// q4State is a 4-bit weight on the device (a Q4's State), uploaded once.
type q4State struct {
	q    q4
	bufs []Buf
	// expanded is the weight as bf16 [rows, cols], kept after its first expansion while the
	// device has room (see expandedQ4): the base is frozen, so the training and scoring
	// passes of every later step multiply by it without expanding it again.
	expanded uintptr
	// desc is the weight's device form as one launch of several weights reads it (q4_desc in
	// kernels/step.cu), written once at upload.
	desc Buf
}

// weightBytes is the bytes of the weight's codes and scales (a 4-bit product reads each once).
func (st *q4State) weightBytes() int64 {
	w := int64(st.q.rows) * int64(st.q.cols)
	blocks := w >> uint(st.q.blockShift)
	if st.q.qabsmax != 0 {
		return w/2 + blocks
	}
	return w/2 + 4*blocks
}

// state is w's device form.
func state(w *Q4) (*q4State, error) {
	st, ok := w.State.(*q4State)
	if !ok || st.bufs == nil {
		return nil, fmt.Errorf("cuda: a 4-bit weight not uploaded by this backend (or freed)")
	}
	return st, nil
}

// UploadQ4 copies a 4-bit weight (NF4/FP4, with or without double quantization) to the
// device: it stays 4-bit there.
func (b *Backend) UploadQ4(w *quant.Weight) (*Q4, error) {
	shift, err := blockShift(w.BlockSize)
	if err != nil {
		return nil, err
	}
	if w.Nested() && w.NestedBlockSize != 256 {
		return nil, fmt.Errorf("cuda: double quantization in blocks of %d (the kernels take 256)", w.NestedBlockSize)
	}
	st := &q4State{q: q4{rows: w.Rows, cols: w.Cols, blockShift: shift, offset: w.Offset}}
	fail := func(err error) (*Q4, error) {
		for _, x := range st.bufs {
			_ = b.Free(x)
		}
		return nil, err
	}
	up := func(dt DType, host any, n int) (Buf, error) {
		x, err := b.Alloc(dt, n)
		if err != nil {
			return Buf{}, err
		}
		st.bufs = append(st.bufs, x)
		return x, b.Upload(x, host)
	}
	code := w.Type.Code()
	var packed, cb Buf
	if packed, err = up(U8, w.Packed, len(w.Packed)); err != nil {
		return fail(err)
	}
	if cb, err = up(F32, code[:], 16); err != nil {
		return fail(err)
	}
	st.q.packed, st.q.code = u8(packed), f32(cb)
	if w.Nested() {
		qa, err1 := up(U8, w.QAbsmax, len(w.QAbsmax))
		na, err2 := up(F32, w.NestedAbsmax, len(w.NestedAbsmax))
		nc, err3 := up(F32, w.NestedCode[:], 256)
		if err := firstErr(err1, err2, err3); err != nil {
			return fail(err)
		}
		st.q.qabsmax, st.q.nestedAbsmax, st.q.nestedCode = u8(qa), f32(na), f32(nc)
	} else {
		am, err := up(F32, w.Absmax, len(w.Absmax))
		if err != nil {
			return fail(err)
		}
		st.q.absmax = f32(am)
	}
	q := &st.q
	desc, err := b.table([]uint64{uint64(q.packed), uint64(q.absmax), uint64(q.qabsmax), uint64(q.nestedAbsmax), uint64(q.nestedCode),
		uint64(q.code), uint64(uint32(q.rows)) | uint64(q.blockShift)<<32, uint64(math.Float32bits(q.offset))})
	if err != nil {
		return fail(err)
	}
	st.desc, st.bufs = desc, append(st.bufs, desc)
	return &Q4{Rows: w.Rows, Cols: w.Cols, W: w, State: st}, nil
}

// FreeQ4 releases a 4-bit weight's device memory.
func (b *Backend) FreeQ4(w *Q4) {
	st, err := state(w)
	if err != nil {
		return
	}
	for _, x := range st.bufs {
		_ = b.Free(x)
	}
	st.bufs = nil
	b.d.enqueue(func(o *owner) error { o.dropStacked(st); return nil })
	if p := st.expanded; p != 0 {
		st.expanded = 0
		b.d.enqueue(func(o *owner) error {
			o.expandedBytes -= 2 * int64(w.Rows) * int64(w.Cols)
			o.kept = slices.DeleteFunc(o.kept, func(x *q4State) bool { return x == st })
			o.d.mem.keepExpansion(2*w.Rows*w.Cols, true)
			return o.d.mem.free(p)
		})
	}
}

// Q4Bytes is the device memory a 4-bit weight holds.
func Q4Bytes(w *Q4) int64 {
	st, err := state(w)
	if err != nil {
		return 0
	}
	var n int64
	for _, x := range st.bufs {
		n += int64(x.Bytes())
	}
	return n
}

// Q4Dequantize expands w into out [Rows, Cols]: bf16 (the products' form) or float32 (bit for
// bit the CPU's expansion).
func (b *Backend) Q4Dequantize(out Buf, w *Q4) error {
	st, err := state(w)
	if err != nil {
		return err
	}
	n := w.Rows * w.Cols
	return b.queue(act("out", out, n), func(o *owner) error {
		if out.DType() == F32 {
			return o.dequantF32(f32(out), &st.q)
		}
		if out.Addr()%16 == 0 {
			return o.dequant(bf(out), &st.q)
		}
		// the kernel stores 16 bytes at a time: expand aligned, then copy
		p, err := o.tmp(2 * n)
		if err != nil {
			return err
		}
		defer o.done(p)
		if err := o.dequant(devptr[bf16](p), &st.q); err != nil {
			return err
		}
		return o.copyDtoD(out.Addr(), p, 2*n)
	})
}

// Q4MulT sets y[rows, w.Rows] = x[rows, w.Cols]·Wᵀ: the fused 4-bit product for a few bf16
// rows (a decode step), else W expanded to bf16 in scratch and a cuBLAS product (QLoRA's
// way). x and y are bf16 or float32.
func (b *Backend) Q4MulT(y, x Buf, w *Q4, rows int) error {
	st, err := state(w)
	if err != nil || rows == 0 {
		return err
	}
	return b.queue(firstErr(act("y", y, rows*w.Rows), act("x", x, rows*w.Cols)), func(o *owner) error {
		if rows <= 2*gemvMaxRows && x.DType() == BF16 && y.DType() == BF16 {
			for r := 0; r < rows; r += gemvMaxRows {
				m := min(gemvMaxRows, rows-r)
				if err := o.gemv4(bf16At(bf(y), r*w.Rows), w.Rows, bf16At(bf(x), r*w.Cols), w.Cols, &st.q, m); err != nil {
					return err
				}
			}
			return nil
		}
		xb, release, err := o.bfIn(x, rows*w.Cols)
		if err != nil {
			return err
		}
		defer release()
		p, done, err := o.expandedQ4(st)
		if err != nil {
			return err
		}
		defer done()
		return o.gemm(&gemmArgs{transB: true, m: rows, n: w.Rows, k: w.Cols, alpha: 1, a: uintptr(xb), aType: dtBF16, lda: w.Cols,
			b: p, bType: dtBF16, ldb: w.Cols, c: y.Addr(), cType: blasType(y), ldc: w.Rows})
	})
}

// Q4MulAcc adds dy[rows, w.Rows]·W to dx[rows, w.Cols] (the input gradient through W); bf16
// or float32 each.
func (b *Backend) Q4MulAcc(dx, dy Buf, w *Q4, rows int) error {
	st, err := state(w)
	if err != nil || rows == 0 {
		return err
	}
	return b.queue(firstErr(act("dx", dx, rows*w.Cols), act("dy", dy, rows*w.Rows)), func(o *owner) error {
		dyb, release, err := o.bfIn(dy, rows*w.Rows)
		if err != nil {
			return err
		}
		defer release()
		p, done, err := o.expandedQ4(st)
		if err != nil {
			return err
		}
		defer done()
		return o.gemm(&gemmArgs{m: rows, n: w.Cols, k: w.Rows, alpha: 1, beta: 1, a: uintptr(dyb), aType: dtBF16, lda: w.Rows,
			b: p, bType: dtBF16, ldb: w.Cols, c: dx.Addr(), cType: blasType(dx), ldc: w.Cols})
	})
}

// ExpandsQ4Head: a 4-bit LM head is held here as its bf16 expansion, made once at its upload
// (backend.HeadExpander): its logits are float32, which the fused 4-bit product does not
// write, and a captured decode step would otherwise expand it in every replay. The head's
// bytes a token are then the bf16 head's, as without [quant] head; the host keeps it 4-bit.
func (*Backend) ExpandsQ4Head() bool { return true }

// Q4Embedding sets out[r] = row ids[r] of W (+ wpe[pos[r]], bf16) from W's bf16 expansion
// (expandedQ4: kept for the run when memory is spare, as the 4-bit head's products keep it):
// a 4-bit LM head tied to the embedding, and the digit tokens' head rows. A row-gathering
// 4-bit kernel would spare the expansion; the device holds the head as bf16 either way.
func (b *Backend) Q4Embedding(out, ids, pos Buf, w *Q4, wpe Buf) error {
	st, err := state(w)
	if err != nil {
		return err
	}
	rows := ids.Len()
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(act("out", out, rows*w.Cols), need("ids", ids, I32, rows), opt("pos", pos, I32, rows),
		opt("wpe", wpe, BF16, w.Cols)), func(o *owner) error {
		p, done, err := o.expandedQ4(st)
		if err != nil {
			return err
		}
		defer done()
		return o.embed(out, i32(ids), i32(pos), backend.Device(BF16, p, w.Rows*w.Cols), wpe, rows, w.Cols)
	})
}

// expandedQ4 is st's weight as bf16 for a product: the kept expansion, or one made now and
// kept when the device keeps at least a quarter of its memory free afterwards (so a run
// that fits without the expansions still fits: they only take what is spare), else one in
// scratch that done gives back. With the expansions kept, each 4-bit weight is expanded once
// for the whole run instead of in each of the reference, training forward and backward
// passes of every step: its bytes are read as bf16 (2 bytes a weight) where the expansion
// read 4 bits and wrote and read 2 bytes.
func (o *owner) expandedQ4(st *q4State) (uintptr, func(), error) {
	if st.expanded != 0 && !o.capturing { // a graph keeps its own (the kept one may be dropped)
		return st.expanded, func() {}, nil
	}
	n := 2 * int64(st.q.rows) * int64(st.q.cols)
	keep := false
	if !o.capturing && !o.d.noKeep {
		var free, total uintptr
		dr := o.d.drv
		if call(dr.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))) == 0 {
			keep = int64(free)-n >= int64(total)/4
		}
	}
	p, err := o.tmp(int(n))
	if err != nil {
		return 0, nil, err
	}
	if err := o.dequant(devptr[bf16](p), &st.q); err != nil {
		o.done(p)
		return 0, nil, err
	}
	if keep {
		st.expanded = p
		o.expandedBytes += n
		o.kept = append(o.kept, st)
		o.d.mem.keepExpansion(int(n), false)
		return p, func() {}, nil
	}
	return p, func() { o.done(p) }, nil
}

// dropExpanded gives every kept expansion back to the allocator's cache (when an allocation
// fails: the expansions only ever take spare memory) and returns their bytes.
func (o *owner) dropExpanded() int64 {
	var n int64
	for _, st := range o.kept {
		if st.expanded != 0 {
			_ = o.d.mem.free(st.expanded)
			st.expanded = 0
			n += 2 * int64(st.q.rows) * int64(st.q.cols)
			o.d.mem.keepExpansion(2*st.q.rows*st.q.cols, true)
		}
	}
	o.kept, o.expandedBytes = nil, 0
	return n
}

// Cast converts between float32 and bf16 (same length).
func (b *Backend) Cast(dst, src Buf) error {
	if err := firstErr(onDevice("dst", dst, 0), onDevice("src", src, 0)); err != nil {
		return err
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("cuda: cast of %d values into %d", src.Len(), dst.Len())
	}
	switch {
	case dst.DType() == BF16 && src.DType() == F32:
		return b.queue(nil, func(o *owner) error { return o.castF32ToBF16(bf(dst), f32(src), src.Len()) })
	case dst.DType() == F32 && src.DType() == BF16:
		return b.queue(nil, func(o *owner) error { return o.castBF16ToF32(f32(dst), bf(src), src.Len()) })
	case dst.DType() == src.DType():
		return b.Copy(dst, src)
	}
	return fmt.Errorf("cuda: cast of %s to %s", src.DType(), dst.DType())
}

// casts is the CUDA form of a backend.Casts: the float32 → bf16 pairs as one device table
// (cast_multi_bf16's), the others cast one by one.
type casts struct {
	table   Buf
	words   []uint64
	largest int
	rest    []int // the pairs outside the table
}

// NewCasts uploads the table of c's float32 → bf16 pairs once.
func (b *Backend) NewCasts(dst, src []Buf) (*Casts, error) {
	if err := backend.CheckCasts(dst, src); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	st := &casts{}
	for i := range dst {
		if err := firstErr(onDevice("dst", dst[i], 0), onDevice("src", src[i], 0)); err != nil {
			return nil, fmt.Errorf("cuda: cast %d: %w", i, err)
		}
		if dst[i].DType() != BF16 || src[i].DType() != F32 || dst[i].Len() == 0 {
			st.rest = append(st.rest, i)
			continue
		}
		st.words = append(st.words, uint64(dst[i].Addr()), uint64(src[i].Addr()), uint64(src[i].Len()))
		st.largest = max(st.largest, src[i].Len())
	}
	if n := len(st.words) / 3; n > maxGridY {
		return nil, fmt.Errorf("cuda: %d casts (at most %d together)", n, maxGridY)
	}
	if len(st.words) > 0 {
		var err error
		if st.table, err = b.table(st.words); err != nil {
			return nil, err
		}
	}
	return &Casts{Dst: slices.Clone(dst), Src: slices.Clone(src), State: st}, nil
}

// CastAll queues c's table in one launch, then any other pairs.
func (b *Backend) CastAll(c *Casts) error {
	st, ok := c.State.(*casts)
	if !ok {
		return fmt.Errorf("cuda: casts not made by this backend")
	}
	if n := len(st.words) / 3; n > 0 {
		d := dims{grid: [3]uint32{uint32(b.multiBlocks(n, st.largest)), uint32(n), 1}, block: [3]uint32{threads, 1, 1}}
		b.d.enqueue(func(o *owner) error {
			o.hint = tableElems(st.words, 3)
			return o.castMultiBF16(d, devptr[uint64](st.table.Addr()))
		})
	}
	for _, i := range st.rest {
		if err := b.Cast(c.Dst[i], c.Src[i]); err != nil {
			return err
		}
	}
	return nil
}

// FreeCasts releases c's table.
func (b *Backend) FreeCasts(c *Casts) {
	if st, ok := c.State.(*casts); ok {
		b.Free(st.table)
		c.State = nil
	}
}

// Copy2D copies rows×cols values between row-major views with leading dimensions (the
// split and merge of a fused QKV projection); bf16 or float32 both.
func (b *Backend) Copy2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error {
	if mixedTypes(dst, src) {
		return b.inF32([]Buf{dst}, nil, []Buf{src}, func(o, a, i []Buf) error { return b.Copy2D(o[0], ldd, i[0], lds, rows, cols) })
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return b.queue(firstErr(act("dst", dst, (rows-1)*ldd+cols), act("src", src, (rows-1)*lds+cols)),
		func(o *owner) error {
			if dst.DType() == F32 {
				return o.copy2dF32(cols2d(rows, cols), f32(dst), int32(ldd), f32(src), int32(lds), int32(rows), int32(cols))
			}
			return o.copy2d(bf(dst), ldd, bf(src), lds, rows, cols)
		})
}

// Add2D adds src to dst between row-major views (the backward of Copy2D).
func (b *Backend) Add2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error {
	if mixedTypes(dst, src) {
		return b.inF32(nil, []Buf{dst}, []Buf{src}, func(o, a, i []Buf) error { return b.Add2D(a[0], ldd, i[0], lds, rows, cols) })
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return b.queue(firstErr(act("dst", dst, (rows-1)*ldd+cols), act("src", src, (rows-1)*lds+cols)),
		func(o *owner) error {
			if dst.DType() == F32 {
				return o.add2dF32(cols2d(rows, cols), f32(dst), int32(ldd), f32(src), int32(lds), int32(rows), int32(cols))
			}
			return o.add2d(bf(dst), ldd, bf(src), lds, rows, cols)
		})
}

// CopyRows copies row srcRows[i] of src to row dstRows[i] of dst for every i (nil index
// slices mean the identity): KV-cache appends, selected rows, last rows.
func (b *Backend) CopyRows(dst Buf, dstRows []int64, ldd int, src Buf, srcRows []int64, lds int, n, cols int) error {
	if mixedTypes(dst, src) {
		return b.inF32([]Buf{dst}, nil, []Buf{src}, func(o, a, i []Buf) error { return b.CopyRows(o[0], dstRows, ldd, i[0], srcRows, lds, n, cols) })
	}
	if n == 0 || cols == 0 {
		return nil
	}
	if err := firstErr(act("dst", dst, cols), act("src", src, cols)); err != nil {
		return err
	}
	if dstRows != nil && len(dstRows) < n || srcRows != nil && len(srcRows) < n {
		return fmt.Errorf("cuda: CopyRows of %d rows with %d and %d indices", n, len(dstRows), len(srcRows))
	}
	check := func(what string, rows []int64, ld int, x Buf) error {
		for i := 0; i < n; i++ {
			r := int64(i)
			if rows != nil {
				r = rows[i]
			}
			if r < 0 || int(r)*ld+cols > x.Len() {
				return fmt.Errorf("cuda: CopyRows %s row %d outside %d values", what, r, x.Len())
			}
		}
		return nil
	}
	if err := firstErr(check("destination", dstRows, ldd, dst), check("source", srcRows, lds, src)); err != nil {
		return err
	}
	var di, si Buf
	var err error
	if dstRows != nil {
		if di, err = b.uploadTemp(dstRows[:n]); err != nil {
			return err
		}
	}
	if srcRows != nil {
		if si, err = b.uploadTemp(srcRows[:n]); err != nil {
			return err
		}
	}
	b.d.enqueue(func(o *owner) error {
		defer o.done(di.Addr())
		defer o.done(si.Addr())
		return o.copyRowsOf(dst, i64(di), ldd, src, i64(si), lds, n, cols)
	})
	return nil
}

// CopyRowsIdx is CopyRows with the row indices already on the device (I64 buffers; an empty
// Buf means the identity): what a captured decode step uses, its indices updated in place
// before each replay.
func (b *Backend) CopyRowsIdx(dst, dstRows Buf, ldd int, src, srcRows Buf, lds int, n, cols int) error {
	if n == 0 {
		return nil
	}
	return b.queue(firstErr(act("dst", dst, cols), act("src", src, cols), sameType("CopyRows", dst, src), opt("dstRows", dstRows, I64, n), opt("srcRows", srcRows, I64, n)),
		func(o *owner) error {
			return o.copyRowsOf(dst, i64(dstRows), ldd, src, i64(srcRows), lds, n, cols)
		})
}

// copyRowsOf dispatches on the rows' type.
func (o *owner) copyRowsOf(dst Buf, dstRows devptr[int64], ldd int, src Buf, srcRows devptr[int64], lds int, n, cols int) error {
	if dst.DType() == F32 {
		d := dims{grid: [3]uint32{uint32(min(ceilDiv(cols, threads), 8)), uint32(min(n, maxGridY)), 1}, block: [3]uint32{threads, 1, 1}}
		return o.copyRowsF32(d, f32(dst), dstRows, int32(ldd), f32(src), srcRows, int32(lds), int32(n), int32(cols))
	}
	return o.copyRows(bf(dst), dstRows, ldd, bf(src), srcRows, lds, n, cols)
}

// uploadTemp puts small host metadata on the device for one op; the op frees it on the
// owning thread when its work is queued.
func (b *Backend) uploadTemp(x []int64) (Buf, error) {
	buf, err := b.Alloc(I64, len(x))
	if err != nil {
		return Buf{}, err
	}
	return buf, b.Upload(buf, x)
}

// DropoutForward sets out = x·mask/(1−p) with the mask of seed (backend.DropoutKeep's);
// DropoutBackward accumulates the gradient through the same mask.
func (b *Backend) DropoutForward(out, x Buf, n int, seed uint64, p float32) error {
	if mixedTypes(out, x) {
		return b.inF32([]Buf{out}, nil, []Buf{x}, func(o, a, i []Buf) error { return b.DropoutForward(o[0], i[0], n, seed, p) })
	}
	return b.queue(firstErr(act("out", out, n), act("x", x, n)), func(o *owner) error {
		if out.DType() == F32 {
			return o.dropoutForwardF32(o.flat(int64(n)), f32(out), f32(x), int64(n), seed, dropoutThreshold(p), 1/(1-p))
		}
		return o.dropout(bf(out), bf(x), n, seed, p)
	})
}

func (b *Backend) DropoutBackward(dx, dout Buf, n int, seed uint64, p float32) error {
	if mixedTypes(dx, dout) {
		return b.inF32(nil, []Buf{dx}, []Buf{dout}, func(o, a, i []Buf) error { return b.DropoutBackward(a[0], i[0], n, seed, p) })
	}
	return b.queue(firstErr(act("dx", dx, n), act("dout", dout, n)), func(o *owner) error {
		if dx.DType() == F32 {
			return o.dropoutBackwardF32(o.flat(int64(n)), f32(dx), f32(dout), int64(n), seed, dropoutThreshold(p), 1/(1-p))
		}
		return o.dropoutBack(bf(dx), bf(dout), n, seed, p)
	})
}
