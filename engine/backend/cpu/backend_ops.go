package cpu

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// The backend.Backend ops: each checks its buffers and calls this package's function of the
// same name on the slices they view.

func (*Backend) EmbeddingForward(out, ids, pos, wte, wpe backend.Buf, dim int) error {
	var a args
	te := a.weight("wte", wte, 0)
	if a.err != nil {
		return a.err
	}
	return embedding(out, ids, pos, te, wpe, dim)
}

// Q4Embedding reads each row of the 4-bit table straight from its codes (wmat.row): no
// dequantized copy of the table is made.
func (*Backend) Q4Embedding(out, ids, pos backend.Buf, w *backend.Q4, wpe backend.Buf) error {
	if w == nil || w.W == nil {
		return fmt.Errorf("cpu: Q4Embedding without a weight")
	}
	return embedding(out, ids, pos, wmat{q: w.W}, wpe, w.Cols)
}

// embedding is EmbeddingForward over any table wmat holds.
func embedding(out, ids, pos backend.Buf, te wmat, wpe backend.Buf, dim int) error {
	var a args
	rows := ids.Len()
	o := a.f32("out", out, rows*dim)
	id := a.i32("ids", ids, rows)
	pe := a.optF32("wpe", wpe, 0)
	var p []int32
	if pe != nil {
		p = a.i32("pos", pos, rows)
	}
	if a.err != nil {
		return a.err
	}
	vocab := te.len() / max(dim, 1)
	for r, t := range id[:rows] {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("cpu: embedding of id %d (row %d) outside the table of %d", t, r, vocab)
		}
		if pe != nil && (p[r] < 0 || int(p[r])*dim+dim > len(pe)) {
			return fmt.Errorf("cpu: position %d (row %d) outside the table of %d", p[r], r, len(pe)/max(dim, 1))
		}
	}
	if te.f != nil {
		EmbeddingForward(o, id[:rows], p, te.f, pe, dim)
		return nil
	}
	For(rows, grainFor(dim)*8, func(lo, hi int) { // a bf16 or 4-bit table expanded row by row
		for r := lo; r < hi; r++ {
			te.row(o[r*dim:(r+1)*dim], int(id[r]))
		}
	})
	if pe != nil {
		for r := range rows {
			for j, v := range pe[int(p[r])*dim : (int(p[r])+1)*dim] {
				o[r*dim+j] += v
			}
		}
	}
	return nil
}

func (*Backend) EmbeddingBackward(dwte, dwpe, dout, ids, pos backend.Buf, dim int) error {
	var a args
	rows := ids.Len()
	dte := a.optF32("dwte", dwte, 0)
	dpe := a.optF32("dwpe", dwpe, 0)
	d := a.f32("dout", dout, rows*dim)
	id := a.i32("ids", ids, rows)
	var p []int32
	if dpe != nil {
		p = a.i32("pos", pos, rows)
	}
	if a.err != nil {
		return a.err
	}
	EmbeddingBackward(dte, dpe, d, id[:rows], p, dim)
	return nil
}

func (*Backend) RMSNormForward(out, rstd, inp, weight backend.Buf, rows, dim int, eps float64, offset float32) error {
	var a args
	o, r, x, w := a.f32("out", out, rows*dim), a.f32("rstd", rstd, rows), a.f32("inp", inp, rows*dim), a.f32("weight", weight, dim)
	if a.err != nil {
		return a.err
	}
	RMSNormForward(o, r, x, w, rows, dim, eps, offset)
	return nil
}

func (*Backend) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd backend.Buf, rows, dim int, offset float32) error {
	var a args
	dx, dw := a.f32("dinp", dinp, rows*dim), a.optF32("dweight", dweight, dim)
	d, x, w, r := a.f32("dout", dout, rows*dim), a.f32("inp", inp, rows*dim), a.f32("weight", weight, dim), a.f32("rstd", rstd, rows)
	if a.err != nil {
		return a.err
	}
	RMSNormBackward(dx, dw, d, x, w, r, rows, dim, offset)
	return nil
}

