package cuda

// attnShape is causal grouped-query attention's geometry (the CPU backend's Attention).
type attnShape struct {
	heads, kvHeads, hd int
	scale              float32
	window             int
	softcap            float32 // scores capped to softcap·tanh(s/softcap) when positive
}

func (a attnShape) qw() int    { return a.heads * a.hd }
func (a attnShape) kw() int    { return a.kvHeads * a.hd }
func (a attnShape) group() int { return a.heads / a.kvHeads }

// span is a run of query rows of one sequence: rows [row, row+n) of q and out at positions
// pos, pos+1, …, with the sequence's keys and values from position 0 at k and v (rows of
// ldk values, a KV-cache slot or the pass's own k and v), and their gradients in backward.
type span struct {
	row, n, pos int
	k, v        devptr[bf16]
	ldk         int
	dk, dv      devptr[bf16]
}

// scoreBudget bounds the float32 scores one product holds (heads × query rows × keys):
// longer spans are done a chunk of query rows at a time.
const scoreBudget = 64 << 20

func (a attnShape) chunkRows(n, L int) int {
	per := 4 * a.heads * L
	return max(1, min(n, scoreBudget/per))
}

func bf16At(p devptr[bf16], elems int) devptr[bf16]      { return p + devptr[bf16](2*elems) }
func f32At(p devptr[float32], elems int) devptr[float32] { return p + devptr[float32](4*elems) }

// kvHeadsView gives keys (or values) with one head per query head: the span's own when there
// is no grouping, else an expanded copy in scratch (rows of qw values; free it after use).
func (o *owner) kvHeadsView(src devptr[bf16], lds, L int, a attnShape) (devptr[bf16], int, uintptr, error) {
	if a.group() == 1 {
		return src, lds, 0, nil
	}
	p, err := o.tmp(2 * L * a.qw())
	if err != nil {
		return 0, 0, 0, err
	}
	d := dims{grid: [3]uint32{uint32(min(L, 1<<30)), uint32(a.heads), 1}, block: [3]uint32{uint32(ceilDiv(a.hd, 32) * 32), 1, 1}}
	if err := o.attnExpandKv(d, devptr[bf16](p), src, int32(lds), int32(L), int32(a.heads), int32(a.kvHeads), int32(a.hd)); err != nil {
		o.done(p)
		return 0, 0, 0, err
	}
	return devptr[bf16](p), a.qw(), p, nil
}

// attentionForward sets out for every span. probs, when not 0, receives each span's
// probabilities for the backward (span after span, head-major, heads × n × (pos+n) bf16, as
// the CPU lays them out); without it, spans shorter than 8 rows take the row kernel.
func (o *owner) attentionForward(out, probs, q devptr[bf16], spans []span, a attnShape) error {
	off := 0
	for _, s := range spans {
		if s.n == 0 {
			continue
		}
		L := s.pos + s.n
		if probs == 0 && s.n < 8 {
			continue // the row kernel below
		}
		var sp devptr[bf16]
		if probs != 0 {
			sp = bf16At(probs, off)
			off += a.heads * s.n * L
		}
		if err := o.attentionSpan(out, sp, q, s, a); err != nil {
			return err
		}
	}
	return nil
}

