package cuda

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

func shapeOf(a Attention) attnShape {
	return attnShape{heads: a.Heads, kvHeads: a.KVHeads, hd: a.HeadDim, scale: a.Scale, window: a.Window, softcap: a.Softcap}
}

func (b *Backend) spans(spans []Span, a Attention, grads bool) ([]span, error) {
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || a.HeadDim <= 0 {
		return nil, fmt.Errorf("cuda: attention of %d heads over %d key/value heads of %d", a.Heads, a.KVHeads, a.HeadDim)
	}
	kw := a.KVHeads * a.HeadDim
	out := make([]span, len(spans))
	for i, s := range spans {
		L := (s.Pos + s.N) * kw
		if err := firstErr(need("K", s.K, BF16, L), need("V", s.V, BF16, L)); err != nil {
			return nil, fmt.Errorf("span %d: %w", i, err)
		}
		if grads && s.N > 0 {
			if err := firstErr(need("DK", s.DK, BF16, L), need("DV", s.DV, BF16, L)); err != nil {
				return nil, fmt.Errorf("span %d: %w", i, err)
			}
		}
		out[i] = span{row: s.Row, n: s.N, pos: s.Pos, k: bf(s.K), v: bf(s.V), ldk: kw, dk: bf(s.DK), dv: bf(s.DV)}
	}
	return out, nil
}

// spanRows is the rows the spans reach in q and out.
func spanRows(spans []Span) int {
	rows := 0
	for _, s := range spans {
		rows = max(rows, s.Row+s.N)
	}
	return rows
}

// AttentionForward sets out [rows, Heads·HeadDim] for every span. probs (bf16, ProbSize
// values), when given, keeps the probabilities for the backward; without it, spans of fewer
// than 8 rows (decode steps) take the row kernel. float32 operands go through bf16 copies.
func (b *Backend) AttentionForward(out, probs, q Buf, spans []Span, a Attention) error {
	rows, qw := spanRows(spans), a.Heads*a.HeadDim
	if err := firstErr(act("out", out, rows*qw), act("q", q, rows*qw), optAct("probs", probs, a.ProbSize(spans))); err != nil {
		return err
	}
	if anyF32(out, probs, q) || spansF32(spans, false) {
		return b.attentionForwardF32(out, probs, q, spans, a)
	}
	sp, err := b.spans(spans, a, false)
	if err != nil {
		return err
	}
	// The row kernel's positions: those of every row of the short spans, span after span.
	var pos []int32
	if probs.Nil() {
		for _, s := range spans {
			if s.N > 0 && s.N < 8 {
				for i := 0; i < s.N; i++ {
					pos = append(pos, int32(s.Pos+i))
				}
			}
		}
	}
	var posb Buf
	if len(pos) > 0 {
		if posb, err = b.Alloc(I32, len(pos)); err != nil {
			return err
		}
		if err := b.Upload(posb, pos); err != nil {
			return err
		}
	}
	as := shapeOf(a)
	b.d.enqueue(func(o *owner) error {
		defer o.done(posb.Addr())
		if err := o.attentionForward(bf(out), bf(probs), bf(q), sp, as); err != nil {
			return err
		}
		// short spans: the row kernel, one launch per span over its own keys
		k := 0
		for _, s := range spans {
			if !probs.Nil() || s.N == 0 || s.N >= 8 {
				continue
			}
			pp := devptr[int32](posb.Addr() + uintptr(4*k))
			o.hint = int64(s.N) * int64(2*s.Pos+s.N+1) / 2 // keys 0..pos of each row
			if err := o.attentionRows(bf16At(bf(out), s.Row*qw), bf16At(bf(q), s.Row*qw), bf(s.K), bf(s.V), 0, pp, 0, s.N, as, as.kw()); err != nil {
				return err
			}
			k += s.N
		}
		return nil
	})
	return nil
}

