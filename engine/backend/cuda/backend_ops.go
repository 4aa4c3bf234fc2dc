package cuda

import (
	"fmt"
	"math"

	"rlhfstation/quant"
)

// The model's ops, named and ordered as the CPU backend's functions (engine/backend/cpu):
// outputs first, backward ops accumulating into their gradients.

// The residual stream (the embedding's output, each block's input and output) is float32,
// the inputs of products bf16: mixed precision as PyTorch's autocast keeps it. Norms read
// the float32 stream and write bf16 (or float32); residual adds take a bf16 projection into
// the float32 stream; their backward ops run in float32. The bf16-only forms exist too.

func residual(name string, x Buf, n int) error {
	if x.dt != F32 && x.dt != BF16 {
		return fmt.Errorf("cuda: %s is %s, want f32 or bf16", name, x.dt)
	}
	return need(name, x, x.dt, n)
}

// EmbeddingForward sets out[r] = wte[ids[r]] (+ wpe[pos[r]]) for rows = ids.Len().
func (b *Backend) EmbeddingForward(out, ids, pos, wte, wpe Buf, dim int) error {
	rows := ids.n
	return b.queue(firstErr(residual("out", out, rows*dim), need("ids", ids, I32, rows), need("wte", wte, BF16, dim),
		opt("pos", pos, I32, rows), opt("wpe", wpe, BF16, dim)),
		func(o *owner) error { return o.embed(out, ids.i32(), pos.i32(), wte.bf(), wpe.bf(), rows, dim) })
}

// EmbeddingBackward accumulates dwte[ids[r]] += dout[r] and dwpe[pos[r]] += dout[r] (float32
// tables, either absent).
func (b *Backend) EmbeddingBackward(dwte, dwpe, dout, ids, pos Buf, dim int) error {
	rows := ids.n
	return b.queue(firstErr(need("dout", dout, F32, rows*dim), need("ids", ids, I32, rows), opt("dwte", dwte, F32, dim),
		opt("dwpe", dwpe, F32, dim), opt("pos", pos, I32, rows)),
		func(o *owner) error {
			return o.embedBack(dwte.f32(), dwpe.f32(), dout.f32(), ids.i32(), pos.i32(), rows, dim)
		})
}

// RMSNormForward sets out = x·rstd·weight per row, keeping rstd.
func (b *Backend) RMSNormForward(out, rstd, inp, weight Buf, rows, dim int, eps float64) error {
	return b.queue(firstErr(residual("out", out, rows*dim), need("rstd", rstd, F32, rows), residual("inp", inp, rows*dim),
		need("weight", weight, F32, dim)),
		func(o *owner) error { return o.rmsnorm(out, rstd.f32(), inp, weight.f32(), rows, dim, float32(eps)) })
}

// RMSNormBackward accumulates dinp and dweight (absent when frozen).
func (b *Backend) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buf, rows, dim int) error {
	return b.queue(firstErr(residual("dinp", dinp, rows*dim), opt("dweight", dweight, F32, dim), residual("dout", dout, rows*dim),
		residual("inp", inp, rows*dim), need("weight", weight, F32, dim), need("rstd", rstd, F32, rows)),
		func(o *owner) error {
			return o.rmsnormBack(dinp, dweight.f32(), dout, inp, weight.f32(), rstd.f32(), rows, dim)
		})
}

// LayerNormForward sets out = (x−mean)·rstd·weight + bias per row, keeping mean and rstd.
func (b *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias Buf, rows, dim int, eps float64) error {
	return b.queue(firstErr(residual("out", out, rows*dim), need("mean", mean, F32, rows), need("rstd", rstd, F32, rows),
		residual("inp", inp, rows*dim), need("weight", weight, F32, dim), need("bias", bias, F32, dim)),
		func(o *owner) error {
			return o.layernorm(out, mean.f32(), rstd.f32(), inp, weight.f32(), bias.f32(), rows, dim, float32(eps))
		})
}

// LayerNormBackward accumulates dinp, dweight and dbias (both absent when frozen).
func (b *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buf, rows, dim int) error {
	if (dweight.ptr == 0) != (dbias.ptr == 0) {
		return fmt.Errorf("cuda: LayerNormBackward wants both weight and bias gradients or neither")
	}
	return b.queue(firstErr(residual("dinp", dinp, rows*dim), opt("dweight", dweight, F32, dim), opt("dbias", dbias, F32, dim),
		residual("dout", dout, rows*dim), residual("inp", inp, rows*dim), need("weight", weight, F32, dim),
		need("mean", mean, F32, rows), need("rstd", rstd, F32, rows)),
		func(o *owner) error {
			return o.layernormBack(dinp, dweight.f32(), dbias.f32(), dout, inp, weight.f32(), mean.f32(), rstd.f32(), rows, dim)
		})
}