func (*Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, rows, dim int, eps float64) error {
	var a args
	o, mu, r := a.f32("out", out, rows*dim), a.f32("mean", mean, rows), a.f32("rstd", rstd, rows)
	x, w, b := a.f32("inp", inp, rows*dim), a.f32("weight", weight, dim), a.f32("bias", bias, dim)
	if a.err != nil {
		return a.err
	}
	LayerNormForward(o, mu, r, x, w, b, rows, dim, eps)
	return nil
}

func (*Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, rows, dim int) error {
	var a args
	dx, dw, db := a.f32("dinp", dinp, rows*dim), a.optF32("dweight", dweight, dim), a.optF32("dbias", dbias, dim)
	d, x, w := a.f32("dout", dout, rows*dim), a.f32("inp", inp, rows*dim), a.f32("weight", weight, dim)
	mu, r := a.f32("mean", mean, rows), a.f32("rstd", rstd, rows)
	if a.err != nil {
		return a.err
	}
	if (dw == nil) != (db == nil) {
		return fmt.Errorf("cpu: LayerNormBackward wants both weight and bias gradients or neither")
	}
	LayerNormBackward(dx, dw, db, d, x, w, mu, r, rows, dim)
	return nil
}

func (*Backend) ResidualForward(out, x, y backend.Buf, n int) error {
	var a args
	o, p, q := a.f32("out", out, n), a.f32("a", x, n), a.f32("b", y, n)
	if a.err != nil {
		return a.err
	}
	ResidualForward(o, p, q, n)
	return nil
}

func (*Backend) ResidualBackward(da, db, dout backend.Buf, n int) error {
	var a args
	p, q, d := a.optF32("da", da, n), a.optF32("db", db, n), a.f32("dout", dout, n)
	if a.err != nil {
		return a.err
	}
	ResidualBackward(p, q, d, n)
	return nil
}

func (*Backend) Add(acc, x backend.Buf, alpha float32, n int) error {
	var a args
	y, v := a.f32("acc", acc, n), a.f32("x", x, n)
	if a.err != nil {
		return a.err
	}
	For(n, 1<<16, func(lo, hi int) { axpy(y[lo:hi], v[lo:hi], alpha) })
	return nil
}

func (*Backend) GELUForward(out, inp backend.Buf, n int) error {
	var a args
	o, x := a.f32("out", out, n), a.f32("inp", inp, n)
	if a.err != nil {
		return a.err
	}
	GELUForward(o, x, n)
	return nil
}

func (*Backend) GELUBackward(dinp, dout, inp backend.Buf, n int) error {
	var a args
	dx, d, x := a.f32("dinp", dinp, n), a.f32("dout", dout, n), a.f32("inp", inp, n)
	if a.err != nil {
		return a.err
	}
	GELUBackward(dx, d, x, n)
	return nil
}

func (*Backend) SwiGLUForward(out, gate, up backend.Buf, n int) error {
	var a args
	o, g, u := a.f32("out", out, n), a.f32("gate", gate, n), a.f32("up", up, n)
	if a.err != nil {
		return a.err
	}
	SwiGLUForward(o, g, u, n)
	return nil
}

func (*Backend) SwiGLUBackward(dgate, dup, dout, gate, up backend.Buf, n int) error {
	var a args
	dg, du, d := a.f32("dgate", dgate, n), a.f32("dup", dup, n), a.f32("dout", dout, n)
	g, u := a.f32("gate", gate, n), a.f32("up", up, n)
	if a.err != nil {
		return a.err
	}
	SwiGLUBackward(dg, du, d, g, u, n)
	return nil
}

func (*Backend) GeGLUForward(out, gate, up backend.Buf, n int) error {
	var a args
	o, g, u := a.f32("out", out, n), a.f32("gate", gate, n), a.f32("up", up, n)
	if a.err != nil {
		return a.err
	}
	GeGLUForward(o, g, u, n)
	return nil
}

func (*Backend) GeGLUBackward(dgate, dup, dout, gate, up backend.Buf, n int) error {
	var a args
	dg, du, d := a.f32("dgate", dgate, n), a.f32("dup", dup, n), a.f32("dout", dout, n)
	g, u := a.f32("gate", gate, n), a.f32("up", up, n)
	if a.err != nil {
		return a.err
	}
	GeGLUBackward(dg, du, d, g, u, n)
	return nil
}

