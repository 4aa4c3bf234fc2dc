package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/optim"
	"rlhfstation/quant"
)

func testBackend(t *testing.T) *Backend { return &Backend{d: device(t)} }

func upBF16(t testing.TB, b *Backend, x []float32) (Buf, []float32) {
	t.Helper()
	buf, err := b.Alloc(BF16, len(x))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(buf, x); err != nil {
		t.Fatal(err)
	}
	r := make([]float32, len(x))
	for i, v := range x {
		r[i] = bf16Round(v)
	}
	return buf, r
}

func up[T any](t testing.TB, b *Backend, dt DType, x []T) Buf {
	t.Helper()
	buf, err := b.Alloc(dt, len(x))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Upload(buf, any(x)); err != nil {
		t.Fatal(err)
	}
	return buf
}

func down(t testing.TB, b *Backend, x Buf) []float32 {
	t.Helper()
	h := make([]float32, x.Len())
	if err := b.Download(h, x); err != nil {
		t.Fatal(err)
	}
	return h
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBackendQ4: the 4-bit products by both routes (fused for ≤16 rows, dequantize + cuBLAS
// above) and the input gradient, against the CPU on the dequantized weight.
func TestBackendQ4(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(31, 32))
	out, in := 70, 96
	w, err := quant.Quantize(randn(rng, out*in, 0.05), out, in, "float32", quant.Default())
	must(t, err)
	q, err := b.UploadQ4(w)
	must(t, err)
	defer b.FreeQ4(q)
	dense := make([]float32, out*in)
	w.Dequantize(dense)
	for _, rows := range []int{3, 16, 40} {
		x, xr := upBF16(t, b, randn(rng, rows*in, 1))
		y, _ := b.Alloc(BF16, rows*out)
		must(t, b.Q4MulT(y, x, q, rows))
		want := make([]float32, rows*out)
		cpu.MatmulForward(want, xr, dense, nil, rows, in, out)
		closeTo(t, "Q4MulT", down(t, b, y), want, 3e-3, 1/64.)

		dy, dyr := upBF16(t, b, randn(rng, rows*out, 1))
		dx0 := randn(rng, rows*in, 0.1)
		dx, dxr := upBF16(t, b, dx0)
		must(t, b.Q4MulAcc(dx, dy, q, rows))
		cpu.MatmulBackward(dxr, nil, nil, dyr, nil, dense, rows, in, out)
		closeTo(t, "Q4MulAcc", down(t, b, dx), dxr, 3e-2, 1/32.)
	}
}

// TestBackendGEMMMixed: a bf16 activation times a float32 (LoRA) weight, into float32 and bf16.
func TestBackendGEMMMixed(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(33, 34))
	m, n, k := 11, 16, 40
	x, xr := upBF16(t, b, randn(rng, m*k, 1))
	a := randn(rng, n*k, 0.2)
	ab := up(t, b, F32, a)
	ar := make([]float32, len(a))
	for i, v := range a {
		ar[i] = bf16Round(v)
	}
	c, _ := b.Alloc(F32, m*n)
	b.Zero(c)
	must(t, b.GEMM(false, true, m, n, k, 2, x, k, ab, k, 0, c, n))
	want := make([]float32, m*n)
	refGEMM(false, true, m, n, k, 2, xr, k, ar, k, 0, want, n)
	closeTo(t, "bf16 × f32 → f32", down(t, b, c), want, 1e-4, 1e-4)
	if err := b.GEMM(false, true, m, n, k, 1, x, k-1, ab, k, 0, c, n); err == nil {
		t.Error("a leading dimension below the columns was accepted")
	}
}

