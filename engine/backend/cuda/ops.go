package cuda

import (
	"fmt"
	"math/bits"

	"rlhfstation/engine/backend"
)

// The ops as the owning thread issues them: launch shapes for each kernel, and the cuBLAS
// products. Sizes are checked by the backend before they get here.

const (
	threads   = 256 // block size of the one-dimensional kernels
	rowsWarps = 8   // rows per block of the warp-per-row kernels (256 threads)
	fewRows   = 64  // up to this many rows, a norm takes a block per row rather than a warp
	maxGridY  = 65535
)

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// flat is a grid-stride launch over n elements: enough blocks to fill the device, no more.
func (o *owner) flat(n int64) dims {
	return grid1(int(min(int64(ceilDiv64(n, threads)), int64(32*max(1, o.d.Info.SMs)))), threads)
}

func ceilDiv64(a int64, b int64) int64 { return (a + b - 1) / b }

// warpRows is a launch of one warp per row, 8 rows a block.
func warpRows(rows int) dims { return grid1(min(ceilDiv(rows, rowsWarps), 1<<20), rowsWarps*32) }

// cols2d is a launch with blocks across columns and grid.y across rows (strided beyond 65535).
func cols2d(rows, cols int) dims {
	return dims{grid: [3]uint32{uint32(ceilDiv(cols, threads)), uint32(min(rows, maxGridY)), 1}, block: [3]uint32{threads, 1, 1}}
}

func (o *owner) castF32ToBF16(out devptr[bf16], in devptr[float32], n int) error {
	return o.castF32BF16(o.flat(int64(n)), out, in, int64(n))
}

func (o *owner) castBF16ToF32(out devptr[float32], in devptr[bf16], n int) error {
	return o.castBF16F32(o.flat(int64(n)), out, in, int64(n))
}

// residual sets out = a + b: out and a float32 (the residual stream) with b bf16, or all of
// one type; other mixtures through a float32 copy of b.
func (o *owner) residual(out, a, b Buf, n int) error {
	d := o.flat(int64(n))
	switch {
	case out.DType() == F32 && a.DType() == F32 && b.DType() == BF16:
		return o.residualForward(d, f32(out), f32(a), bf(b), int64(n))
	case out.DType() == BF16 && a.DType() == BF16 && b.DType() == BF16:
		return o.residualForwardBF16(d, bf(out), bf(a), bf(b), int64(n))
	case out.DType() == F32 && a.DType() == F32 && b.DType() == F32:
		return o.residualForwardF32(d, f32(out), f32(a), f32(b), int64(n))
	}
	// out = a, then out += b: the add kernels take every mixture
	if out != a {
		if out.DType() == a.DType() {
			if err := o.copyDtoD(out.Addr(), a.Addr(), n*a.DType().Size()); err != nil {
				return err
			}
		} else if err := o.memset(out.Addr(), 0, n*out.DType().Size()); err != nil {
			return err
		} else if err := o.add(out, a, 1, n); err != nil {
			return err
		}
	}
	return o.add(out, b, 1, n)
}

// add sets acc += alpha·x between float32 and bf16 buffers.
func (o *owner) add(acc, x Buf, alpha float32, n int) error {
	d := o.flat(int64(n))
	switch {
	case acc.DType() == F32 && x.DType() == F32:
		return o.addScaledF32(d, f32(acc), f32(x), alpha, int64(n))
	case acc.DType() == BF16 && x.DType() == BF16:
		return o.addScaledBF16(d, bf(acc), bf(x), alpha, int64(n))
	case acc.DType() == BF16 && x.DType() == F32:
		return o.addScaledBF16F32(d, bf(acc), f32(x), alpha, int64(n))
	case acc.DType() == F32 && x.DType() == BF16:
		return o.addScaledF32BF16(d, f32(acc), bf(x), alpha, int64(n))
	}
	return fmt.Errorf("cuda: add of %s into %s", x.DType(), acc.DType())
}

func (o *owner) gelu(out, in devptr[bf16], n int) error {
	return o.geluForward(o.flat(int64(n)), out, in, int64(n))
}

func (o *owner) geluBack(din, dout, in devptr[bf16], n int) error {
	return o.geluBackward(o.flat(int64(n)), din, dout, in, int64(n))
}