// ResidualForward sets out = a + b over n elements (out, a: the float32 stream, b: bf16;
// or all bf16). out may alias a.
func (b *Backend) ResidualForward(out, x, y Buf, n int) error {
	return b.queue(firstErr(residual("out", out, n), residual("a", x, n), need("b", y, BF16, n)),
		func(o *owner) error { return o.residual(out, x, y, n) })
}

// ResidualBackward accumulates da += dout and db += dout (either absent; any of float32 and
// bf16).
func (b *Backend) ResidualBackward(da, db, dout Buf, n int) error {
	return b.queue(firstErr(residual("dout", dout, n), optResidual("da", da, n), optResidual("db", db, n)),
		func(o *owner) error {
			if da.ptr != 0 {
				if err := o.add(da, dout, 1, n); err != nil {
					return err
				}
			}
			if db.ptr != 0 {
				return o.add(db, dout, 1, n)
			}
			return nil
		})
}

func optResidual(name string, x Buf, n int) error {
	if x.ptr == 0 {
		return nil
	}
	return residual(name, x, n)
}

// Add accumulates acc += alpha·x (float32 or bf16 each).
func (b *Backend) Add(acc, x Buf, alpha float32, n int) error {
	return b.queue(firstErr(residual("acc", acc, n), residual("x", x, n)), func(o *owner) error { return o.add(acc, x, alpha, n) })
}

// GELUForward sets out = GELU(inp) (tanh approximation).
func (b *Backend) GELUForward(out, inp Buf, n int) error {
	return b.queue(firstErr(need("out", out, BF16, n), need("inp", inp, BF16, n)),
		func(o *owner) error { return o.gelu(out.bf(), inp.bf(), n) })
}

// GELUBackward accumulates dinp += dout·GELU'(inp).
func (b *Backend) GELUBackward(dinp, dout, inp Buf, n int) error {
	return b.queue(firstErr(need("dinp", dinp, BF16, n), need("dout", dout, BF16, n), need("inp", inp, BF16, n)),
		func(o *owner) error { return o.geluBack(dinp.bf(), dout.bf(), inp.bf(), n) })
}

// SwiGLUForward sets out = SiLU(gate)·up.
func (b *Backend) SwiGLUForward(out, gate, up Buf, n int) error {
	return b.queue(firstErr(need("out", out, BF16, n), need("gate", gate, BF16, n), need("up", up, BF16, n)),
		func(o *owner) error { return o.swiglu(out.bf(), gate.bf(), up.bf(), n) })
}

// SwiGLUBackward accumulates dgate and dup.
func (b *Backend) SwiGLUBackward(dgate, dup, dout, gate, up Buf, n int) error {
	return b.queue(firstErr(need("dgate", dgate, BF16, n), need("dup", dup, BF16, n), need("dout", dout, BF16, n),
		need("gate", gate, BF16, n), need("up", up, BF16, n)),
		func(o *owner) error { return o.swigluBack(dgate.bf(), dup.bf(), dout.bf(), gate.bf(), up.bf(), n) })
}

// BiasForward adds bias[cols] (float32) to every row of out[rows,cols].
func (b *Backend) BiasForward(out, bias Buf, rows, cols int) error {
	return b.queue(firstErr(need("out", out, BF16, rows*cols), need("bias", bias, F32, cols)),
		func(o *owner) error { return o.bias(out.bf(), bias.f32(), rows, cols) })
}