// AttentionRows is the decode step's attention with every input on the device (so the step
// can be captured): row r of q, at position pos[r] of sequence seq[r] (I32 both), attends to
// that sequence's keys up to its position, key j of sequence s at element
// s·seqStride + j·KVHeads·HeadDim of k (and of v).
func (b *Backend) AttentionRows(out, q, k, v, seq, pos Buf, rows int, a Attention, seqStride int) error {
	if rows == 0 {
		return nil
	}
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || a.HeadDim <= 0 {
		return fmt.Errorf("cuda: attention of %d heads over %d key/value heads of %d", a.Heads, a.KVHeads, a.HeadDim)
	}
	qw, kw := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	if err := firstErr(act("out", out, rows*qw), act("q", q, rows*qw), act("k", k, kw), act("v", v, kw),
		need("seq", seq, I32, rows), need("pos", pos, I32, rows)); err != nil {
		return err
	}
	if anyF32(out, q, k, v) {
		var t temps
		defer t.free(b)
		ob, qb, kb, vb := t.bf(b, out, false), t.bf(b, q, true), t.bf(b, k, true), t.bf(b, v, true)
		if t.err != nil {
			return t.err
		}
		if err := b.AttentionRows(ob, qb, kb, vb, seq, pos, rows, a, seqStride); err != nil {
			return err
		}
		return t.back(b, out, ob)
	}
	return b.queue(nil, func(o *owner) error {
		return o.attentionRows(bf(out), bf(q), bf(k), bf(v), i32(seq), i32(pos), int64(seqStride), rows, shapeOf(a), kw)
	})
}

// AttentionBackward accumulates dq and every span's DK and DV, given the forward's stored
// probabilities (or none: recomputed).
func (b *Backend) AttentionBackward(dq, dout, probs, q Buf, spans []Span, a Attention) error {
	rows, qw := spanRows(spans), a.Heads*a.HeadDim
	if err := firstErr(act("dq", dq, rows*qw), act("dout", dout, rows*qw), act("q", q, rows*qw), optAct("probs", probs, a.ProbSize(spans))); err != nil {
		return err
	}
	if anyF32(dq, dout, probs, q) || spansF32(spans, true) {
		return b.attentionBackwardF32(dq, dout, probs, q, spans, a)
	}
	sp, err := b.spans(spans, a, true)
	if err != nil {
		return err
	}
	return b.queue(nil, func(o *owner) error {
		return o.attentionBackward(bf(dq), bf(dout), bf(probs), bf(q), sp, shapeOf(a))
	})
}

// attentionForwardF32 runs the forward on bf16 copies of float32 operands.
func (b *Backend) attentionForwardF32(out, probs, q Buf, spans []Span, a Attention) error {
	var t temps
	defer t.free(b)
	ob, pb, qb := t.bf(b, out, false), t.bf(b, probs, false), t.bf(b, q, true)
	sp := make([]Span, len(spans))
	for i, s := range spans {
		sp[i] = s
		sp[i].K, sp[i].V = t.bf(b, s.K, true), t.bf(b, s.V, true)
	}
	if t.err != nil {
		return t.err
	}
	if err := b.AttentionForward(ob, pb, qb, sp, a); err != nil {
		return err
	}
	return firstErr(t.back(b, out, ob), t.back(b, probs, pb))
}

// attentionBackwardF32 runs the backward on bf16 copies, the gradients accumulated in
// zeroed bf16 copies and then added to the float32 ones.
func (b *Backend) attentionBackwardF32(dq, dout, probs, q Buf, spans []Span, a Attention) error {
	var t temps
	defer t.free(b)
	dqb, db, pb, qb := t.grad(b, dq), t.bf(b, dout, true), t.bf(b, probs, true), t.bf(b, q, true)
	sp := make([]Span, len(spans))
	for i, s := range spans {
		sp[i] = s
		sp[i].K, sp[i].V = t.bf(b, s.K, true), t.bf(b, s.V, true)
		sp[i].DK, sp[i].DV = t.grad(b, s.DK), t.grad(b, s.DV)
	}
	if t.err != nil {
		return t.err
	}
	if err := b.AttentionBackward(dqb, db, pb, qb, sp, a); err != nil {
		return err
	}
	err := t.acc(b, dq, dqb)
	for i, s := range spans {
		err = firstErr(err, t.acc(b, s.DK, sp[i].DK), t.acc(b, s.DV, sp[i].DV))
	}
	return err
}

// headChunk is how many rows of float32 logits the head forms at a time (about 64 MiB).
func headChunk(rows, vocab int) int { return max(1, min(rows, (16<<20)/max(1, vocab))) }