func (o *owner) swiglu(out, gate, up devptr[bf16], n int) error {
	return o.swigluForward(o.flat(int64(n)), out, gate, up, int64(n))
}

func (o *owner) swigluBack(dgate, dup, dout, gate, up devptr[bf16], n int) error {
	return o.swigluBackward(o.flat(int64(n)), dgate, dup, dout, gate, up, int64(n))
}

func (o *owner) geglu(out, gate, up devptr[bf16], n int) error {
	return o.gegluForward(o.flat(int64(n)), out, gate, up, int64(n))
}

func (o *owner) gegluBack(dgate, dup, dout, gate, up devptr[bf16], n int) error {
	return o.gegluBackward(o.flat(int64(n)), dgate, dup, dout, gate, up, int64(n))
}

func (o *owner) bias(out devptr[bf16], b devptr[float32], rows, cols int) error {
	return o.biasForward(cols2d(rows, cols), out, b, int32(rows), int32(cols))
}

func (o *owner) biasBack(db devptr[float32], dout devptr[bf16], rows, cols int) error {
	d := dims{grid: [3]uint32{uint32(ceilDiv(cols, 32)), uint32(min(ceilDiv(rows, 8), 64)), 1}, block: [3]uint32{32, 8, 1}}
	return o.biasBackward(d, db, dout, int32(rows), int32(cols))
}

// copy2d copies rows×cols values between strided row-major views.
func (o *owner) copy2d(dst devptr[bf16], ldd int, src devptr[bf16], lds int, rows, cols int) error {
	return o.copy2dBF16(cols2d(rows, cols), dst, int32(ldd), src, int32(lds), int32(rows), int32(cols))
}

func (o *owner) cast2d(dst devptr[bf16], ldd int, src devptr[float32], lds int, rows, cols int) error {
	return o.cast2dF32BF16(cols2d(rows, cols), dst, int32(ldd), src, int32(lds), int32(rows), int32(cols))
}

func (o *owner) add2d(dst devptr[bf16], ldd int, src devptr[bf16], lds int, rows, cols int) error {
	return o.add2dBF16(cols2d(rows, cols), dst, int32(ldd), src, int32(lds), int32(rows), int32(cols))
}

// copyRows copies n rows of cols values from src rows srcRows[i] to dst rows dstRows[i]
// (index arrays in device memory; 0 means the identity).
func (o *owner) copyRows(dst devptr[bf16], dstRows devptr[int64], ldd int, src devptr[bf16], srcRows devptr[int64], lds int, n, cols int) error {
	d := dims{grid: [3]uint32{uint32(min(ceilDiv(cols, threads), 8)), uint32(min(n, maxGridY)), 1}, block: [3]uint32{threads, 1, 1}}
	return o.copyRowsBF16(d, dst, dstRows, int32(ldd), src, srcRows, int32(lds), int32(n), int32(cols))
}

func (o *owner) embed(out Buf, ids, pos devptr[int32], wte, wpe Buf, rows, dim int) error {
	d := cols2d(rows, dim)
	switch {
	case out.DType() == F32 && wte.DType() == BF16:
		return o.embeddingForward(d, f32(out), ids, pos, bf(wte), bf(wpe), int32(rows), int32(dim))
	case out.DType() == BF16 && wte.DType() == BF16:
		return o.embeddingForwardBF16(d, bf(out), ids, pos, bf(wte), bf(wpe), int32(rows), int32(dim))
	case out.DType() == F32:
		return o.embeddingForwardF32tab(d, f32(out), ids, pos, f32(wte), f32(wpe), int32(rows), int32(dim))
	}
	return o.embeddingForwardBF16F32tab(d, bf(out), ids, pos, f32(wte), f32(wpe), int32(rows), int32(dim))
}

func (o *owner) embedBack(dwte, dwpe devptr[float32], dout devptr[float32], ids, pos devptr[int32], rows, dim int) error {
	return o.embeddingBackward(cols2d(rows, dim), dwte, dwpe, dout, ids, pos, int32(rows), int32(dim))
}

