package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// BenchmarkDequantVsCopy: NF4 (double-quantized, blocks of 64) expanded to bf16, against a
// device-to-device copy of the bf16 output's size, both timed by GPU events in the same run.
// Bandwidth counts bytes read plus bytes written; the target is a ratio ≥ 0.8.
// Shapes of Qwen2.5-0.5B's MLP and of a 7B model's.
func BenchmarkDequantVsCopy(b *testing.B) {
	d := benchDevice(b)
	for _, sh := range []struct {
		name       string
		rows, cols int
	}{{"qwen0.5b-mlp-4864x896", 4864, 896}, {"7b-mlp-11008x4096", 11008, 4096}} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			n := sh.rows * sh.cols
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 0.02)
			}
			w, err := quant.Quantize(x, sh.rows, sh.cols, "float32", quant.Default())
			if err != nil {
				b.Fatal(err)
			}
			q := uploadQ4(b, d, w)
			out := allocT[bf16](b, d, n)
			copyDst := allocT[bf16](b, d, n)
			reps := 50
			b.ResetTimer()
			var tq, tc float64
			for i := 0; i < b.N; i++ {
				if tq, err = d.timeGPU(reps, func(o *owner) error { return o.dequant(out, q) }); err != nil {
					b.Fatal(err)
				}
				if tc, err = d.timeGPU(reps, func(o *owner) error { return o.copyDtoD(uintptr(copyDst), uintptr(out), 2*n) }); err != nil {
					b.Fatal(err)
				}
			}
			readQ := float64(len(w.Packed) + len(w.QAbsmax) + 4*len(w.NestedAbsmax))
			gbq := (readQ + 2*float64(n)) / tq / 1e9
			gbc := 4 * float64(n) / tc / 1e9
			b.ReportMetric(gbq, "dequant-GB/s")
			b.ReportMetric(gbc, "copy-GB/s")
			b.ReportMetric(gbq/gbc, "ratio")
			b.ReportMetric(tq*1e6, "dequant-µs")
		})
	}
}

// BenchmarkGEMV4: the fused 4-bit product of a decode step (m = 1 and 8 rows) on Qwen2.5-0.5B's
// MLP up projection; bandwidth counts the 4-bit weight read once.
func BenchmarkGEMV4(b *testing.B) {
	d := benchDevice(b)
	rows, cols := 4864, 896
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.02)
	}
	w, err := quant.Quantize(x, rows, cols, "float32", quant.Default())
	if err != nil {
		b.Fatal(err)
	}
	q := uploadQ4(b, d, w)
	for _, m := range []int{1, 8} {
		b.Run(map[int]string{1: "m1", 8: "m8"}[m], func(b *testing.B) {
			xs, _ := putBF16(b, d, randn(rng, m*cols, 1))
			y := allocT[bf16](b, d, m*rows)
			var t float64
			for i := 0; i < b.N; i++ {
				if t, err = d.timeGPU(100, func(o *owner) error { return o.gemv4(y, rows, xs, cols, q, m) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(w.Packed)+len(w.QAbsmax))/t/1e9, "weight-GB/s")
			b.ReportMetric(t*1e6, "µs")
		})
	}
}

func benchDevice(b *testing.B) *Device {
	b.Helper()
	testDevOnce.Do(func() {
		testDev, testDevErr = Open()
	})
	if testDevErr != nil {
		b.Skipf("no CUDA device: %v", testDevErr)
	}
	return testDev
}

// The Qwen2.5-0.5B shape (random weights, NF4 base with double quantization, LoRA r 16 on
// every linear) through the device ops, as bench/gpu.sh runs it beside PyTorch + peft.
var qwen05 = model.Config{ModelType: "qwen2", Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2, Hidden: 4864,
	MaxPos: 32768, NormEps: 1e-6, RopeTheta: 1e6, QKVBias: true, TieEmbed: true, BOS: -1}

func benchQwen(b *testing.B) (*Backend, *devModel) {
	d := benchDevice(b)
	be := &Backend{d: d}
	cfg := qwen05
	if testing.Short() { // a smoke run of the benchmark's code on a tiny model of the same family
		cfg.Vocab, cfg.Dim, cfg.Layers, cfg.Hidden, cfg.MaxPos = 1000, 112, 2, 256, 256
	}
	m, err := model.NewRandom(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		b.Fatal(err)
	}
	dm := newDevModel(b, be, m)
	rng := rand.New(rand.NewPCG(5, 6))
	dm.adapters = map[*model.Linear]*devLoRA{}
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(cpu.New(), l.Name, l.In, l.Out, lora.Config{R: 16, Alpha: 32}, rng)
		if err != nil {
			b.Fatal(err)
		}
		ad := &devLoRA{l: ll, in: l.In, out: l.Out, r: ll.R, scale: ll.Scale}
		ad.a, ad.b = up(b, be, F32, ll.A.F32()), up(b, be, F32, ll.B.F32())
		ad.ga, ad.gb = up(b, be, F32, make([]float32, ll.A.Len())), up(b, be, F32, make([]float32, ll.B.Len()))
		dm.adapters[l] = ad
	}
	return be, dm
}