// LogProbForward sets logp[r] = log softmax(logits[r]·invTemp)[targets[r]] (0 where the
// target is negative) and, when entropy is given, the entropy of each row's distribution;
// logits float32 [rows, vocab].
func (b *Backend) LogProbForward(logp, entropy, logits, targets Buf, rows, vocab int, invTemp float32) error {
	return b.queue(firstErr(need("logp", logp, F32, rows), opt("entropy", entropy, F32, rows), need("logits", logits, F32, rows*vocab),
		need("targets", targets, I32, rows)),
		func(o *owner) error {
			return o.logprobs(f32(logp), f32(entropy), f32(logits), i32(targets), rows, vocab, invTemp)
		})
}

// LogProbBackward accumulates into dlogits (bf16 or float32) the gradient of
// Σ dlogp·logp + dentropy·H: dlogp·invTemp·(onehot(target) − p) − dentropy·invTemp·p⊙(log p + H)
// (dentropy optional).
func (b *Backend) LogProbBackward(dlogits, dlogp, dentropy, logits, targets Buf, rows, vocab int, invTemp float32) error {
	return b.queue(firstErr(act("dlogits", dlogits, rows*vocab), need("dlogp", dlogp, F32, rows), opt("dentropy", dentropy, F32, rows),
		need("logits", logits, F32, rows*vocab), need("targets", targets, I32, rows)),
		func(o *owner) error {
			return o.logprobsBack(dlogits, f32(logits), f32(dlogp), f32(dentropy), i32(targets), rows, vocab, invTemp)
		})
}

// HeadLogProbs sets logp[r] = log softmax(hidden[r]·headᵀ·invT)[targets[r]] (0 where the
// target is negative) and, when entropy is given, the distribution's entropy; the float32
// logits exist a chunk of rows at a time only. hidden and head are bf16 or float32.
func (b *Backend) HeadLogProbs(logp, entropy, hidden, head, targets Buf, rows, dim, vocab int, invT, softcap float32) error {
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(need("logp", logp, F32, rows), opt("entropy", entropy, F32, rows), act("hidden", hidden, rows*dim),
		act("head", head, vocab*dim), need("targets", targets, I32, rows)),
		func(o *owner) error {
			chunk := headChunk(rows, vocab)
			lg, err := o.tmp(4 * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(lg)
			for r0 := 0; r0 < rows; r0 += chunk {
				n := min(chunk, rows-r0)
				if err := o.logitsOf(lg, hidden.Slice(r0*dim, n*dim), head, n, dim, vocab); err != nil {
					return err
				}
				if err := o.softcap(devptr[float32](lg), n*vocab, softcap); err != nil {
					return err
				}
				var ent devptr[float32]
				if !entropy.Nil() {
					ent = f32At(f32(entropy), r0)
				}
				if err := o.logprobs(f32At(f32(logp), r0), ent, devptr[float32](lg), devptr[int32](targets.Addr()+uintptr(4*r0)), n, vocab, invT); err != nil {
					return err
				}
			}
			return nil
		})
}

// logitsOf sets lg[rows, vocab] (float32 scratch) = hidden·headᵀ, the operands of either type.
func (o *owner) logitsOf(lg uintptr, hidden, head Buf, rows, dim, vocab int) error {
	return o.gemmMixed(&gemmArgs{transB: true, m: rows, n: vocab, k: dim, alpha: 1, a: hidden.Addr(), aType: blasType(hidden), lda: dim,
		b: head.Addr(), bType: blasType(head), ldb: dim, c: lg, cType: dtF32, ldc: vocab, batch: 1}, rows*dim, vocab*dim)
}

