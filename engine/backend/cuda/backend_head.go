package cuda

import (
	"fmt"
	"math"
)

// Attention describes causal grouped-query attention (as the CPU backend's Attention).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32
	Window                  int
}

func (a Attention) shape() attnShape {
	return attnShape{heads: a.Heads, kvHeads: a.KVHeads, hd: a.HeadDim, scale: a.Scale, window: a.Window}
}

// Span is a run of query rows of one sequence (as the CPU backend's Span): rows
// [Row, Row+N) at positions Pos…, its keys and values from position 0 in K and V (rows of
// KVHeads·HeadDim), their gradients in DK and DV for the backward.
type Span struct {
	Row, N, Pos int
	K, V        Buf
	DK, DV      Buf
}

// ProbSize is the number of bf16 values AttentionForward stores for the backward.
func (a Attention) ProbSize(spans []Span) int {
	n := 0
	for _, s := range spans {
		n += a.Heads * s.N * (s.Pos + s.N)
	}
	return n
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
		out[i] = span{row: s.Row, n: s.N, pos: s.Pos, k: s.K.bf(), v: s.V.bf(), ldk: kw, dk: s.DK.bf(), dv: s.DV.bf()}
	}
	return out, nil
}

// AttentionForward sets out [rows, Heads·HeadDim] for every span. probs (bf16, ProbSize
// values), when given, keeps the probabilities for the backward; without it, spans of fewer
// than 8 rows (decode steps) take the row kernel.
func (b *Backend) AttentionForward(out, probs, q Buf, spans []Span, a Attention) error {
	sp, err := b.spans(spans, a, false)
	if err != nil {
		return err
	}
	rows := 0
	for _, s := range spans {
		rows = max(rows, s.Row+s.N)
	}
	qw := a.Heads * a.HeadDim
	if err := firstErr(need("out", out, BF16, rows*qw), need("q", q, BF16, rows*qw), opt("probs", probs, BF16, a.ProbSize(spans))); err != nil {
		return err
	}
	// The row kernel's metadata: per row, its sequence's key and value addresses and its position.
	var kv []uint64
	var pos []int32
	var first []int // the first row of each run of short spans, for the launches
	if probs.ptr == 0 {
		for _, s := range spans {
			if s.N == 0 || s.N >= 8 {
				continue
			}
			first = append(first, s.Row)
			for i := 0; i < s.N; i++ {
				kv = append(kv, uint64(s.K.ptr), uint64(s.V.ptr))
				pos = append(pos, int32(s.Pos+i))
			}
		}
	}
	var kvb, posb Buf
	if len(pos) > 0 {
		if kvb, err = b.Alloc(F64, len(kv)); err != nil { // 8-byte slots
			return err
		}
		if posb, err = b.Alloc(I32, len(pos)); err != nil {
			return err
		}
		if err := b.d.upload(kvb.ptr, bytesOf(kv)); err != nil {
			return err
		}
		if err := b.Upload(posb, pos); err != nil {
			return err
		}
	}
	as := a.shape()
	b.d.enqueue(func(o *owner) error {
		defer o.done(kvb.ptr)
		defer o.done(posb.ptr)
		if err := o.attentionForward(out.bf(), probs.bf(), q.bf(), sp, as); err != nil {
			return err
		}
		// short spans: the row kernel, one launch per contiguous block of rows
		k := 0
		for _, s := range spans {
			if probs.ptr != 0 || s.N == 0 || s.N >= 8 {
				continue
			}
			kvp := devptr[uint64](kvb.ptr + uintptr(16*k))
			pp := devptr[int32](posb.ptr + uintptr(4*k))
			if err := o.attentionRowsOf(bf16At(out.bf(), s.Row*qw), bf16At(q.bf(), s.Row*qw), kvp, pp, as.kw(), s.N, as); err != nil {
				return err
			}
			k += s.N
		}
		return nil
	})
	return nil
}

// AttentionRows computes attention for rows one at a time over keys already in memory (a
// decode step over the KV cache): kv holds, per row, the device addresses of its sequence's
// key 0 and value 0 (two 8-byte values a row, as written by KVTable), pos its position; keys
// are rows of ldk values. Every input is on the device, so the step can be captured.
func (b *Backend) AttentionRows(out, q, kv, pos Buf, rows int, a Attention, ldk int) error {
	qw := a.Heads * a.HeadDim
	if a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 {
		return fmt.Errorf("cuda: attention of %d heads over %d key/value heads", a.Heads, a.KVHeads)
	}
	return b.queue(firstErr(need("out", out, BF16, rows*qw), need("q", q, BF16, rows*qw), need("kv", kv, F64, 2*rows), need("pos", pos, I32, rows)),
		func(o *owner) error {
			return o.attentionRowsOf(out.bf(), q.bf(), devptr[uint64](kv.ptr), pos.i32(), ldk, rows, a.shape())
		})
}