// rmsnorm: the input float32 (the residual stream) with a bf16 or float32 output, or bf16
// both; a bf16 input into float32 through a float32 copy.
func (o *owner) rmsnorm(out Buf, rstd devptr[float32], in Buf, w devptr[float32], rows, dim int, eps, offset float32) error {
	d := warpRows(rows)
	if rows <= fewRows { // a block per row (kernels/norm.cu): a decode step's few rows
		d = grid1(rows, normRowThreads(dim))
	}
	switch {
	case in.DType() == F32 && out.DType() == BF16:
		return o.rmsnormForward(d, bf(out), rstd, f32(in), w, int32(rows), int32(dim), eps, offset)
	case in.DType() == F32 && out.DType() == F32:
		return o.rmsnormForwardF32(d, f32(out), rstd, f32(in), w, int32(rows), int32(dim), eps, offset)
	case in.DType() == BF16 && out.DType() == BF16:
		return o.rmsnormForwardBF16(d, bf(out), rstd, bf(in), w, int32(rows), int32(dim), eps, offset)
	}
	in32, release, err := o.f32In(in, rows*dim)
	if err != nil {
		return err
	}
	defer release()
	return o.rmsnormForwardF32(d, f32(out), rstd, in32, w, int32(rows), int32(dim), eps, offset)
}

// normEach is NORM_EACH (kernels/norm.cu): the values a thread of a block-per-row norm holds.
const normEach = 8

// normRowThreads is the block of a block-per-row norm: enough warps that each thread holds at
// most normEach of the row's dim values (up to 1,024 threads), or 256 for a longer row, which
// the block then walks.
func normRowThreads(dim int) int {
	if dim > normEach*1024 {
		return 256
	}
	return 32 * max(1, ceilDiv(dim, 32*normEach))
}

// normBackDims spreads rows over a few blocks per multiprocessor when weight gradients are
// summed (each block holds dim partial sums in shared memory), else one warp per row.
func (o *owner) normBackDims(rows, dim, sharedPerDim int, weights bool) (dims, error) {
	if !weights {
		return warpRows(rows), nil
	}
	d := grid1(min(ceilDiv(rows, rowsWarps), 2*max(1, o.d.Info.SMs)), rowsWarps*32)
	d.shared = uint32(4 * sharedPerDim * dim)
	if d.shared > 48<<10 {
		return d, fmt.Errorf("cuda: norm weight gradients of dimension %d need %d bytes of shared memory, more than 48 KiB", dim, d.shared)
	}
	return d, nil
}

// rmsnormBack: dinp, dout and inp all float32 or all bf16; other mixtures through float32
// copies (see mixedBack).
func (o *owner) rmsnormBack(din Buf, dw devptr[float32], dout, in Buf, w, rstd devptr[float32], rows, dim int, offset float32) error {
	d, err := o.normBackDims(rows, dim, 1, dw != 0)
	if err != nil {
		return err
	}
	switch {
	case din.DType() == F32 && dout.DType() == F32 && in.DType() == F32:
		return o.rmsnormBackward(d, f32(din), dw, f32(dout), f32(in), w, rstd, int32(rows), int32(dim), offset)
	case din.DType() == BF16 && dout.DType() == BF16 && in.DType() == BF16:
		return o.rmsnormBackwardBF16(d, bf(din), dw, bf(dout), bf(in), w, rstd, int32(rows), int32(dim), offset)
	}
	return o.mixedBack(din, dout, in, rows*dim, func(din, dout, in devptr[float32]) error {
		return o.rmsnormBackward(d, din, dw, dout, in, w, rstd, int32(rows), int32(dim), offset)
	})
}

// mixedBack runs a norm's float32 backward for operands of mixed types (the float32 stream's
// gradient from a bf16 output's, say): bf16 inputs widened into scratch, a bf16 dinp
// accumulated in a zeroed float32 scratch and added to it afterwards.
func (o *owner) mixedBack(din, dout, in Buf, n int, run func(din, dout, in devptr[float32]) error) error {
	dout32, rel1, err := o.f32In(dout, n)
	if err != nil {
		return err
	}
	defer rel1()
	in32, rel2, err := o.f32In(in, n)
	if err != nil {
		return err
	}
	defer rel2()
	if din.DType() == F32 {
		return run(f32(din), dout32, in32)
	}
	p, err := o.tmp(4 * n)
	if err != nil {
		return err
	}
	defer o.done(p)
	if err := o.memset(p, 0, 4*n); err != nil {
		return err
	}
	if err := run(devptr[float32](p), dout32, in32); err != nil {
		return err
	}
	return o.add(din, backend.Device(F32, p, n), 1, n)
}