// BiasBackward accumulates dbias += Σ_rows dout.
func (b *Backend) BiasBackward(dbias, dout Buf, rows, cols int) error {
	return b.queue(firstErr(need("dbias", dbias, F32, cols), need("dout", dout, BF16, rows*cols)),
		func(o *owner) error { return o.biasBack(dbias.f32(), dout.bf(), rows, cols) })
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
	span := func(rows, cols, ld, stride int) int { return (batch-1)*stride + (rows-1)*ld + cols }
	if lda < ac || ldb < bc || ldc < n {
		return fmt.Errorf("cuda: GEMM leading dimensions %d, %d, %d below the rows' %d, %d, %d", lda, ldb, ldc, ac, bc, n)
	}
	at, ok1 := cublasType(a.dt)
	bt, ok2 := cublasType(bb.dt)
	ct, ok3 := cublasType(c.dt)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("cuda: GEMM of %s × %s into %s", a.dt, bb.dt, c.dt)
	}
	if a.n < span(ar, ac, lda, strideA) || bb.n < span(br, bc, ldb, strideB) || c.n < span(m, n, ldc, strideC) {
		return fmt.Errorf("cuda: GEMM operands too short (%d, %d, %d elements)", a.n, bb.n, c.n)
	}
	b.d.enqueue(func(o *owner) error {
		ap, bp := a.ptr, bb.ptr
		if at != bt { // round the float32 operand to bf16 in scratch
			conv := func(x Buf, n int) (uintptr, error) {
				p, err := o.tmp(2 * n)
				if err != nil {
					return 0, err
				}
				return p, o.castF32ToBF16(devptr[bf16](p), x.f32(), n)
			}
			var err error
			if at == dtF32 {
				n := span(ar, ac, lda, strideA)
				if ap, err = conv(a, n); err != nil {
					return err
				}
				defer o.done(ap)
				at = dtBF16
			} else {
				n := span(br, bc, ldb, strideB)
				if bp, err = conv(bb, n); err != nil {
					return err
				}
				defer o.done(bp)
				bt = dtBF16
			}
		}
		return o.gemm(&gemmArgs{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
			a: ap, aType: at, lda: lda, strideA: int64(strideA), b: bp, bType: bt, ldb: ldb, strideB: int64(strideB),
			c: c.ptr, cType: ct, ldc: ldc, strideC: int64(strideC), batch: batch})
	})
	return nil
}

// MatmulForward sets out[rows,outDim] = inp·weightᵀ + bias (weight [outDim,in]).
func (b *Backend) MatmulForward(out, inp, weight, bias Buf, rows, in, outDim int) error {
	if rows == 0 {
		return nil
	}
	if err := b.GEMM(false, true, rows, outDim, in, 1, inp, in, weight, in, 0, out, outDim); err != nil {
		return err
	}
	if bias.ptr != 0 {
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
	if dinp.ptr != 0 {
		if err := b.GEMM(false, false, rows, in, outDim, 1, dout, outDim, weight, in, 1, dinp, in); err != nil {
			return err
		}
	}
	if dweight.ptr != 0 {
		if err := b.GEMM(true, false, outDim, in, rows, 1, dout, outDim, inp, in, 1, dweight, in); err != nil {
			return err
		}
	}
	if dbias.ptr != 0 {
		return b.BiasBackward(dbias, dout, rows, outDim)
	}
	return nil
}

// RoPETable holds rotary embeddings' cos and sin tables on the device, tabulated on the
// host in float64 as the CPU's.
type RoPETable struct {
	Half, MaxPos int
	cos, sin     Buf
}

// NewRoPETable uploads the tables for positions [0, maxPos).
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
	if r.cos, err = b.Alloc(F32, len(cs)); err != nil {
		return nil, err
	}
	if r.sin, err = b.Alloc(F32, len(sn)); err != nil {
		return nil, err
	}
	return r, firstErr(b.Upload(r.cos, cs), b.Upload(r.sin, sn))
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
	rows := pos.n
	return b.queue(firstErr(need("x", x, BF16, rows*heads*2*r.Half), need("pos", pos, I32, rows)),
		func(o *owner) error {
			return o.rope(x.bf(), pos.i32(), r.cos.f32(), r.sin.f32(), rows, heads, r.Half, sign)
		})
}

// Q4 is a 4-bit weight on the device, uploaded once.
type Q4 struct {
	Rows, Cols int
	q          q4
	bufs       []Buf
}