// KVTable is the host form of AttentionRows' kv: for each row, the addresses of its keys
// and values (views into the cache). Upload it into an F64 buffer of 2·rows values.
func KVTable(keys, values []Buf) []uint64 {
	t := make([]uint64, 0, 2*len(keys))
	for i := range keys {
		t = append(t, uint64(keys[i].ptr), uint64(values[i].ptr))
	}
	return t
}

// UploadRaw copies host words into a buffer of the same byte size (KVTable into F64).
func (b *Backend) UploadRaw(x Buf, words []uint64) error {
	if len(words)*8 != x.bytes() {
		return fmt.Errorf("cuda: %d words into a buffer of %d bytes", len(words), x.bytes())
	}
	return b.d.upload(x.ptr, bytesOf(words))
}

// AttentionBackward accumulates dq and every span's DK and DV, given the forward's stored
// probabilities (or none: recomputed).
func (b *Backend) AttentionBackward(dq, dout, probs, q Buf, spans []Span, a Attention) error {
	sp, err := b.spans(spans, a, true)
	if err != nil {
		return err
	}
	rows := 0
	for _, s := range spans {
		rows = max(rows, s.Row+s.N)
	}
	qw := a.Heads * a.HeadDim
	return b.queue(firstErr(need("dq", dq, BF16, rows*qw), need("dout", dout, BF16, rows*qw), need("q", q, BF16, rows*qw),
		opt("probs", probs, BF16, a.ProbSize(spans))),
		func(o *owner) error {
			return o.attentionBackward(dq.bf(), dout.bf(), probs.bf(), q.bf(), sp, a.shape())
		})
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
			return o.logprobs(logp.f32(), entropy.f32(), logits.f32(), targets.i32(), rows, vocab, invTemp)
		})
}

// LogProbBackward accumulates dlogits (bf16) += dlogp·invTemp·(onehot(target) − softmax).
func (b *Backend) LogProbBackward(dlogits, dlogp, logits, targets Buf, rows, vocab int, invTemp float32) error {
	return b.queue(firstErr(need("dlogits", dlogits, BF16, rows*vocab), need("dlogp", dlogp, F32, rows), need("logits", logits, F32, rows*vocab),
		need("targets", targets, I32, rows)),
		func(o *owner) error {
			return o.logprobsBack(dlogits.bf(), logits.f32(), dlogp.f32(), targets.i32(), rows, vocab, invTemp)
		})
}