func (*Backend) SoftcapForward(out, inp backend.Buf, n int, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cpu: soft-capping at %g", cap)
	}
	var a args
	o, x := a.f32("out", out, n), a.f32("inp", inp, n)
	if a.err != nil {
		return a.err
	}
	SoftcapForward(o, x, n, cap)
	return nil
}

func (*Backend) SoftcapBackward(dinp, dout, out backend.Buf, n int, cap float32) error {
	if !(cap > 0) {
		return fmt.Errorf("cpu: soft-capping at %g", cap)
	}
	var a args
	dx, d, o := a.f32("dinp", dinp, n), a.f32("dout", dout, n), a.f32("out", out, n)
	if a.err != nil {
		return a.err
	}
	SoftcapBackward(dx, d, o, n, cap)
	return nil
}

func (*Backend) BiasForward(out, bias backend.Buf, rows, cols int) error {
	var a args
	o, b := a.f32("out", out, rows*cols), a.f32("bias", bias, cols)
	if a.err != nil {
		return a.err
	}
	BiasForward(o, b, rows, cols)
	return nil
}

func (*Backend) BiasBackward(dbias, dout backend.Buf, rows, cols int) error {
	var a args
	db, d := a.f32("dbias", dbias, cols), a.f32("dout", dout, rows*cols)
	if a.err != nil {
		return a.err
	}
	BiasBackward(db, d, rows, cols)
	return nil
}

func (*Backend) DropoutForward(out, x backend.Buf, n int, seed uint64, p float32) error {
	var a args
	o, v := a.f32("out", out, n), a.f32("x", x, n)
	if a.err != nil {
		return a.err
	}
	DropoutForward(o[:n], v[:n], seed, p)
	return nil
}

func (*Backend) DropoutBackward(dx, dout backend.Buf, n int, seed uint64, p float32) error {
	var a args
	g, d := a.f32("dx", dx, n), a.f32("dout", dout, n)
	if a.err != nil {
		return a.err
	}
	DropoutBackward(g[:n], d[:n], seed, p)
	return nil
}

// gemmArgs checks GEMM's operands: each must reach the last element its matrices touch.
func gemmArgs(a *args, transA, transB bool, m, n, k int, x backend.Buf, lda, strideA int, y backend.Buf, ldb, strideB int,
	c backend.Buf, ldc, strideC, batch int) (av, bv, cv []float32) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < ac || ldb < bc || ldc < n {
		a.fail("GEMM leading dimensions %d, %d, %d below the rows' %d, %d, %d", lda, ldb, ldc, ac, bc, n)
		return
	}
	span := func(rows, cols, ld, stride int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (batch-1)*stride + (rows-1)*ld + cols
	}
	return a.f32("A", x, span(ar, ac, lda, strideA)), a.f32("B", y, span(br, bc, ldb, strideB)), a.f32("C", c, span(m, n, ldc, strideC))
}

func (*Backend) GEMM(transA, transB bool, m, n, k int, alpha float32, x backend.Buf, lda int, y backend.Buf, ldb int, beta float32, c backend.Buf, ldc int) error {
	if m == 0 || n == 0 {
		return nil
	}
	var a args
	av, bv, cv := gemmArgs(&a, transA, transB, m, n, k, x, lda, 0, y, ldb, 0, c, ldc, 0, 1)
	if a.err != nil {
		return a.err
	}
	sgemm(transA, transB, m, n, k, alpha, av, lda, bv, ldb, beta, cv, ldc)
	return nil
}

func (*Backend) GEMMBatched(transA, transB bool, m, n, k int, alpha float32, x backend.Buf, lda, strideA int, y backend.Buf, ldb, strideB int,
	beta float32, c backend.Buf, ldc, strideC, batch int) error {
	if m == 0 || n == 0 || batch == 0 {
		return nil
	}
	var a args
	av, bv, cv := gemmArgs(&a, transA, transB, m, n, k, x, lda, strideA, y, ldb, strideB, c, ldc, strideC, batch)
	if a.err != nil {
		return a.err
	}
	for i := 0; i < batch; i++ {
		sgemm(transA, transB, m, n, k, alpha, av[i*strideA:], lda, bv[i*strideB:], ldb, beta, cv[i*strideC:], ldc)
	}
	return nil
}