// HeadLogProbsBackward accumulates dhidden (float32 or bf16) += dlogits·head for dlogits the
// gradient of Σ dlogp[r]·logp[r] + dentropy[r]·H[r] (dentropy optional; the logits recomputed
// a chunk at a time; the head is frozen).
func (b *Backend) HeadLogProbsBackward(dhidden, hidden, head, dlogp, dentropy, targets Buf, rows, dim, vocab int, invT, softcap float32) error {
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(act("dhidden", dhidden, rows*dim), act("hidden", hidden, rows*dim),
		act("head", head, vocab*dim), need("dlogp", dlogp, F32, rows), opt("dentropy", dentropy, F32, rows), need("targets", targets, I32, rows)),
		func(o *owner) error {
			chunk := headChunk(rows, vocab)
			lg, err := o.tmp(4 * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(lg)
			// the logits' gradient in the head's type: the product with the head runs in it
			dt := head.DType()
			dl, err := o.tmp(dt.Size() * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(dl)
			for r0 := 0; r0 < rows; r0 += chunk {
				n := min(chunk, rows-r0)
				if err := o.logitsOf(lg, hidden.Slice(r0*dim, n*dim), head, n, dim, vocab); err != nil {
					return err
				}
				if err := o.softcap(devptr[float32](lg), n*vocab, softcap); err != nil {
					return err
				}
				if err := o.memset(dl, 0, dt.Size()*n*vocab); err != nil {
					return err
				}
				dlb := backend.Device(dt, dl, n*vocab)
				var dent devptr[float32]
				if !dentropy.Nil() {
					dent = f32At(f32(dentropy), r0)
				}
				if err := o.logprobsBack(dlb, devptr[float32](lg), f32At(f32(dlogp), r0), dent, devptr[int32](targets.Addr()+uintptr(4*r0)), n, vocab, invT); err != nil {
					return err
				}
				if err := o.uncap(dlb, devptr[float32](lg), n*vocab, softcap); err != nil {
					return err
				}
				if err := o.gemmMixed(&gemmArgs{m: n, n: dim, k: vocab, alpha: 1, beta: 1, a: dl, aType: blasType(dlb), lda: vocab,
					b: head.Addr(), bType: blasType(head), ldb: dim, c: dhidden.Slice(r0*dim, n*dim).Addr(), cType: blasType(dhidden), ldc: dim},
					n*vocab, vocab*dim); err != nil {
					return err
				}
			}
			return nil
		})
}

// Logits sets out[rows, vocab] (float32) = hidden·headᵀ.
func (b *Backend) Logits(out, hidden, head Buf, rows, dim, vocab int) error {
	return b.GEMM(false, true, rows, vocab, dim, 1, hidden, dim, head, dim, 0, out, vocab)
}

// Sample draws one token per row of float32 logits (temperature 0: greedy; then top-k, then
// top-p) with the host's uniforms (one per row, from each sequence's own generator), and
// returns the tokens and their log-probabilities under softmax(logits/T) (T = 1 when greedy).
// It waits for the device: the tokens are a boundary.
func (b *Backend) Sample(logits Buf, uniforms []float64, rows, vocab int, temperature float32, topK int, topP float32) ([]int32, []float32, error) {
	if rows == 0 {
		return nil, nil, nil
	}
	if err := need("logits", logits, F32, rows*vocab); err != nil {
		return nil, nil, err
	}
	if len(uniforms) != rows {
		return nil, nil, fmt.Errorf("cuda: %d uniforms for %d rows", len(uniforms), rows)
	}
	tok, err := b.Alloc(I32, rows)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(tok)
	lp, err := b.Alloc(F32, rows)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(lp)
	ub, err := b.Alloc(F64, rows)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(ub)
	if err := b.Upload(ub, uniforms); err != nil {
		return nil, nil, err
	}
	if err := b.SampleInto(tok, lp, logits, ub, rows, vocab, temperature, topK, topP, backend.Penalties{}); err != nil {
		return nil, nil, err
	}
	tokens, logps := make([]int32, rows), make([]float32, rows)
	if err := b.Download(tokens, tok); err != nil {
		return nil, nil, err
	}
	return tokens, logps, b.Download(logps, lp)
}

// SampleInto is Sample leaving the tokens (I32) and log-probabilities (F32) on the device,
// with the uniforms (F64) already there: a captured decode step feeds its tokens to the next
// step's embedding without the host.
// min_p and the repetition penalty (pen) act inside the same kernel, which also marks each
// drawn token in pen.Seen.
func (b *Backend) SampleInto(tokens, logp, logits, uniforms Buf, rows, vocab int, temperature float32, topK int, topP float32, pen backend.Penalties) error {
	greedy := temperature == 0
	invT := float32(1)
	if !greedy {
		invT = 1 / temperature
	}
	seenErr := opt("seen", pen.Seen, I32, rows*backend.SeenWords(vocab))
	if pen.Penalised() {
		seenErr = need("seen", pen.Seen, I32, rows*backend.SeenWords(vocab))
	}
	return b.queue(firstErr(need("tokens", tokens, I32, rows), need("logp", logp, F32, rows), need("logits", logits, F32, rows*vocab),
		need("uniforms", uniforms, F64, rows), seenErr),
		func(o *owner) error {
			return o.sample(i32(tokens), f32(logp), f32(logits), f64(uniforms), rows, vocab, invT, greedy, topK, topP, pen)
		})
}

// DigitProbs sets out[r, d] (float32, rows×10) to the probability of digit d among the
// digit tokens ids (values[i] their digits) under softmax over those tokens only.
func (b *Backend) DigitProbs(out, logits, ids, values Buf, rows, vocab int) error {
	n := ids.Len()
	return b.queue(firstErr(need("out", out, F32, rows*10), need("logits", logits, F32, rows*vocab), need("ids", ids, I32, n),
		need("values", values, I32, n)),
		func(o *owner) error {
			return o.digits(f32(out), f32(logits), i32(ids), i32(values), n, rows, vocab)
		})
}

// multiBlocks is the blocks per tensor of the many-tensor kernels: enough to fill the device
// for one large tensor, few enough that small ones waste little.
func (b *Backend) multiBlocks(tensors int, largest int) int {
	return max(1, min(ceilDiv(largest, threads), max(1, 4*b.d.Info.SMs/max(1, tensors))+1, 1024))
}

// table uploads a device table of 8-byte words for the many-tensor kernels (freed on the
// owning thread after use).
func (b *Backend) table(words []uint64) (Buf, error) {
	t, err := b.Alloc(F64, len(words))
	if err != nil {
		return Buf{}, err
	}
	return t, b.d.upload(t.Addr(), bytesOf(words))
}

// AdamW applies one update (step counts from 1) to every parameter, as optim.AdamW, in one
// launch for all of them.
func (b *Backend) AdamW(params []OptParam, lr, beta1, beta2, eps, weightDecay float64, step int) error {
	if len(params) == 0 {
		return nil
	}
	t := float64(step)
	bc1, bc2 := 1-math.Pow(beta1, t), 1-math.Pow(beta2, t)
	words := make([]uint64, 0, 5*len(params))
	largest := 0
	for i, p := range params {
		n := p.Data.Len()
		if err := firstErr(need("data", p.Data, F32, n), need("grad", p.Grad, F32, n), need("m", p.M, F32, n), need("v", p.V, F32, n)); err != nil {
			return fmt.Errorf("AdamW parameter %d: %w", i, err)
		}
		words = append(words, uint64(p.Data.Addr()), uint64(p.Grad.Addr()), uint64(p.M.Addr()), uint64(p.V.Addr()), uint64(n))
		largest = max(largest, n)
	}
	if len(params) > maxGridY {
		return fmt.Errorf("cuda: AdamW over %d tensors (at most %d a call)", len(params), maxGridY)
	}
	tab, err := b.table(words)
	if err != nil {
		return err
	}
	d := dims{grid: [3]uint32{uint32(b.multiBlocks(len(params), largest)), uint32(len(params)), 1}, block: [3]uint32{threads, 1, 1}}
	b.d.enqueue(func(o *owner) error {
		defer o.done(tab.Addr())
		o.hint = tableElems(words, 5)
		return o.adamwMulti(d, devptr[uint64](tab.Addr()), float32(beta1), float32(beta2), float32(lr/bc1), float32(math.Sqrt(bc2)), float32(eps), float32(1-lr*weightDecay))
	})
	return nil
}

// GradNorm returns the global L2 norm of the float32 gradients (a boundary: it waits).
// The partial sums meet in a fixed order, so the same gradients give the same norm.
func (b *Backend) GradNorm(grads []Buf) (float64, error) {
	if len(grads) == 0 {
		return 0, nil
	}
	if len(grads) > maxGridY {
		return 0, fmt.Errorf("cuda: gradient norm over %d tensors (at most %d a call)", len(grads), maxGridY)
	}
	words, largest := b.pairs(grads)
	for i, g := range grads {
		if g.DType() != F32 {
			return 0, fmt.Errorf("cuda: gradient %d is %s", i, g.DType())
		}
	}
	tab, err := b.table(words)
	if err != nil {
		return 0, err
	}
	gx := b.multiBlocks(len(grads), largest)
	if gx*len(grads) > 1<<20 {
		gx = max(1, (1<<20)/len(grads))
	}
	np := gx * len(grads)
	part, err := b.Alloc(F32, np+1)
	if err != nil {
		return 0, err
	}
	defer b.Free(part)
	b.d.enqueue(func(o *owner) error {
		defer o.done(tab.Addr())
		d := dims{grid: [3]uint32{uint32(gx), uint32(len(grads)), 1}, block: [3]uint32{threads, 1, 1}}
		o.hint = tableElems(words, 2)
		if err := o.sumsqMulti(d, f32(part), devptr[uint64](tab.Addr())); err != nil {
			return err
		}
		return o.sum(f32At(f32(part), np), f32(part), np)
	})
	s := make([]float32, 1)
	if err := b.Download(s, part.Slice(np, 1)); err != nil {
		return 0, err
	}
	return math.Sqrt(float64(s[0])), nil
}

// ScaleAll multiplies every float32 tensor by s in one launch (gradient clipping).
func (b *Backend) ScaleAll(xs []Buf, s float32) error {
	if len(xs) == 0 {
		return nil
	}
	for i, x := range xs {
		if x.DType() != F32 {
			return fmt.Errorf("cuda: scale of tensor %d (%s)", i, x.DType())
		}
	}
	if len(xs) > maxGridY {
		return fmt.Errorf("cuda: scale of %d tensors (at most %d a call)", len(xs), maxGridY)
	}
	if len(xs) == 1 { // no table to upload (kernels/step.cu)
		x := xs[0]
		return b.queue(nil, func(o *owner) error { return o.scaleF32(o.flat(int64(x.Len())), f32(x), int64(x.Len()), s) })
	}
	words, largest := b.pairs(xs)
	tab, err := b.table(words)
	if err != nil {
		return err
	}
	d := dims{grid: [3]uint32{uint32(b.multiBlocks(len(xs), largest)), uint32(len(xs)), 1}, block: [3]uint32{threads, 1, 1}}
	b.d.enqueue(func(o *owner) error {
		defer o.done(tab.Addr())
		o.hint = tableElems(words, 2)
		return o.scaleMulti(d, devptr[uint64](tab.Addr()), s)
	})
	return nil
}

func (b *Backend) pairs(xs []Buf) ([]uint64, int) {
	words := make([]uint64, 0, 2*len(xs))
	largest := 0
	for _, x := range xs {
		words = append(words, uint64(x.Addr()), uint64(x.Len()))
		largest = max(largest, x.Len())
	}
	return words, largest
}

// tableElems sums the element counts of a multi-tensor table (the last word of each entry
// of stride words): the ledger's hint for its kernels.
func tableElems(words []uint64, stride int) int64 {
	var n int64
	for i := stride - 1; i < len(words); i += stride {
		n += int64(words[i])
	}
	return n
}

// Scale multiplies x (float32) by s.
func (b *Backend) Scale(x Buf, s float32) error { return b.ScaleAll([]Buf{x}, s) }

// softcap caps float32 logits in place (nothing when softcap is 0).
func (o *owner) softcap(x devptr[float32], n int, softcap float32) error {
	if softcap <= 0 {
		return nil
	}
	return o.softcapForwardF32(o.flat(int64(n)), x, x, int64(n), softcap)
}

// uncap turns the gradient d (float32 or bf16) of logits capped to y into that of the raw
// logits, in place (nothing when softcap is 0).
func (o *owner) uncap(d Buf, y devptr[float32], n int, softcap float32) error {
	if softcap <= 0 {
		return nil
	}
	if d.DType() == F32 {
		return o.softcapUncapF32(o.flat(int64(n)), f32(d), y, int64(n), softcap)
	}
	return o.softcapUncapBF16(o.flat(int64(n)), bf(d), y, int64(n), softcap)
}