// rollout samples new tokens for every prompt (temperature 1) with a KV cache: a prefill,
// then decode steps over fixed buffers, captured once as a CUDA graph and replayed when the
// driver can (the prompts share one length).
func rollout(b testing.TB, be *Backend, dm *devModel, prompts [][]int, newTokens int, rng *rand.Rand) [][]int {
	c := &dm.m.Config
	capacity := len(prompts[0]) + newTokens
	var kc, vc []Buf
	for range dm.m.Layers {
		k, err := be.Alloc(BF16, len(prompts)*capacity*c.KVDim())
		must(b, err)
		v, err := be.Alloc(BF16, len(prompts)*capacity*c.KVDim())
		must(b, err)
		kc, vc = append(kc, k), append(vc, v)
	}
	defer func() {
		for i := range kc {
			be.Free(kc[i])
			be.Free(vc[i])
		}
	}()
	dm.adaptersOn = true
	defer func() { dm.adaptersOn = false }()
	uniforms := func() []float64 {
		u := make([]float64, len(prompts))
		for i := range u {
			u[i] = rng.Float64()
		}
		return u
	}
	lens := make([]int, len(prompts))
	logits := dm.forwardCached(b, kc, vc, capacity, prompts, lens)
	tok, _, err := be.Sample(logits, uniforms(), len(prompts), c.Vocab, 1, 0, 0)
	must(b, err)
	be.Free(logits)
	out := make([][]int, len(prompts))
	for i, t := range tok {
		out[i] = append(out[i], int(t))
	}
	d := newDecoder(b, dm, kc, vc, len(prompts), capacity, 1)
	defer d.free()
	must(b, be.Upload(d.ids, tok))
	for s := 1; s < newTokens; s++ {
		tok = d.run(b, lens, uniforms(), true)
		for i, t := range tok {
			out[i] = append(out[i], int(t))
			lens[i]++
		}
	}
	return out
}

// BenchmarkDecodeQwen05: tokens per second of sampling with a KV cache, 8 sequences and 1,
// 32-token prompts, 64 new tokens (one decode step per token; no CUDA graph yet).
func BenchmarkDecodeQwen05(b *testing.B) {
	be, dm := benchQwen(b)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, batch := range []int{8, 1} {
		b.Run(map[int]string{8: "batch8", 1: "batch1"}[batch], func(b *testing.B) {
			prompts := make([][]int, batch)
			for i := range prompts {
				for j := 0; j < 32; j++ {
					prompts[i] = append(prompts[i], rng.IntN(dm.m.Config.Vocab))
				}
			}
			rollout(b, be, dm, prompts, 4, rng) // warm-up: compiled module, allocator cache
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				rollout(b, be, dm, prompts, 64, rng)
			}
			b.ReportMetric(float64(b.N*batch*64)/time.Since(start).Seconds(), "tokens/s")
		})
	}
}

// BenchmarkGRPOStepQwen05: one GRPO step's device work as the engine will run it — rollout
// of 8 completions × 64 tokens (adapters on), scoring with adapters off, the training
// forward and backward into LoRA, gradient norm and AdamW — with its peak device memory.
func BenchmarkGRPOStepQwen05(b *testing.B) {
	be, dm := benchQwen(b)
	rng := rand.New(rand.NewPCG(9, 10))
	prompt := make([]int, 32)
	for j := range prompt {
		prompt[j] = rng.IntN(dm.m.Config.Vocab)
	}
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = prompt
	}
	tr := &trainer{devModel: dm, lora: dm.adapters, t: b}
	var temps []Buf
	tr.alloc = func(dt DType, n int) Buf {
		x, err := be.Alloc(dt, n)
		must(b, err)
		temps = append(temps, x)
		return x
	}
	var params []OptParam
	var grads []Buf
	for _, ad := range dm.adapters {
		ma, va := up(b, be, F32, make([]float32, ad.a.Len())), up(b, be, F32, make([]float32, ad.a.Len()))
		mb, vb := up(b, be, F32, make([]float32, ad.b.Len())), up(b, be, F32, make([]float32, ad.b.Len()))
		params = append(params, OptParam{Data: ad.a, Grad: ad.ga, M: ma, V: va}, OptParam{Data: ad.b, Grad: ad.gb, M: mb, V: vb})
		grads = append(grads, ad.ga, ad.gb)
	}
	step := func(n int) (rollSec, totalSec float64) {
		t0 := time.Now()
		comp := rollout(b, be, dm, prompts, n, rng)
		t1 := time.Now()
		seqs := make([][]int, len(prompts))
		dlogp := make([][]float32, len(prompts))
		for i := range seqs {
			seqs[i] = append(append([]int(nil), prompt...), comp[i]...)
			dlogp[i] = make([]float32, len(seqs[i]))
			for j := len(prompt); j < len(seqs[i]); j++ {
				dlogp[i][j] = float32(rng.NormFloat64()) / float32(len(seqs)*n)
			}
		}
		dm.logProbs(b, seqs) // scoring: the reference, adapters off
		for _, g := range grads {
			be.Zero(g)
		}
		tr.step(seqs, dlogp)
		if _, err := be.GradNorm(grads); err != nil {
			b.Fatal(err)
		}
		must(b, be.AdamW(params, 1e-5, 0.9, 0.999, 1e-8, 0, 1))
		must(b, be.Sync())
		for _, x := range temps {
			be.Free(x)
		}
		temps = temps[:0]
		return t1.Sub(t0).Seconds(), time.Since(t0).Seconds()
	}
	step(4) // warm-up
	b.ResetTimer()
	var roll, total float64
	for i := 0; i < b.N; i++ {
		r, s := step(64)
		roll += r
		total += s
	}
	ms, err := be.d.MemStats()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(total/float64(b.N), "s/step")
	b.ReportMetric(roll/float64(b.N), "rollout-s")
	b.ReportMetric(float64(8*96)*float64(b.N)/total, "tokens/s")
	b.ReportMetric(float64(ms.Peak)/(1<<20), "peak-MiB")
}