// UploadQ4 copies a 4-bit weight (NF4/FP4, with or without double quantization) to the device.
func (b *Backend) UploadQ4(w *quant.Weight) (*Q4, error) {
	shift, err := blockShift(w.BlockSize)
	if err != nil {
		return nil, err
	}
	if w.Nested() && w.NestedBlockSize != 256 {
		return nil, fmt.Errorf("cuda: double quantization in blocks of %d (the kernels take 256)", w.NestedBlockSize)
	}
	q := &Q4{Rows: w.Rows, Cols: w.Cols, q: q4{rows: w.Rows, cols: w.Cols, blockShift: shift, offset: w.Offset}}
	up := func(dt DType, host any, n int) (Buf, error) {
		x, err := b.Alloc(dt, n)
		if err != nil {
			return Buf{}, err
		}
		q.bufs = append(q.bufs, x)
		return x, b.Upload(x, host)
	}
	code := w.Type.Code()
	var packed, cb Buf
	if packed, err = up(U8, w.Packed, len(w.Packed)); err != nil {
		return nil, err
	}
	if cb, err = up(F32, code[:], 16); err != nil {
		return nil, err
	}
	q.q.packed, q.q.code = packed.u8(), cb.f32()
	if w.Nested() {
		qa, err1 := up(U8, w.QAbsmax, len(w.QAbsmax))
		na, err2 := up(F32, w.NestedAbsmax, len(w.NestedAbsmax))
		nc, err3 := up(F32, w.NestedCode[:], 256)
		if err := firstErr(err1, err2, err3); err != nil {
			return nil, err
		}
		q.q.qabsmax, q.q.nestedAbsmax, q.q.nestedCode = qa.u8(), na.f32(), nc.f32()
	} else {
		am, err := up(F32, w.Absmax, len(w.Absmax))
		if err != nil {
			return nil, err
		}
		q.q.absmax = am.f32()
	}
	return q, nil
}

// FreeQ4 releases a 4-bit weight.
func (b *Backend) FreeQ4(q *Q4) {
	for _, x := range q.bufs {
		_ = b.Free(x)
	}
	q.bufs = nil
}

// Bytes is the device memory the weight holds.
func (q *Q4) Bytes() int64 {
	var n int64
	for _, x := range q.bufs {
		n += int64(x.bytes())
	}
	return n
}

// Q4Dequantize expands w into out [Rows, Cols] bf16 (16-byte aligned: the kernel stores 16
// bytes at a time).
func (b *Backend) Q4Dequantize(out Buf, w *Q4) error {
	if out.ptr%16 != 0 {
		return fmt.Errorf("cuda: 4-bit dequantization into a view not 16-byte aligned (offset %d)", out.ptr%16)
	}
	return b.queue(need("out", out, BF16, w.Rows*w.Cols), func(o *owner) error { return o.dequant(out.bf(), &w.q) })
}

// Q4MulT sets y[rows, w.Rows] = x[rows, w.Cols]·Wᵀ: the fused 4-bit product for a few rows
// (a decode step), else W expanded to bf16 in scratch and a cuBLAS product (QLoRA's way).
func (b *Backend) Q4MulT(y, x Buf, w *Q4, rows int) error {
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(need("y", y, BF16, rows*w.Rows), need("x", x, BF16, rows*w.Cols)), func(o *owner) error {
		if rows <= 2*gemvMaxRows {
			for r := 0; r < rows; r += gemvMaxRows {
				m := min(gemvMaxRows, rows-r)
				if err := o.gemv4(bf16At(y.bf(), r*w.Rows), w.Rows, bf16At(x.bf(), r*w.Cols), w.Cols, &w.q, m); err != nil {
					return err
				}
			}
			return nil
		}
		p, err := o.tmp(2 * w.Rows * w.Cols)
		if err != nil {
			return err
		}
		defer o.done(p)
		if err := o.dequant(devptr[bf16](p), &w.q); err != nil {
			return err
		}
		return o.gemm(&gemmArgs{transB: true, m: rows, n: w.Rows, k: w.Cols, alpha: 1, a: x.ptr, aType: dtBF16, lda: w.Cols,
			b: p, bType: dtBF16, ldb: w.Cols, c: y.ptr, cType: dtBF16, ldc: w.Rows})
	})
}

// Q4MulAcc adds dy[rows, w.Rows]·W to dx[rows, w.Cols] (the input gradient through W).
func (b *Backend) Q4MulAcc(dx, dy Buf, w *Q4, rows int) error {
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(need("dx", dx, BF16, rows*w.Cols), need("dy", dy, BF16, rows*w.Rows)), func(o *owner) error {
		p, err := o.tmp(2 * w.Rows * w.Cols)
		if err != nil {
			return err
		}
		defer o.done(p)
		if err := o.dequant(devptr[bf16](p), &w.q); err != nil {
			return err
		}
		return o.gemm(&gemmArgs{m: rows, n: w.Cols, k: w.Rows, alpha: 1, beta: 1, a: dy.ptr, aType: dtBF16, lda: w.Rows,
			b: p, bType: dtBF16, ldb: w.Cols, c: dx.ptr, cType: dtBF16, ldc: w.Cols})
	})
}