// TestBackendHead: log-probs and entropies through the chunked LM head, and the backward
// into the hidden states, against the CPU.
func TestBackendHead(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(35, 36))
	rows, dim, vocab := 9, 24, 301
	h, hr := upBF16(t, b, randn(rng, rows*dim, 1))
	head, headr := upBF16(t, b, randn(rng, vocab*dim, 0.3))
	targets := []int32{1, 300, -1, 5, 7, 100, 0, 299, 42}
	tg := up(t, b, I32, targets)
	lp, _ := b.Alloc(F32, rows)
	ent, _ := b.Alloc(F32, rows)
	invT := float32(1 / 0.9)
	must(t, b.HeadLogProbs(lp, ent, h, head, tg, rows, dim, vocab, invT, 0))
	logits := make([]float32, rows*vocab)
	cpu.MatmulForward(logits, hr, headr, nil, rows, dim, vocab)
	wl, we := make([]float32, rows), make([]float32, rows)
	cpu.LogProbForward(wl, we, logits, targets, rows, vocab, invT)
	closeTo(t, "head log-probs", down(t, b, lp), wl, 2e-3, 1e-3)
	closeTo(t, "head entropy", down(t, b, ent), we, 2e-3, 1e-3)

	dlogp := randn(rng, rows, 1)
	dl := up(t, b, F32, dlogp)
	dh, dhr := upBF16(t, b, randn(rng, rows*dim, 0.1))
	must(t, b.HeadLogProbsBackward(dh, h, head, dl, Buf{}, tg, rows, dim, vocab, invT, 0))
	dlogits := make([]float32, rows*vocab)
	cpu.LogProbBackward(dlogits, dlogp, nil, logits, targets, rows, vocab, invT)
	cpu.MatmulBackward(dhr, nil, nil, dlogits, nil, headr, rows, dim, vocab)
	closeTo(t, "head backward", down(t, b, dh), dhr, 2e-2, 1/32.)

	// greedy sampling from the same logits
	lb, _ := b.Alloc(F32, rows*vocab)
	must(t, b.Logits(lb, h, head, rows, dim, vocab))
	tok, lps, err := b.Sample(lb, make([]float64, rows), rows, vocab, 0, 0, 0)
	must(t, err)
	for r := 0; r < rows; r++ {
		row := logits[r*vocab : (r+1)*vocab]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		// the bf16 products may reorder near-equal logits: the device's choice must be as likely
		if d := row[best] - row[tok[r]]; d > 1e-2 {
			t.Errorf("row %d: greedy token %d (logit %v), best %d (%v)", r, tok[r], row[tok[r]], best, row[best])
		}
		_ = lps
	}
}

// TestBackendAttentionMixed: one call with a long span (cuBLAS path) and short spans (row
// kernel) reading keys from a shared cache buffer, against the CPU.
func TestBackendAttentionMixed(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(37, 38))
	a := Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: float32(1 / math.Sqrt(8))}
	ca := cpu.Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: a.Scale}
	qw, kw := 32, 16
	capacity := 20
	cache, cacher := upBF16(t, b, randn(rng, 3*capacity*kw, 1))
	vcache, vcacher := upBF16(t, b, randn(rng, 3*capacity*kw, 1))
	runs := [][3]int{{0, 1, 7}, {1, 12, 0}, {2, 1, 19}} // (slot, n, pos)
	rows := 14
	q, qr := upBF16(t, b, randn(rng, rows*qw, 1))
	var spans []Span
	var cs []cpu.Span
	row := 0
	for _, r := range runs {
		slot, n, pos := r[0], r[1], r[2]
		L := (pos + n) * kw
		spans = append(spans, Span{Row: row, N: n, Pos: pos, K: cache.Slice(slot*capacity*kw, L), V: vcache.Slice(slot*capacity*kw, L)})
		cs = append(cs, cpu.Span{Row: row, N: n, Pos: pos, K: cacher[slot*capacity*kw : slot*capacity*kw+L], V: vcacher[slot*capacity*kw : slot*capacity*kw+L]})
		row += n
	}
	out, _ := b.Alloc(BF16, rows*qw)
	must(t, b.AttentionForward(out, Buf{}, q, spans, a))
	want := make([]float32, rows*qw)
	cpu.AttentionForward(want, nil, qr, cs, ca)
	closeTo(t, "attention, mixed spans", down(t, b, out), want, 2e-2, 1/32.)

	// KV-cache append by row copies, then the gradient norm and AdamW
	src, srcr := upBF16(t, b, randn(rng, 2*kw, 1))
	must(t, b.CopyRows(cache, []int64{int64(0*capacity + 8), int64(2*capacity + 0)}, kw, src, nil, kw, 2, kw))
	got := down(t, b, cache)
	closeTo(t, "appended row", got[8*kw:9*kw], srcr[:kw], 0, 0)
	closeTo(t, "appended row 2", got[2*capacity*kw:2*capacity*kw+kw], srcr[kw:], 0, 0)
	closeTo(t, "untouched row", got[9*kw:10*kw], cacher[9*kw:10*kw], 0, 0)
}