func (*Backend) MatmulForward(out, inp, weight, bias backend.Buf, rows, in, outDim int) error {
	if rows == 0 {
		return nil
	}
	var a args
	o, x, w, b := a.f32("out", out, rows*outDim), a.f32("inp", inp, rows*in), a.f32("weight", weight, outDim*in), a.optF32("bias", bias, outDim)
	if a.err != nil {
		return a.err
	}
	MatmulForward(o, x, w, b, rows, in, outDim)
	return nil
}

func (*Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight backend.Buf, rows, in, outDim int) error {
	if rows == 0 {
		return nil
	}
	var a args
	dx, dw, db := a.optF32("dinp", dinp, rows*in), a.optF32("dweight", dweight, outDim*in), a.optF32("dbias", dbias, outDim)
	d := a.f32("dout", dout, rows*outDim)
	var x []float32
	var w wmat
	if dw != nil {
		x = a.f32("inp", inp, rows*in)
	}
	if dx != nil {
		w = a.weight("weight", weight, outDim*in) // a frozen bf16 weight (the head's digit rows) too
	}
	if a.err != nil {
		return a.err
	}
	if w.h != nil {
		w.mulAcc(dx, d, rows, in, outDim)
		dx = nil
	}
	MatmulBackward(dx, dw, db, d, x, w.f, rows, in, outDim)
	return nil
}

// UploadQ4 keeps the host weight as it is: the GEMM expands it a panel at a time, and the
// few-row products (decoding) decode it in registers with the scales readied here (State:
// a *Q4Dot, nil where their layout does not fit the weight).
func (*Backend) UploadQ4(w *quant.Weight) (*backend.Q4, error) {
	if w == nil || w.Rows*w.Cols == 0 {
		return nil, fmt.Errorf("cpu: empty 4-bit weight")
	}
	q := &backend.Q4{Rows: w.Rows, Cols: w.Cols, W: w}
	if d := NewQ4Dot(w); d != nil {
		q.State = d
	}
	return q, nil
}

func (*Backend) FreeQ4(*backend.Q4) {}

func (*Backend) Q4Dequantize(out backend.Buf, w *backend.Q4) error {
	var a args
	o := a.f32("out", out, w.Rows*w.Cols)
	if a.err != nil {
		return a.err
	}
	w.W.Dequantize(o[:w.Rows*w.Cols])
	return nil
}

func (b *Backend) Q4MulT(y, x backend.Buf, w *backend.Q4, rows int) error {
	return b.q4MulT(false, y, x, w, rows)
}

// fewRows is w's few-row form when a product of rows rows takes it: the form made for this
// weight (a replaced weight's stale one does not count) and at most q4DotMaxRows rows; else nil.
func fewRows(w *backend.Q4, rows int) *Q4Dot {
	if d, ok := w.State.(*Q4Dot); ok && d.W == w.W && rows <= q4DotMaxRows {
		return d
	}
	return nil
}

// q4MulT is Q4MulT, by Q4Dot.MulTSampled when sampled.
func (*Backend) q4MulT(sampled bool, y, x backend.Buf, w *backend.Q4, rows int) error {
	if rows == 0 {
		return nil
	}
	var a args
	yv, xv := a.f32("y", y, rows*w.Rows), a.f32("x", x, rows*w.Cols)
	if a.err != nil {
		return a.err
	}
	if d := fewRows(w, rows); d != nil {
		if sampled {
			d.MulTSampled(yv, xv, rows)
		} else {
			d.MulT(yv, xv, rows)
		}
		return nil
	}
	Q4MulT(yv, xv, w.W, rows)
	return nil
}