// BenchmarkFlashAttention: the tensor-core attention kernels (ragged.go) over a training
// pass's sequences, forward and backward, timed by GPU events, in TFLOP/s of the products
// they form (the ledger's flops: causal 16×16 tiles), beside the anchor of one cuBLAS bf16
// product in the same run (the card's dense tensor-core rate as cuBLAS gets it): the ratios
// say how far the kernels are from it. Shapes: Llama-3.1-8B's heads over 16 sequences of 640
// tokens and Qwen2.5-0.5B's over 8 of 96 (with -short, 2 of 40: a smoke run on the stand-in).
func BenchmarkFlashAttention(b *testing.B) {
	d := benchDevice(b)
	be := &Backend{d: d}
	for _, sh := range []struct {
		name                   string
		seqs, T, heads, kv, hd int
	}{{"llama8b-16x640", 16, 640, 32, 8, 128}, {"qwen0.5b-8x96", 8, 96, 14, 2, 64}} {
		if testing.Short() {
			sh.seqs, sh.T = 2, 40
		}
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			a := Attention{Heads: sh.heads, KVHeads: sh.kv, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
			rows, qw, kw := sh.seqs*sh.T, sh.heads*sh.hd, sh.kv*sh.hd
			up := func(n int) Buf {
				buf, _ := upBF16(b, be, randn(rng, n, 1))
				return buf
			}
			q, k, v, dout := up(rows*qw), up(rows*kw), up(rows*kw), up(rows*qw)
			out, dq, dk, dv := up(rows*qw), up(rows*qw), up(rows*kw), up(rows*kw)
			var spans []Span
			for s := 0; s < sh.seqs; s++ {
				o, L := s*sh.T*kw, sh.T*kw
				spans = append(spans, Span{Row: s * sh.T, N: sh.T, K: k.Slice(o, L), V: v.Slice(o, L), DK: dk.Slice(o, L), DV: dv.Slice(o, L)})
			}
			p, ok, err := be.raggedPlanOf(spans, a, true)
			if err != nil || !ok {
				b.Fatalf("ragged plan: %v (fits: %v)", err, ok)
			}
			as := shapeOf(a)
			fwd := func(o *owner) error { return o.raggedForward(bf(out), bf(q), p, as) }
			bwd := func(o *owner) error { return o.raggedBackward(bf(dq), bf(dout), bf(q), p, as) }
			be.ResetLedger()
			must(b, be.queue(nil, func(o *owner) error { return firstErr(fwd(o), bwd(o)) }))
			must(b, be.Sync())
			var fwdFlops, bwdFlops float64
			for name, c := range be.Ledger().Kernels {
				switch {
				case strings.HasPrefix(name, "attn_fwd_tc"):
					fwdFlops += float64(c.Flops)
				case strings.HasPrefix(name, "attn_bwd_"):
					bwdFlops += float64(c.Flops)
				}
			}
			if fwdFlops == 0 || bwdFlops == 0 {
				b.Fatalf("the tensor-core kernels did not run: %v", be.Ledger().Kernels)
			}
			// the anchor: q [rows × qw]·Wᵀ, W [qw × qw], bf16 operands, float32 sums
			w := up(qw * qw)
			cbuf := allocT[float32](b, d, rows*qw)
			gemm := func(o *owner) error {
				return o.gemm(&gemmArgs{transB: true, m: rows, n: qw, k: qw, alpha: 1, a: q.Addr(), aType: dtBF16, lda: qw,
					b: w.Addr(), bType: dtBF16, ldb: qw, c: uintptr(cbuf), cType: dtF32, ldc: qw})
			}
			reps := 10
			if testing.Short() {
				reps = 1
			}
			var tf, tb, tg float64
			for i := 0; i < b.N; i++ {
				for _, x := range []struct {
					t *float64
					f func(o *owner) error
				}{{&tf, fwd}, {&tb, bwd}, {&tg, gemm}} {
					if *x.t, err = d.timeGPU(reps, x.f); err != nil {
						b.Fatal(err)
					}
				}
			}
			peak := 2 * float64(rows) * float64(qw) * float64(qw) / tg / 1e12
			b.ReportMetric(fwdFlops/tf/1e12, "fwd-TFLOP/s")
			b.ReportMetric(bwdFlops/tb/1e12, "bwd-TFLOP/s")
			b.ReportMetric(peak, "cublas-TFLOP/s")
			b.ReportMetric(fwdFlops/tf/1e12/peak, "fwd-ratio")
			b.ReportMetric(bwdFlops/tb/1e12/peak, "bwd-ratio")
			b.ReportMetric(tf*1e3, "fwd-ms")
			b.ReportMetric(tb*1e3, "bwd-ms")
		})
	}
}