// f32In gives x's first n values as float32 on the owning thread: x itself, or a widened
// copy in scratch; release returns the scratch.
func (o *owner) f32In(x Buf, n int) (devptr[float32], func(), error) {
	if x.DType() == F32 {
		return f32(x), func() {}, nil
	}
	p, err := o.tmp(4 * n)
	if err != nil {
		return 0, nil, err
	}
	if err := o.castBF16ToF32(devptr[float32](p), bf(x), n); err != nil {
		o.done(p)
		return 0, nil, err
	}
	return devptr[float32](p), func() { o.done(p) }, nil
}

func (o *owner) layernorm(out Buf, mean, rstd devptr[float32], in Buf, w, b devptr[float32], rows, dim int, eps float32) error {
	d := warpRows(rows)
	switch {
	case in.DType() == F32 && out.DType() == BF16:
		return o.layernormForward(d, bf(out), mean, rstd, f32(in), w, b, int32(rows), int32(dim), eps)
	case in.DType() == F32 && out.DType() == F32:
		return o.layernormForwardF32(d, f32(out), mean, rstd, f32(in), w, b, int32(rows), int32(dim), eps)
	case in.DType() == BF16 && out.DType() == BF16:
		return o.layernormForwardBF16(d, bf(out), mean, rstd, bf(in), w, b, int32(rows), int32(dim), eps)
	}
	in32, release, err := o.f32In(in, rows*dim)
	if err != nil {
		return err
	}
	defer release()
	return o.layernormForwardF32(d, f32(out), mean, rstd, in32, w, b, int32(rows), int32(dim), eps)
}

func (o *owner) layernormBack(din Buf, dw, db devptr[float32], dout, in Buf, w, mean, rstd devptr[float32], rows, dim int) error {
	d, err := o.normBackDims(rows, dim, 2, dw != 0)
	if err != nil {
		return err
	}
	switch {
	case din.DType() == F32 && dout.DType() == F32 && in.DType() == F32:
		return o.layernormBackward(d, f32(din), dw, db, f32(dout), f32(in), w, mean, rstd, int32(rows), int32(dim))
	case din.DType() == BF16 && dout.DType() == BF16 && in.DType() == BF16:
		return o.layernormBackwardBF16(d, bf(din), dw, db, bf(dout), bf(in), w, mean, rstd, int32(rows), int32(dim))
	}
	return o.mixedBack(din, dout, in, rows*dim, func(din, dout, in devptr[float32]) error {
		return o.layernormBackward(d, din, dw, db, dout, in, w, mean, rstd, int32(rows), int32(dim))
	})
}

// rope rotates x [rows, heads·hd] in place by the tabulated angles of pos (sign −1: back),
// each head's first 2·half dimensions.
func (o *owner) rope(x devptr[bf16], pos devptr[int32], cos, sin devptr[float32], rows, heads, half, hd int, sign float32) error {
	d := dims{grid: [3]uint32{uint32(min(rows, 1<<30)), uint32(min(heads, maxGridY)), 1}, block: [3]uint32{uint32(ceilDiv(half, 32) * 32), 1, 1}}
	return o.ropeForward(d, x, pos, cos, sin, int32(rows), int32(heads), int32(half), int32(hd), sign)
}

// softmaxCausal turns scores into probabilities in place (float32), soft-capping them first
// when softcap > 0.
func (o *owner) softmaxCausal(scores devptr[float32], heads, n, L, pos0, window int, softcap float32) error {
	return o.attnSoftmaxForward(warpRows(heads*n), scores, scores, int32(heads), int32(n), int32(L), int32(pos0), int32(window), softcap)
}