// Cast converts between float32 and bf16 (same length).
func (b *Backend) Cast(dst, src Buf) error {
	if dst.n != src.n {
		return fmt.Errorf("cuda: cast of %d values into %d", src.n, dst.n)
	}
	switch {
	case dst.dt == BF16 && src.dt == F32:
		return b.queue(nil, func(o *owner) error { return o.castF32ToBF16(dst.bf(), src.f32(), src.n) })
	case dst.dt == F32 && src.dt == BF16:
		return b.queue(nil, func(o *owner) error { return o.castBF16ToF32(dst.f32(), src.bf(), src.n) })
	case dst.dt == src.dt:
		return b.Copy(dst, src)
	}
	return fmt.Errorf("cuda: cast of %s to %s", src.dt, dst.dt)
}

// Copy2D copies rows×cols values between row-major views with leading dimensions (the
// split and merge of a fused QKV projection).
func (b *Backend) Copy2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error {
	return b.queue(firstErr(need("dst", dst, BF16, (rows-1)*ldd+cols), need("src", src, BF16, (rows-1)*lds+cols)),
		func(o *owner) error { return o.copy2d(dst.bf(), ldd, src.bf(), lds, rows, cols) })
}

// Add2D adds src to dst between row-major views (the backward of Copy2D).
func (b *Backend) Add2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error {
	return b.queue(firstErr(need("dst", dst, BF16, (rows-1)*ldd+cols), need("src", src, BF16, (rows-1)*lds+cols)),
		func(o *owner) error { return o.add2d(dst.bf(), ldd, src.bf(), lds, rows, cols) })
}

// CopyRows copies row srcRows[i] of src to row dstRows[i] of dst for every i (nil index
// slices mean the identity): KV-cache appends, selected rows, last rows.
func (b *Backend) CopyRows(dst Buf, dstRows []int64, ldd int, src Buf, srcRows []int64, lds int, n, cols int) error {
	if n == 0 {
		return nil
	}
	if dst.dt != BF16 || src.dt != BF16 {
		return fmt.Errorf("cuda: CopyRows of %s into %s", src.dt, dst.dt)
	}
	for _, r := range dstRows {
		if int(r)*ldd+cols > dst.n || r < 0 {
			return fmt.Errorf("cuda: CopyRows destination row %d outside %d values", r, dst.n)
		}
	}
	for _, r := range srcRows {
		if int(r)*lds+cols > src.n || r < 0 {
			return fmt.Errorf("cuda: CopyRows source row %d outside %d values", r, src.n)
		}
	}
	var di, si Buf
	var err error
	if dstRows != nil {
		if di, err = b.uploadTemp(dstRows); err != nil {
			return err
		}
	}
	if srcRows != nil {
		if si, err = b.uploadTemp(srcRows); err != nil {
			return err
		}
	}
	b.d.enqueue(func(o *owner) error {
		defer o.done(di.ptr)
		defer o.done(si.ptr)
		return o.copyRows(dst.bf(), di.i64(), ldd, src.bf(), si.i64(), lds, n, cols)
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
	return b.queue(firstErr(need("dst", dst, BF16, cols), need("src", src, BF16, cols), opt("dstRows", dstRows, I64, n), opt("srcRows", srcRows, I64, n)),
		func(o *owner) error {
			return o.copyRows(dst.bf(), dstRows.i64(), ldd, src.bf(), srcRows.i64(), lds, n, cols)
		})
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

// DropoutForward sets out = x·mask/(1−p) with the mask of seed; DropoutBackward adds the
// gradient through the same mask.
func (b *Backend) DropoutForward(out, x Buf, n int, seed uint64, p float32) error {
	return b.queue(firstErr(need("out", out, BF16, n), need("x", x, BF16, n)),
		func(o *owner) error { return o.dropout(out.bf(), x.bf(), n, seed, p) })
}

func (b *Backend) DropoutBackward(dx, dout Buf, n int, seed uint64, p float32) error {
	return b.queue(firstErr(need("dx", dx, BF16, n), need("dout", dout, BF16, n)),
		func(o *owner) error { return o.dropoutBack(dx.bf(), dout.bf(), n, seed, p) })
}