// BenchmarkDecodeAttention: a decode step's attention (attn_rows*, every row of the batch
// over its sequence's cached keys) at the rollouts' mean contexts, timed by GPU events,
// beside a device-to-device copy of the keys and values it reads (the bandwidth anchor) and
// the cost model's H100 and H200 estimates of the same launch (a ratio measured/estimated far
// from 1 on that card says the chain rule is off for this kernel).
func BenchmarkDecodeAttention(b *testing.B) {
	d := benchDevice(b)
	be := &Backend{d: d}
	for _, sh := range []struct {
		name                                string
		rows, keys, capacity, heads, kv, hd int
	}{{"llama8b-16x384", 16, 384, 640, 32, 8, 128}, {"qwen0.5b-8x64", 8, 64, 96, 14, 2, 64}} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 8))
			a := Attention{Heads: sh.heads, KVHeads: sh.kv, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
			qw, kw := sh.heads*sh.hd, sh.kv*sh.hd
			stride := sh.capacity * kw
			rnd := func(n int) Buf {
				buf, _ := upBF16(b, be, randn(rng, n, 1))
				return buf
			}
			q, k, v, out := rnd(sh.rows*qw), rnd(sh.rows*stride), rnd(sh.rows*stride), rnd(sh.rows*qw)
			seq, pos := make([]int32, sh.rows), make([]int32, sh.rows)
			for r := range seq {
				seq[r], pos[r] = int32(r), int32(sh.keys-1)
			}
			seqb, posb := up(b, be, I32, seq), up(b, be, I32, pos)
			as := shapeOf(a)
			attn := func(o *owner) error {
				o.hint = int64(sh.rows * sh.keys)
				return o.attentionRows(bf(out), bf(q), bf(k), bf(v), i32(seqb), i32(posb), int64(stride), sh.rows, as, kw)
			}
			be.ResetLedger()
			must(b, be.queue(nil, attn))
			must(b, be.Sync())
			var launch Count
			var kernel string
			for name, c := range be.Ledger().Kernels {
				if strings.HasPrefix(name, "attn_rows") {
					launch, kernel = c, name
				}
			}
			if launch.N != 1 {
				b.Fatalf("no attn_rows launch: %v", be.Ledger().Kernels)
			}
			bytes := 2 * 2 * sh.rows * sh.keys * kw // the keys and values read
			dst := allocT[bf16](b, d, bytes/2)
			reps := 50
			if testing.Short() {
				reps = 1
			}
			var ta, tc float64
			var err error
			for i := 0; i < b.N; i++ {
				if ta, err = d.timeGPU(reps, attn); err != nil {
					b.Fatal(err)
				}
				if tc, err = d.timeGPU(reps, func(o *owner) error { return o.copyDtoD(uintptr(dst), k.Addr(), bytes/2) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(ta*1e6, "µs")
			b.ReportMetric(float64(bytes)/ta/1e9, "GB/s")
			b.ReportMetric(float64(bytes)/tc/1e9, "copy-GB/s")
			b.ReportMetric(float64(launch.Chain), "chain")
			b.ReportMetric(H100.KernelTime(kernel, launch)*1e6, "est-H100-µs")
			b.ReportMetric(H200.KernelTime(kernel, launch)*1e6, "est-H200-µs")
		})
	}
}