// attentionRows computes attention for rows one at a time (decode steps, short spans): row
// r's keys and values start at k and v plus seq[r]·seqStride (seq 0: all at k and v), pos
// its position.
func (o *owner) attentionRows(out, q, k, v devptr[bf16], seq, pos devptr[int32], seqStride int64, rows int, a attnShape, ldk int) error {
	if rows == 0 {
		return nil
	}
	if a.hd > 256 {
		return fmt.Errorf("cuda: head dimension %d above the row attention kernel's 256", a.hd)
	}
	d := dims{grid: [3]uint32{uint32(rows), uint32(a.heads), 1}, block: [3]uint32{attnWarps * 32, 1, 1}}
	if o.hint == 0 && seqStride > 0 && ldk > 0 {
		// the positions are on the device: declare every row reading its sequence's whole
		// capacity (an upper bound); callers that know the lengths set o.hint
		o.hint = int64(rows) * seqStride / int64(ldk)
	}
	launch := o.attnRows256
	switch {
	case a.hd <= 64:
		launch = o.attnRows64
	case a.hd <= 128:
		launch = o.attnRows128
	}
	return launch(d, out, q, k, v, seq, pos, seqStride, int32(a.heads), int32(a.kvHeads), int32(a.hd), int32(ldk), a.scale, int32(a.window), a.softcap)
}

// rowThreads is the block of the block-per-row log-prob kernels: about 16 logits a thread
// (a power of two from 64 to 512), so that a small vocabulary does not leave most threads idle.
func rowThreads(vocab int) int {
	t := 64
	for t < 512 && t*16 < vocab {
		t *= 2
	}
	return t
}

func (o *owner) logprobs(logp, ent, logits devptr[float32], targets devptr[int32], rows, vocab int, invT float32) error {
	return o.logprobForward(grid1(min(rows, 1<<20), rowThreads(vocab)), logp, ent, logits, targets, int32(rows), int32(vocab), invT)
}

func (o *owner) logprobsBack(dlogits Buf, logits, dlogp, dentropy devptr[float32], targets devptr[int32], rows, vocab int, invT float32) error {
	g := grid1(min(rows, 1<<20), rowThreads(vocab))
	if dlogits.DType() == F32 {
		return o.logprobBackwardF32(g, f32(dlogits), logits, dlogp, dentropy, targets, int32(rows), int32(vocab), invT)
	}
	return o.logprobBackward(g, bf(dlogits), logits, dlogp, dentropy, targets, int32(rows), int32(vocab), invT)
}

func (o *owner) digits(out, logits devptr[float32], ids, values devptr[int32], n, rows, vocab int) error {
	return o.digitProbs(warpRows(rows), out, logits, ids, values, int32(n), int32(rows), int32(vocab))
}

func (o *owner) sample(tokens devptr[int32], logp, logits devptr[float32], uniforms devptr[float64], rows, vocab int, invT float32, greedy bool, topK int, topP float32,
	pen backend.Penalties) error {
	g := int32(0)
	if greedy {
		g = 1
	}
	if (topK <= 0 || topK >= vocab) && !(topP > 0 && topP < 1) && !pen.Penalised() && rows <= maxGridY {
		return o.sampleTiled(tokens, logp, logits, uniforms, rows, vocab, invT, g, pen)
	}
	return o.sampleRows(grid1(min(rows, 1<<20), 1024), tokens, logp, logits, uniforms, int32(rows), int32(vocab), invT, g, int32(topK), topP,
		pen.MinP, pen.Repetition, i32(pen.Seen), int32(backend.SeenWords(vocab)))
}

// sampleTiled is the draw over tiles of the vocabulary, a block each (kernels/sample.cu's
// sample_tiles and sample_tiles_draw): up to 64 tiles a row of at least 1024 ids, a multiple
// of 256. Its scratch (each tile's maximum, arg, sum and kept mass, each row's counter) is
// the step's own when captured.
func (o *owner) sampleTiled(tokens devptr[int32], logp, logits devptr[float32], uniforms devptr[float64], rows, vocab int, invT float32, greedy int32,
	pen backend.Penalties) error {
	tile := max(1024, ceilDiv(ceilDiv(vocab, 64), 256)*256)
	tiles := ceilDiv(vocab, tile)
	n := rows * tiles
	p, err := o.tmp(20*n + 4*rows)
	if err != nil {
		return err
	}
	defer o.done(p)
	mass, tmax := devptr[uint64](p), devptr[float32](p+uintptr(8*n))
	targ, tsum, count := devptr[int32](p+uintptr(12*n)), devptr[float32](p+uintptr(16*n)), devptr[uint32](p+uintptr(20*n))
	d := dims{grid: [3]uint32{uint32(tiles), uint32(rows), 1}, block: [3]uint32{256, 1, 1}}
	if err := o.sampleTiles(d, tmax, targ, tsum, count, logits, int32(vocab), int32(tile), invT); err != nil {
		return err
	}
	return o.sampleTilesDraw(d, tokens, logp, mass, count, tmax, targ, tsum, logits, uniforms, int32(vocab), int32(tile), invT, greedy, pen.MinP,
		i32(pen.Seen), int32(backend.SeenWords(vocab)))
}