// attentionSpan computes one span through cuBLAS: scores = scale·Q·Kᵀ (float32 from bf16
// operands), the masked softmax in place (float32), out = P·V in float32 (V widened), rounded
// to bf16 once; a chunk of query rows at a time. probs (when not 0) receives the
// probabilities in bf16, heads × n × L, zeros where masked.
func (o *owner) attentionSpan(out, probs, q devptr[bf16], s span, a attnShape) error {
	L := s.pos + s.n
	qw := a.qw()
	ke, ldk, kbuf, err := o.kvHeadsView(s.k, s.ldk, L, a)
	if err != nil {
		return err
	}
	defer o.done(kbuf)
	v32, err := o.tmp(4 * L * qw)
	if err != nil {
		return err
	}
	defer o.done(v32)
	ed := dims{grid: [3]uint32{uint32(min(L, 1<<30)), uint32(a.heads), 1}, block: [3]uint32{uint32(ceilDiv(a.hd, 32) * 32), 1, 1}}
	if err := o.attnExpandKvF32(ed, devptr[float32](v32), s.v, int32(s.ldk), int32(L), int32(a.heads), int32(a.kvHeads), int32(a.hd)); err != nil {
		return err
	}
	chunk := a.chunkRows(s.n, L)
	sc, err := o.tmp(4 * a.heads * chunk * L)
	if err != nil {
		return err
	}
	defer o.done(sc)
	o32, err := o.tmp(4 * chunk * qw)
	if err != nil {
		return err
	}
	defer o.done(o32)
	for i0 := 0; i0 < s.n; i0 += chunk {
		n := min(chunk, s.n-i0)
		Lc := s.pos + i0 + n // keys this chunk's last row sees
		if err := o.gemm(&gemmArgs{transB: true, m: n, n: Lc, k: a.hd, alpha: a.scale,
			a: uintptr(bf16At(q, (s.row+i0)*qw)), aType: dtBF16, lda: qw, strideA: int64(a.hd),
			b: uintptr(ke), bType: dtBF16, ldb: ldk, strideB: int64(a.hd),
			c: sc, cType: dtF32, ldc: Lc, strideC: int64(n * Lc), batch: a.heads}); err != nil {
			return err
		}
		if err := o.softmaxCausal(devptr[float32](sc), a.heads, n, Lc, s.pos+i0, a.window, a.softcap); err != nil {
			return err
		}
		if out != 0 {
			if err := o.gemm(&gemmArgs{m: n, n: a.hd, k: Lc, alpha: 1,
				a: sc, aType: dtF32, lda: Lc, strideA: int64(n * Lc),
				b: v32, bType: dtF32, ldb: qw, strideB: int64(a.hd),
				c: o32, cType: dtF32, ldc: qw, strideC: int64(a.hd), batch: a.heads}); err != nil {
				return err
			}
			if err := o.castF32ToBF16(bf16At(out, (s.row+i0)*qw), devptr[float32](o32), n*qw); err != nil {
				return err
			}
		}
		if probs != 0 {
			// into the span's layout heads × n × L: rows of L, the chunk's Lc ≤ L columns
			for h := 0; h < a.heads; h++ {
				dst := bf16At(probs, (h*s.n+i0)*L)
				if Lc < L {
					if err := o.memset(uintptr(dst), 0, 2*n*L); err != nil {
						return err
					}
				}
				if err := o.cast2d(dst, L, f32At(devptr[float32](sc), h*n*Lc), Lc, n, Lc); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// attentionBackward accumulates dq and each span's dk and dv from dout, given the forward's
// probabilities (0: recomputed here).
func (o *owner) attentionBackward(dq, dout, probs, q devptr[bf16], spans []span, a attnShape) error {
	off := 0
	for _, s := range spans {
		if s.n == 0 {
			continue
		}
		L := s.pos + s.n
		var sp devptr[bf16]
		if probs != 0 {
			sp = bf16At(probs, off)
			off += a.heads * s.n * L
		}
		if err := o.attentionSpanBackward(dq, dout, sp, q, s, a); err != nil {
			return err
		}
	}
	return nil
}

// attentionSpanBackward: the scores are recomputed (one more product per head) and the
// softmax's backward runs from them in float32; the stored probabilities are not read.
func (o *owner) attentionSpanBackward(dq, dout, _, q devptr[bf16], s span, a attnShape) error {
	L := s.pos + s.n
	qw := a.qw()
	ke, ldk, kbuf, err := o.kvHeadsView(s.k, s.ldk, L, a)
	if err != nil {
		return err
	}
	defer o.done(kbuf)
	ve, _, vbuf, err := o.kvHeadsView(s.v, s.ldk, L, a)
	if err != nil {
		return err
	}
	defer o.done(vbuf)
	// gradients of the expanded keys and values, summed into dk, dv at the end
	dke, dve, ldd := s.dk, s.dv, s.ldk
	var dkbuf, dvbuf uintptr
	beta := float32(1)
	if a.group() > 1 {
		if dkbuf, err = o.tmp(2 * L * qw); err != nil {
			return err
		}
		defer o.done(dkbuf)
		if dvbuf, err = o.tmp(2 * L * qw); err != nil {
			return err
		}
		defer o.done(dvbuf)
		dke, dve, ldd, beta = devptr[bf16](dkbuf), devptr[bf16](dvbuf), qw, 0
	}
	nL := int64(s.n * L)
	sc, err := o.tmp(4 * a.heads * s.n * L)
	if err != nil {
		return err
	}
	defer o.done(sc)
	dp, err := o.tmp(4 * a.heads * s.n * L)
	if err != nil {
		return err
	}
	defer o.done(dp)
	ds, err := o.tmp(2 * a.heads * s.n * L)
	if err != nil {
		return err
	}
	defer o.done(ds)
	pr, err := o.tmp(2 * a.heads * s.n * L)
	if err != nil {
		return err
	}
	defer o.done(pr)
	qs, dos, dqs := bf16At(q, s.row*qw), bf16At(dout, s.row*qw), bf16At(dq, s.row*qw)
	steps := []gemmArgs{
		// S = scale·Q·Kᵀ
		{transB: true, m: s.n, n: L, k: a.hd, alpha: a.scale, a: uintptr(qs), aType: dtBF16, lda: qw, strideA: int64(a.hd),
			b: uintptr(ke), bType: dtBF16, ldb: ldk, strideB: int64(a.hd), c: sc, cType: dtF32, ldc: L, strideC: nL},
		// dP = dO·Vᵀ
		{transB: true, m: s.n, n: L, k: a.hd, alpha: 1, a: uintptr(dos), aType: dtBF16, lda: qw, strideA: int64(a.hd),
			b: uintptr(ve), bType: dtBF16, ldb: ldk, strideB: int64(a.hd), c: dp, cType: dtF32, ldc: L, strideC: nL},
	}
	for i := range steps {
		steps[i].batch = a.heads
		if err := o.gemm(&steps[i]); err != nil {
			return err
		}
	}
	if err := o.attnSoftmaxBackwardScores(warpRows(a.heads*s.n), devptr[bf16](ds), devptr[bf16](pr), devptr[float32](sc), devptr[float32](dp),
		int32(a.heads), int32(s.n), int32(L), int32(s.pos), int32(a.window), a.softcap); err != nil {
		return err
	}
	steps = []gemmArgs{
		// dV += Pᵀ·dO
		{transA: true, m: L, n: a.hd, k: s.n, alpha: 1, beta: beta, a: pr, aType: dtBF16, lda: L, strideA: nL,
			b: uintptr(dos), bType: dtBF16, ldb: qw, strideB: int64(a.hd), c: uintptr(dve), cType: dtBF16, ldc: ldd, strideC: int64(a.hd)},
		// dQ += scale·dS·K
		{m: s.n, n: a.hd, k: L, alpha: a.scale, beta: 1, a: ds, aType: dtBF16, lda: L, strideA: nL,
			b: uintptr(ke), bType: dtBF16, ldb: ldk, strideB: int64(a.hd), c: uintptr(dqs), cType: dtBF16, ldc: qw, strideC: int64(a.hd)},
		// dK += scale·dSᵀ·Q
		{transA: true, m: L, n: a.hd, k: s.n, alpha: a.scale, beta: beta, a: ds, aType: dtBF16, lda: L, strideA: nL,
			b: uintptr(qs), bType: dtBF16, ldb: qw, strideB: int64(a.hd), c: uintptr(dke), cType: dtBF16, ldc: ldd, strideC: int64(a.hd)},
	}
	for i := range steps {
		steps[i].batch = a.heads
		if err := o.gemm(&steps[i]); err != nil {
			return err
		}
	}
	if a.group() > 1 {
		d := dims{grid: [3]uint32{uint32(min(L, 1<<30)), uint32(a.kvHeads), 1}, block: [3]uint32{uint32(ceilDiv(a.hd, 32) * 32), 1, 1}}
		if err := o.attnReduceKv(d, s.dk, int32(s.ldk), dke, int32(L), int32(a.heads), int32(a.kvHeads), int32(a.hd)); err != nil {
			return err
		}
		if err := o.attnReduceKv(d, s.dv, int32(s.ldk), dve, int32(L), int32(a.heads), int32(a.kvHeads), int32(a.hd)); err != nil {
			return err
		}
	}
	return nil
}