func (*Backend) Q4MulAcc(dx, dy backend.Buf, w *backend.Q4, rows int) error {
	if rows == 0 {
		return nil
	}
	var a args
	dxv, dyv := a.f32("dx", dx, rows*w.Cols), a.f32("dy", dy, rows*w.Rows)
	if a.err != nil {
		return a.err
	}
	Q4MulAcc(dxv, dyv, w.W, rows)
	return nil
}

func (*Backend) NewRoPETable(invFreq []float64, maxPos int) (*backend.RoPETable, error) {
	r := NewRoPETable(invFreq, maxPos)
	return &backend.RoPETable{Half: r.Half, MaxPos: r.MaxPos, Cos: backend.HostF32(r.cos), Sin: backend.HostF32(r.sin)}, nil
}

func (b *Backend) RoPEForward(x, pos backend.Buf, heads int, r *backend.RoPETable) error {
	return b.rope(x, pos, heads, r, 1)
}

func (b *Backend) RoPEBackward(dx, pos backend.Buf, heads int, r *backend.RoPETable) error {
	return b.rope(dx, pos, heads, r, -1)
}

func (*Backend) rope(x, pos backend.Buf, heads int, r *backend.RoPETable, sign float32) error {
	var a args
	rows := pos.Len()
	p := a.i32("pos", pos, rows)
	if r.HeadDim != 0 && r.HeadDim < 2*r.Half {
		return fmt.Errorf("cpu: RoPE over heads of %d with %d rotated dimensions", r.HeadDim, 2*r.Half)
	}
	v := a.f32("x", x, rows*heads*r.Width())
	t := &RoPETable{Half: r.Half, MaxPos: r.MaxPos, HeadDim: r.HeadDim, cos: a.f32("cos", r.Cos, r.MaxPos*r.Half), sin: a.f32("sin", r.Sin, r.MaxPos*r.Half)}
	if a.err != nil {
		return a.err
	}
	for i, q := range p[:rows] {
		if q < 0 || int(q) >= r.MaxPos {
			return fmt.Errorf("cpu: RoPE of position %d (row %d) beyond the table's %d", q, i, r.MaxPos)
		}
	}
	t.rotate(v, p[:rows], heads, sign)
	return nil
}

// spans turns the backend's spans into this package's, checking their keys and values.
func spans(a *args, sp []backend.Span, at Attention, grads bool) []Span {
	if at.KVHeads <= 0 || at.Heads%at.KVHeads != 0 || at.HeadDim <= 0 {
		a.fail("attention of %d heads over %d key/value heads of %d", at.Heads, at.KVHeads, at.HeadDim)
		return nil
	}
	kw := at.KVHeads * at.HeadDim
	out := make([]Span, len(sp))
	for i, s := range sp {
		if s.N == 0 {
			out[i] = Span{Row: s.Row, Pos: s.Pos}
			continue
		}
		L := (s.Pos + s.N) * kw
		out[i] = Span{Row: s.Row, N: s.N, Pos: s.Pos, K: a.f32("K", s.K, L), V: a.f32("V", s.V, L)}
		if grads {
			out[i].DK, out[i].DV = a.f32("DK", s.DK, L), a.f32("DV", s.DV, L)
		}
	}
	return out
}

func spanRows(sp []backend.Span) int {
	rows := 0
	for _, s := range sp {
		rows = max(rows, s.Row+s.N)
	}
	return rows
}

func (*Backend) AttentionForward(out, probs, q backend.Buf, sp []backend.Span, at backend.Attention) error {
	var a args
	qw := at.Heads * at.HeadDim
	rows := spanRows(sp)
	s := spans(&a, sp, at, false)
	o, pr, qv := a.f32("out", out, rows*qw), a.optF32("probs", probs, at.ProbSize(sp)), a.f32("q", q, rows*qw)
	if a.err != nil {
		return a.err
	}
	AttentionForward(o, pr, qv, s, at)
	return nil
}

func (*Backend) AttentionBackward(dq, dout, probs, q backend.Buf, sp []backend.Span, at backend.Attention) error {
	var a args
	qw := at.Heads * at.HeadDim
	rows := spanRows(sp)
	s := spans(&a, sp, at, true)
	g, d, pr, qv := a.f32("dq", dq, rows*qw), a.f32("dout", dout, rows*qw), a.optF32("probs", probs, at.ProbSize(sp)), a.f32("q", q, rows*qw)
	if a.err != nil {
		return a.err
	}
	AttentionBackward(g, d, pr, qv, s, at)
	return nil
}