// TestFreeKeepsQueueOrder: a buffer freed by the caller must not become scratch for work
// queued before the free (an op's o.tmp) while work queued before the free still reads it.
// The owner is held while the caller queues, so the interleaving is certain.
func TestFreeKeepsQueueOrder(t *testing.T) {
	b := testBackend(t)
	x := up(t, b, F32, []float32{1, 2, 3, 4})
	y, _ := b.Alloc(F32, 4)
	hold := make(chan struct{})
	b.d.enqueue(func(o *owner) error { <-hold; return nil })
	// queued first: an op that takes scratch of x's size class and fills it
	b.d.enqueue(func(o *owner) error {
		p, err := o.tmp(16)
		if err != nil {
			return err
		}
		defer o.done(p)
		return o.memset(p, 0xAB, 16)
	})
	must(t, b.Copy(y, x)) // queued second: reads x
	must(t, b.Free(x))    // the caller is done with x
	close(hold)
	got := down(t, b, y)
	if got[0] != 1 || got[3] != 4 {
		t.Fatalf("copy of a freed buffer read %v: the buffer was handed out as scratch before its last reader ran", got)
	}
}

// TestBackendOptimizer: AdamW, the gradient norm and clipping over many tensors in one launch
// each, against engine/optim.
func TestBackendOptimizer(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(61, 62))
	var host []*optim.Param
	type hostParam struct{ data, grad, m, v []float32 }
	var hp []hostParam
	var dev []OptParam
	var grads []Buf
	for _, n := range []int{1, 17, 4096, 333, 70000} {
		p := hostParam{randn(rng, n, 1), randn(rng, n, 0.1), randn(rng, n, 0.01), make([]float32, n)}
		for i := range p.v {
			p.v[i] = float32(rng.Float64() * 1e-3)
		}
		op := OptParam{Data: up(t, b, F32, p.data), Grad: up(t, b, F32, p.grad), M: up(t, b, F32, p.m), V: up(t, b, F32, p.v)}
		host = append(host, &optim.Param{Data: backend.HostF32(p.data), Grad: backend.HostF32(p.grad), M: backend.HostF32(p.m), V: backend.HostF32(p.v)})
		hp, dev, grads = append(hp, p), append(dev, op), append(grads, op.Grad)
	}
	ref := cpu.New()
	norm, err := b.GradNorm(grads)
	must(t, err)
	want, err := optim.GradNorm(ref, host)
	must(t, err)
	if math.Abs(norm-want) > 1e-5*want {
		t.Errorf("gradient norm %v, want %v", norm, want)
	}
	must(t, b.ScaleAll(grads, 0.5))
	for _, p := range hp {
		for i := range p.grad {
			p.grad[i] *= 0.5
		}
	}
	opt, err := optim.NewAdamW(ref, host, 0.9, 0.999, 1e-8, 0.01)
	must(t, err)
	opt.Step = 2
	must(t, b.AdamW(dev, 1e-3, 0.9, 0.999, 1e-8, 0.01, 3))
	must(t, opt.Update(1e-3))
	for i, p := range hp {
		closeTo(t, "adamw param", down(t, b, dev[i].Data), p.data, 1e-6, 1e-5)
		closeTo(t, "adamw m", down(t, b, dev[i].M), p.m, 1e-9, 1e-5)
		closeTo(t, "adamw v", down(t, b, dev[i].V), p.v, 1e-12, 1e-5)
	}
}