func (o *owner) sum(out, x devptr[float32], n int) error {
	return o.sumF32(grid1(1, 1024), out, x, int32(n))
}

// q4 is a 4-bit weight on the device (see kernels/quant.cu).
type q4 struct {
	rows, cols   int
	blockShift   int
	packed       devptr[uint8]
	absmax       devptr[float32] // 0 when double-quantized
	qabsmax      devptr[uint8]   // 0 when not
	nestedAbsmax devptr[float32]
	nestedCode   devptr[float32]
	code         devptr[float32] // the 16-value code book
	offset       float32
}

func blockShift(bs int) (int, error) {
	if bs < 32 || bs&(bs-1) != 0 {
		return 0, fmt.Errorf("cuda: 4-bit block size %d is not a power of two of at least 32", bs)
	}
	return bits.TrailingZeros(uint(bs)), nil
}

// dequant expands w into out [rows, cols] bf16 (16-byte aligned).
func (o *owner) dequant(out devptr[bf16], w *q4) error {
	n := int64(w.rows) * int64(w.cols)
	g := grid1(int(min(ceilDiv64(ceilDiv64(n, 16), threads), int64(32*max(1, o.d.Info.SMs)))), threads)
	return o.dequant4BF16(g, out, w.packed, w.absmax, w.qabsmax, w.nestedAbsmax, w.nestedCode, w.code, w.offset, n, int32(w.blockShift))
}

// dequantF32 expands w into out [rows, cols] float32, as the CPU does.
func (o *owner) dequantF32(out devptr[float32], w *q4) error {
	n := int64(w.rows) * int64(w.cols)
	return o.dequant4F32(o.flat(n), out, w.packed, w.absmax, w.qabsmax, w.nestedAbsmax, w.nestedCode, w.code, w.offset, n, int32(w.blockShift))
}

// gemvMaxRows is the most rows of x the fused 4-bit product takes at once.
const gemvMaxRows = 8

// gemv4 sets y[m, w.rows] = x[m, w.cols]·Wᵀ for m ≤ gemvMaxRows.
func (o *owner) gemv4(y devptr[bf16], ldy int, x devptr[bf16], ldx int, w *q4, m int) error {
	vec := int32(0)
	if w.cols%16 == 0 && ldx%8 == 0 && uintptr(x)%16 == 0 {
		vec = 1
	}
	g := grid1(ceilDiv(w.rows, rowsWarps*2), rowsWarps*32)
	return o.gemv4BF16(g, y, int32(ldy), x, int32(ldx), w.packed, w.absmax, w.qabsmax, w.nestedAbsmax, w.nestedCode, w.code, w.offset,
		int32(w.rows), int32(w.cols), int32(m), int32(w.blockShift), vec)
}

// gemm runs a row-major product on the owner's stream (see cublas.gemm).
func (o *owner) gemm(g *gemmArgs) error {
	if g.m > 0 && g.n > 0 {
		o.recordBLAS(g)
	}
	return o.d.blas.gemm(o.blasHandle, g)
}

// dropoutThreshold is p·2^32: hashes below it drop.
func dropoutThreshold(p float32) uint32 { return uint32(min(float64(p)*(1<<32), (1<<32)-1)) }

func (o *owner) dropout(out, x devptr[bf16], n int, seed uint64, p float32) error {
	return o.dropoutForward(o.flat(int64(n)), out, x, int64(n), seed, dropoutThreshold(p), 1/(1-p))
}

func (o *owner) dropoutBack(dx, dout devptr[bf16], n int, seed uint64, p float32) error {
	return o.dropoutBackward(o.flat(int64(n)), dx, dout, int64(n), seed, dropoutThreshold(p), 1/(1-p))
}