func (*Backend) AttentionRows(out, q, k, v, seq, pos backend.Buf, rows int, at backend.Attention, seqStride int) error {
	if rows == 0 {
		return nil
	}
	var a args
	qw, kw := at.Heads*at.HeadDim, at.KVHeads*at.HeadDim
	if at.KVHeads <= 0 || at.Heads%at.KVHeads != 0 || at.HeadDim <= 0 {
		return fmt.Errorf("cpu: attention of %d heads over %d key/value heads of %d", at.Heads, at.KVHeads, at.HeadDim)
	}
	o, qv, kv, vv := a.f32("out", out, rows*qw), a.f32("q", q, rows*qw), a.f32("k", k, kw), a.f32("v", v, kw)
	sq, ps := a.i32("seq", seq, rows), a.i32("pos", pos, rows)
	if a.err != nil {
		return a.err
	}
	sp := make([]Span, rows)
	for r := range sp {
		s, p := int(sq[r]), int(ps[r])
		lo, hi := s*seqStride, s*seqStride+(p+1)*kw
		if s < 0 || p < 0 || hi > len(kv) || hi > len(vv) {
			return fmt.Errorf("cpu: attention row %d (sequence %d, position %d) outside the cache of %d values", r, s, p, len(kv))
		}
		sp[r] = Span{Row: r, N: 1, Pos: p, K: kv[lo:hi], V: vv[lo:hi]}
	}
	attentionRowsGEMM(o, qv, sp, at)
	return nil
}

func (*Backend) Logits(out, hidden, head backend.Buf, rows, dim, vocab int) error {
	if rows == 0 {
		return nil
	}
	var a args
	o, h, w := a.f32("out", out, rows*vocab), a.f32("hidden", hidden, rows*dim), a.weight("head", head, vocab*dim)
	if a.err != nil {
		return a.err
	}
	w.mulT(o, h, rows, dim, vocab)
	return nil
}

// logProbArgs checks the buffers of the log-prob ops and the targets' range.
func logProbArgs(a *args, logp, targets backend.Buf, rows, vocab int) ([]float32, []int32) {
	lp, t := a.f32("logp", logp, rows), a.i32("targets", targets, rows)
	if a.err == nil {
		for r, v := range t[:rows] {
			if int(v) >= vocab {
				a.fail("target %d (row %d) outside the vocabulary of %d", v, r, vocab)
				break
			}
		}
	}
	return lp, t
}

func (*Backend) LogProbForward(logp, entropy, logits, targets backend.Buf, rows, vocab int, invTemp float32) error {
	if rows == 0 {
		return nil
	}
	var a args
	lp, t := logProbArgs(&a, logp, targets, rows, vocab)
	e, l := a.optF32("entropy", entropy, rows), a.f32("logits", logits, rows*vocab)
	if a.err != nil {
		return a.err
	}
	LogProbForward(lp, e, l, t, rows, vocab, invTemp)
	return nil
}

func (*Backend) LogProbBackward(dlogits, dlogp, dentropy, logits, targets backend.Buf, rows, vocab int, invTemp float32) error {
	if rows == 0 {
		return nil
	}
	var a args
	dlp, t := logProbArgs(&a, dlogp, targets, rows, vocab)
	de := a.optF32("dentropy", dentropy, rows)
	dl, l := a.f32("dlogits", dlogits, rows*vocab), a.f32("logits", logits, rows*vocab)
	if a.err != nil {
		return a.err
	}
	LogProbBackward(dl, dlp, de, l, t, rows, vocab, invTemp)
	return nil
}

// HeadChunk is how many rows of logits the LM head ops form at a time: about 4M floats, so
// memory does not grow with the batch and a large vocabulary stays affordable, yet enough
// rows to amortise the GEMM's packing of the head.
func HeadChunk(vocab int) int { return min(1024, max(64, (4<<20)/max(vocab, 1))) }