// HeadLogProbs sets logp[r] = log softmax(hidden[r]·headᵀ·invT)[targets[r]] (0 where the
// target is negative) and, when entropy is given, the distribution's entropy; the float32
// logits exist a chunk of rows at a time only.
func (b *Backend) HeadLogProbs(logp, entropy, hidden, head, targets Buf, rows, dim, vocab int, invT float32) error {
	if rows == 0 {
		return nil
	}
	return b.queue(firstErr(need("logp", logp, F32, rows), opt("entropy", entropy, F32, rows), need("hidden", hidden, BF16, rows*dim),
		need("head", head, BF16, vocab*dim), need("targets", targets, I32, rows)),
		func(o *owner) error {
			chunk := headChunk(rows, vocab)
			lg, err := o.tmp(4 * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(lg)
			for r0 := 0; r0 < rows; r0 += chunk {
				n := min(chunk, rows-r0)
				if err := o.gemm(&gemmArgs{transB: true, m: n, n: vocab, k: dim, alpha: 1, a: uintptr(bf16At(hidden.bf(), r0*dim)),
					aType: dtBF16, lda: dim, b: head.ptr, bType: dtBF16, ldb: dim, c: lg, cType: dtF32, ldc: vocab}); err != nil {
					return err
				}
				var ent devptr[float32]
				if entropy.ptr != 0 {
					ent = f32At(entropy.f32(), r0)
				}
				if err := o.logprobs(f32At(logp.f32(), r0), ent, devptr[float32](lg), devptr[int32](targets.ptr+uintptr(4*r0)), n, vocab, invT); err != nil {
					return err
				}
			}
			return nil
		})
}

// HeadLogProbsBackward accumulates dhidden (float32 or bf16) += dlogits·head for dlogits the
// gradient of Σ dlogp[r]·logp[r] (the logits recomputed a chunk at a time; the head is frozen).
func (b *Backend) HeadLogProbsBackward(dhidden, hidden, head, dlogp, targets Buf, rows, dim, vocab int, invT float32) error {
	if rows == 0 {
		return nil
	}
	ct, _ := cublasType(dhidden.dt)
	return b.queue(firstErr(residual("dhidden", dhidden, rows*dim), need("hidden", hidden, BF16, rows*dim),
		need("head", head, BF16, vocab*dim), need("dlogp", dlogp, F32, rows), need("targets", targets, I32, rows)),
		func(o *owner) error {
			chunk := headChunk(rows, vocab)
			lg, err := o.tmp(4 * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(lg)
			dl, err := o.tmp(2 * chunk * vocab)
			if err != nil {
				return err
			}
			defer o.done(dl)
			for r0 := 0; r0 < rows; r0 += chunk {
				n := min(chunk, rows-r0)
				h := uintptr(bf16At(hidden.bf(), r0*dim))
				if err := o.gemm(&gemmArgs{transB: true, m: n, n: vocab, k: dim, alpha: 1, a: h, aType: dtBF16, lda: dim,
					b: head.ptr, bType: dtBF16, ldb: dim, c: lg, cType: dtF32, ldc: vocab}); err != nil {
					return err
				}
				if err := o.memset(dl, 0, 2*n*vocab); err != nil {
					return err
				}
				if err := o.logprobsBack(devptr[bf16](dl), devptr[float32](lg), f32At(dlogp.f32(), r0), devptr[int32](targets.ptr+uintptr(4*r0)), n, vocab, invT); err != nil {
					return err
				}
				if err := o.gemm(&gemmArgs{m: n, n: dim, k: vocab, alpha: 1, beta: 1, a: dl, aType: dtBF16, lda: vocab,
					b: head.ptr, bType: dtBF16, ldb: dim, c: dhidden.Slice(r0*dim, n*dim).ptr, cType: ct, ldc: dim}); err != nil {
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
	if err := b.SampleInto(tok, lp, logits, ub, rows, vocab, temperature, topK, topP); err != nil {
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
func (b *Backend) SampleInto(tokens, logp, logits, uniforms Buf, rows, vocab int, temperature float32, topK int, topP float32) error {
	greedy := temperature == 0
	invT := float32(1)
	if !greedy {
		invT = 1 / temperature
	}
	return b.queue(firstErr(need("tokens", tokens, I32, rows), need("logp", logp, F32, rows), need("logits", logits, F32, rows*vocab),
		need("uniforms", uniforms, F64, rows)),
		func(o *owner) error {
			return o.sample(tokens.i32(), logp.f32(), logits.f32(), uniforms.f64(), rows, vocab, invT, greedy, topK, topP)
		})
}

// DigitProbs sets out[r, d] (float32, rows×10) to the probability of digit d among the
// digit tokens ids (values[i] their digits) under softmax over those tokens only.
func (b *Backend) DigitProbs(out, logits, ids, values Buf, rows, vocab int) error {
	n := ids.n
	return b.queue(firstErr(need("out", out, F32, rows*10), need("logits", logits, F32, rows*vocab), need("ids", ids, I32, n),
		need("values", values, I32, n)),
		func(o *owner) error {
			return o.digits(out.f32(), logits.f32(), ids.i32(), values.i32(), n, rows, vocab)
		})
}

// OptParam is one trainable float32 tensor with its gradient and AdamW moments.
type OptParam struct{ Data, Grad, M, V Buf }

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
	return t, b.UploadRaw(t, words)
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
		n := p.Data.n
		if err := firstErr(need("data", p.Data, F32, n), need("grad", p.Grad, F32, n), need("m", p.M, F32, n), need("v", p.V, F32, n)); err != nil {
			return fmt.Errorf("AdamW parameter %d: %w", i, err)
		}
		words = append(words, uint64(p.Data.ptr), uint64(p.Grad.ptr), uint64(p.M.ptr), uint64(p.V.ptr), uint64(n))
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
		defer o.done(tab.ptr)
		return o.adamwMulti(d, devptr[uint64](tab.ptr), float32(beta1), float32(beta2), float32(lr/bc1), float32(math.Sqrt(bc2)), float32(eps), float32(1-lr*weightDecay))
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
		if g.dt != F32 {
			return 0, fmt.Errorf("cuda: gradient %d is %s", i, g.dt)
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
		defer o.done(tab.ptr)
		d := dims{grid: [3]uint32{uint32(gx), uint32(len(grads)), 1}, block: [3]uint32{threads, 1, 1}}
		if err := o.sumsqMulti(d, part.f32(), devptr[uint64](tab.ptr)); err != nil {
			return err
		}
		return o.sum(f32At(part.f32(), np), part.f32(), np)
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
		if x.dt != F32 {
			return fmt.Errorf("cuda: scale of tensor %d (%s)", i, x.dt)
		}
	}
	if len(xs) > maxGridY {
		return fmt.Errorf("cuda: scale of %d tensors (at most %d a call)", len(xs), maxGridY)
	}
	words, largest := b.pairs(xs)
	tab, err := b.table(words)
	if err != nil {
		return err
	}
	d := dims{grid: [3]uint32{uint32(b.multiBlocks(len(xs), largest)), uint32(len(xs)), 1}, block: [3]uint32{threads, 1, 1}}
	b.d.enqueue(func(o *owner) error {
		defer o.done(tab.ptr)
		return o.scaleMulti(d, devptr[uint64](tab.ptr), s)
	})
	return nil
}

func (b *Backend) pairs(xs []Buf) ([]uint64, int) {
	words := make([]uint64, 0, 2*len(xs))
	largest := 0
	for _, x := range xs {
		words = append(words, uint64(x.ptr), uint64(x.n))
		largest = max(largest, x.n)
	}
	return words, largest
}

// Scale multiplies x (float32) by s.
func (b *Backend) Scale(x Buf, s float32) error { return b.ScaleAll([]Buf{x}, s) }