func (b *Backend) logitsScratch(n int) []float32 {
	if cap(b.logits) < n {
		b.logits = make([]float32, n)
	}
	return b.logits[:n]
}

func (b *Backend) HeadLogProbs(logp, entropy, hidden, head, targets backend.Buf, rows, dim, vocab int, invT, softcap float32) error {
	if rows == 0 {
		return nil
	}
	var a args
	lp, t := logProbArgs(&a, logp, targets, rows, vocab)
	e, h, w := a.optF32("entropy", entropy, rows), a.f32("hidden", hidden, rows*dim), a.weight("head", head, vocab*dim)
	if a.err != nil {
		return a.err
	}
	chunk := HeadChunk(vocab)
	buf := b.logitsScratch(min(rows, chunk) * vocab)
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		w.mulT(buf, h[r0*dim:(r0+n)*dim], n, dim, vocab)
		if softcap > 0 {
			SoftcapForward(buf, buf, n*vocab, softcap)
		}
		var ev []float32
		if e != nil {
			ev = e[r0 : r0+n]
		}
		LogProbForward(lp[r0:r0+n], ev, buf, t[r0:r0+n], n, vocab, invT)
	}
	return nil
}

func (b *Backend) HeadLogProbsBackward(dhidden, hidden, head, dlogp, dentropy, targets backend.Buf, rows, dim, vocab int, invT, softcap float32) error {
	if rows == 0 {
		return nil
	}
	var a args
	dlp, t := logProbArgs(&a, dlogp, targets, rows, vocab)
	de := a.optF32("dentropy", dentropy, rows)
	dh, h, w := a.f32("dhidden", dhidden, rows*dim), a.f32("hidden", hidden, rows*dim), a.weight("head", head, vocab*dim)
	if a.err != nil {
		return a.err
	}
	chunk := HeadChunk(vocab)
	buf := b.logitsScratch(2 * min(rows, chunk) * vocab)
	half := len(buf) / 2
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		var dec []float32
		if de != nil {
			dec = de[r0 : r0+n]
		}
		if allZero(dlp[r0:r0+n]) && allZero(dec) {
			continue
		}
		logits, dl := buf[:n*vocab], buf[half:half+n*vocab]
		hc := h[r0*dim : (r0+n)*dim]
		w.mulT(logits, hc, n, dim, vocab)
		if softcap > 0 {
			SoftcapForward(logits, logits, n*vocab, softcap)
		}
		clear(dl)
		LogProbBackward(dl, dlp[r0:r0+n], dec, logits, t[r0:r0+n], n, vocab, invT)
		if softcap > 0 { // through the cap: the gradient of the raw logits
			uncap(dl, logits, softcap)
		}
		w.mulAcc(dh[r0*dim:(r0+n)*dim], dl, n, dim, vocab)
	}
	return nil
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}

func (b *Backend) Sample(logits backend.Buf, uniforms []float64, rows, vocab int, temperature float32, topK int, topP float32) ([]int32, []float32, error) {
	if rows == 0 {
		return nil, nil, nil
	}
	if vocab < 1 {
		return nil, nil, fmt.Errorf("cpu: sampling from a vocabulary of %d", vocab)
	}
	var a args
	l := a.f32("logits", logits, rows*vocab)
	if a.err != nil {
		return nil, nil, a.err
	}
	if len(uniforms) != rows {
		return nil, nil, fmt.Errorf("cpu: %d uniforms for %d rows", len(uniforms), rows)
	}
	tokens, logp := make([]int32, rows), make([]float32, rows)
	for r := 0; r < rows; r++ {
		tok, lp := b.sampler.sampleMinP(l[r*vocab:(r+1)*vocab], uniforms[r], temperature, topK, topP, 0)
		tokens[r], logp[r] = int32(tok), lp
	}
	return tokens, logp, nil
}

func (b *Backend) SampleInto(tokens, logp, logits, uniforms backend.Buf, rows, vocab int, temperature float32, topK int, topP float32, pen backend.Penalties) error {
	if rows == 0 {
		return nil
	}
	if vocab < 1 {
		return fmt.Errorf("cpu: sampling from a vocabulary of %d", vocab)
	}
	var a args
	t, lp := a.i32("tokens", tokens, rows), a.f32("logp", logp, rows)
	l := a.f32("logits", logits, rows*vocab)
	var seen []int32
	if pen.Penalised() || !pen.Seen.Nil() {
		seen = a.i32("seen", pen.Seen, rows*backend.SeenWords(vocab))
	}
	if a.err != nil {
		return a.err
	}
	if uniforms.DType() != backend.F64 || uniforms.Len() < rows || !uniforms.IsHost() {
		return fmt.Errorf("cpu: uniforms are %v, want %d host f64", uniforms, rows)
	}
	u := uniforms.F64()[:rows]
	w := backend.SeenWords(vocab)
	for r := 0; r < rows; r++ {
		raw := l[r*vocab : (r+1)*vocab]
		row := raw
		if pen.Penalised() {
			b.penalised = append(b.penalised[:0], raw...)
			row = b.penalised
			repetitionPenalty(row, seen[r*w:(r+1)*w], pen.Repetition)
		}
		tok, p := b.sampler.sampleMinP(row, u[r], temperature, topK, topP, pen.MinP)
		if pen.Penalised() { // the log-prob of the raw row
			invT := float32(1)
			if temperature != 0 {
				invT = 1 / temperature
			}
			mx, lse := logSumExp(raw, invT, true)
			p = float32(float64(raw[tok]*invT-mx) - lse)
		}
		t[r], lp[r] = int32(tok), p
		if seen != nil {
			seen[r*w+tok>>5] |= 1 << (tok & 31)
		}
	}
	return nil
}

func (*Backend) DigitProbs(out, logits, ids, values backend.Buf, rows, vocab int) error {
	if rows == 0 {
		return nil
	}
	var a args
	n := ids.Len()
	o, l := a.f32("out", out, rows*10), a.f32("logits", logits, rows*vocab)
	id, val := a.i32("ids", ids, n), a.i32("values", values, n)
	if a.err != nil {
		return a.err
	}
	for i := 0; i < n; i++ {
		if id[i] < 0 || int(id[i]) >= vocab || val[i] < 0 || val[i] > 9 {
			return fmt.Errorf("cpu: digit token %d (digit %d) outside the vocabulary of %d or the digits", id[i], val[i], vocab)
		}
	}
	DigitProbs(o, l, id[:n], val[:n], rows, vocab)
	return nil
}

func (*Backend) AdamW(params []backend.OptParam, lr, beta1, beta2, eps, weightDecay float64, step int) error {
	ps := make([]AdamWParam, len(params))
	for i, p := range params {
		var a args
		n := p.Data.Len()
		ps[i] = AdamWParam{Data: a.f32("data", p.Data, n), Grad: a.f32("grad", p.Grad, n), M: a.f32("m", p.M, n), V: a.f32("v", p.V, n)}
		if a.err != nil {
			return fmt.Errorf("AdamW parameter %d: %w", i, a.err)
		}
		ps[i].Data, ps[i].Grad, ps[i].M, ps[i].V = ps[i].Data[:n], ps[i].Grad[:n], ps[i].M[:n], ps[i].V[:n]
	}
	AdamW(ps, lr, beta1, beta2, eps, weightDecay, step)
	return nil
}

func (*Backend) GradNorm(grads []backend.Buf) (float64, error) {
	s := 0.0
	for i, g := range grads {
		var a args
		v := a.f32("gradient", g, g.Len())
		if a.err != nil {
			return 0, fmt.Errorf("gradient %d: %w", i, a.err)
		}
		for _, x := range v {
			s += float64(x) * float64(x)
		}
	}
	return math.Sqrt(s), nil
}

func (*Backend) ScaleAll(xs []backend.Buf, s float32) error {
	for i, x := range xs {
		var a args
		v := a.f32("tensor", x, x.Len())
		if a.err != nil {
			return fmt.Errorf("scale of tensor %d: %w", i, a.err)
		}
		if s == 0 {
			clear(v)
			continue
		}
		for j := range v {
			v[j] *= s
		}
	}
	return nil
}
