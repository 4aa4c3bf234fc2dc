package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// The ops through backend.Backend, on the CUDA backend and the CPU one side by side with the
// same inputs: float32 operands (the CUDA ops' float32 forms, what a caller holding the
// CPU's precision passes), and bf16 ones where the CUDA op mixes the two types. Inputs are
// rounded to bf16 for both sides, so that only the device's arithmetic differs.

// twin runs f on each backend; in gives an operand (uploaded to that backend: float32 or
// int32 host values; bf16 on the CUDA side only when asked), and f returns the buffers to
// compare, downloaded as float32.
type twinIn func(x any, dt ...DType) Buf

func twin(t *testing.T, name string, atol, rtol float64, f func(b backend.Backend, in twinIn) []Buf) {
	t.Helper()
	var outs [2][][]float32
	for i, b := range []backend.Backend{cpu.New(), testBackend(t)} {
		in := func(x any, dt ...DType) Buf {
			t.Helper()
			switch h := x.(type) {
			case []float32:
				want := F32
				if len(dt) > 0 && b.Name() == "cuda" {
					want = dt[0]
				}
				buf, err := b.Alloc(want, len(h))
				must(t, err)
				must(t, b.Upload(buf, h))
				return buf
			case []int32:
				buf, err := b.Alloc(I32, len(h))
				must(t, err)
				must(t, b.Upload(buf, h))
				return buf
			}
			t.Fatalf("%s: operand of %T", name, x)
			return Buf{}
		}
		for _, o := range f(b, in) {
			h := make([]float32, o.Len())
			must(t, b.Download(h, o))
			outs[i] = append(outs[i], h)
		}
		must(t, b.Sync())
	}
	for k := range outs[0] {
		if allZero(outs[0][k]) {
			t.Errorf("%s: output %d of the CPU is all zeros (a vacuous check)", name, k)
		}
		closeTo(t, name, outs[1][k], outs[0][k], atol, rtol)
	}
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}

// rounded is n normal values of the given scale rounded to bf16.
func rounded(rng *rand.Rand, n int, scale float64) []float32 {
	x := randn(rng, n, scale)
	for i := range x {
		x[i] = bf16Round(x[i])
	}
	return x
}

func TestInterfaceFloat32Operands(t *testing.T) {
	device(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, dim, vocab = 7, 37, 61
	n := rows * dim
	x, y, g := rounded(rng, n, 1), rounded(rng, n, 1), rounded(rng, n, 0.1)
	w, bias := rounded(rng, dim, 1), rounded(rng, dim, 0.5)
	ids := make([]int32, rows)
	pos := make([]int32, rows)
	for i := range ids {
		ids[i], pos[i] = int32(rng.IntN(vocab)), int32(i+3)
	}
	wte, wpe := rounded(rng, vocab*dim, 1), rounded(rng, 16*dim, 1)
	const bfTol = 1. / 64

	twin(t, "embedding from float32 tables", 1e-6, 1e-6, func(b backend.Backend, in twinIn) []Buf {
		out, _ := b.Alloc(F32, n)
		must(t, b.EmbeddingForward(out, in(ids), in(pos), in(wte), in(wpe), dim))
		return []Buf{out}
	})
	twin(t, "embedding backward from a bf16 gradient", 1e-5, 1e-5, func(b backend.Backend, in twinIn) []Buf {
		dwte, dwpe := in(make([]float32, vocab*dim)), in(make([]float32, 16*dim))
		must(t, b.EmbeddingBackward(dwte, dwpe, in(g, BF16), in(ids), in(pos), dim))
		return []Buf{dwte, dwpe}
	})
	twin(t, "RMSNorm, float32 and bf16 into float32", 1e-5, bfTol, func(b backend.Backend, in twinIn) []Buf {
		o1, o2, r1, r2 := in(make([]float32, n)), in(make([]float32, n)), in(make([]float32, rows)), in(make([]float32, rows))
		must(t, b.RMSNormForward(o1, r1, in(x), in(w), rows, dim, 1e-5, 0))
		must(t, b.RMSNormForward(o2, r2, in(x, BF16), in(w), rows, dim, 1e-5, 0))
		return []Buf{o1, o2, r1, r2}
	})
	twin(t, "RMSNorm backward, mixed types", 1e-4, bfTol, func(b backend.Backend, in twinIn) []Buf {
		rstd := in(make([]float32, rows))
		xin, wb := in(x), in(w)
		tmp := in(make([]float32, n))
		must(t, b.RMSNormForward(tmp, rstd, xin, wb, rows, dim, 1e-5, 0))
		d1, dw := in(g), in(make([]float32, dim))
		must(t, b.RMSNormBackward(d1, dw, in(y, BF16), xin, wb, rstd, rows, dim, 0)) // float32 stream, bf16 output gradient
		d2 := in(g, BF16)
		must(t, b.RMSNormBackward(d2, backend.Buf{}, in(y), xin, wb, rstd, rows, dim, 0)) // bf16 dinp from float32 ones
		return []Buf{d1, dw, d2}
	})
	twin(t, "LayerNorm forward and backward, float32", 1e-4, bfTol, func(b backend.Backend, in twinIn) []Buf {
		mean, rstd, tmp := in(make([]float32, rows)), in(make([]float32, rows)), in(make([]float32, n))
		xin, wb, bb := in(x), in(w), in(bias)
		must(t, b.LayerNormForward(tmp, mean, rstd, xin, wb, bb, rows, dim, 1e-5))
		dx, dw, db := in(g), in(make([]float32, dim)), in(make([]float32, dim))
		must(t, b.LayerNormBackward(dx, dw, db, in(y), xin, wb, mean, rstd, rows, dim))
		return []Buf{tmp, dx, dw, db}
	})
	twin(t, "residual, GELU, SwiGLU, bias, float32", 1e-5, 1e-5, func(b backend.Backend, in twinIn) []Buf {
		xb, yb := in(x), in(y)
		res, ge, sw := in(make([]float32, n)), in(make([]float32, n)), in(make([]float32, n))
		must(t, b.ResidualForward(res, xb, yb, n))
		must(t, b.GELUForward(ge, xb, n))
		must(t, b.SwiGLUForward(sw, xb, yb, n))
		must(t, b.BiasForward(sw, in(bias), rows, dim))
		dg, dgate, dup, db := in(g), in(g), in(g), in(bias)
		must(t, b.GELUBackward(dg, yb, xb, n))
		must(t, b.SwiGLUBackward(dgate, dup, in(g), xb, yb, n))
		must(t, b.BiasBackward(db, yb, rows, dim))
		return []Buf{res, ge, sw, dg, dgate, dup, db}
	})
	twin(t, "residual into float32 from bf16 operands", 1e-5, 1e-5, func(b backend.Backend, in twinIn) []Buf {
		res := in(make([]float32, n))
		must(t, b.ResidualForward(res, in(x, BF16), in(y), n))
		return []Buf{res}
	})
	twin(t, "element-wise ops over mixed types", 1e-5, bfTol, func(b backend.Backend, in twinIn) []Buf {
		out, dx := in(make([]float32, n)), in(g, BF16)
		must(t, b.DropoutForward(out, in(x, BF16), n, 77, 0.3))
		must(t, b.DropoutBackward(dx, in(y), n, 77, 0.3))
		dgate, dup := in(g, BF16), in(g)
		must(t, b.SwiGLUBackward(dgate, dup, in(y), in(x, BF16), in(y), n))
		dst := in(g[:rows*10], BF16)
		must(t, b.Copy2D(dst, 10, in(x).From(5), dim, rows, 10))
		return []Buf{out, dx, dgate, dup, dst}
	})
	twin(t, "GEMM of float32 operands into bf16", 1e-3, bfTol, func(b backend.Backend, in twinIn) []Buf {
		c := in(g[:rows*rows], BF16)
		must(t, b.GEMM(false, true, rows, rows, dim, 0.5, in(x), dim, in(y), dim, 1, c, rows))
		return []Buf{c}
	})
	twin(t, "dropout (the same masks)", 1e-6, 1e-6, func(b backend.Backend, in twinIn) []Buf {
		out, dx := in(make([]float32, n)), in(g)
		must(t, b.DropoutForward(out, in(x), n, 77, 0.3))
		must(t, b.DropoutBackward(dx, in(y), n, 77, 0.3))
		return []Buf{out, dx}
	})
	twin(t, "Copy2D, Add2D, CopyRows", 0, 0, func(b backend.Backend, in twinIn) []Buf {
		dst, acc, rowsOut := in(make([]float32, rows*10)), in(g[:rows*10]), in(make([]float32, 4*dim))
		must(t, b.Copy2D(dst, 10, in(x).From(5), dim, rows, 10))
		must(t, b.Add2D(acc, 10, in(y).From(3), dim, rows, 10))
		must(t, b.CopyRows(rowsOut, []int64{3, 0, 2, 1}, dim, in(x), []int64{6, 1, 4, 0}, dim, 4, dim))
		return []Buf{dst, acc, rowsOut}
	})
	twin(t, "GEMM float32, and float32 × bf16", 1e-4, bfTol, func(b backend.Backend, in twinIn) []Buf {
		c1, c2 := in(g[:rows*rows]), in(g[:rows*rows])
		must(t, b.GEMM(false, true, rows, rows, dim, 0.5, in(x), dim, in(y), dim, 1, c1, rows))
		must(t, b.GEMM(false, true, rows, rows, dim, 1, in(x), dim, in(y, BF16), dim, 0, c2, rows))
		return []Buf{c1, c2}
	})
	twin(t, "RoPE float32", 1e-5, 1e-5, func(b backend.Backend, in twinIn) []Buf {
		inv := []float64{1, 0.1, 0.01, 0.001}
		tab, err := b.NewRoPETable(inv, 32)
		must(t, err)
		q := in(x[:rows*16]) // 2 heads of 8
		must(t, b.RoPEForward(q, in(pos), 2, tab))
		dq := in(y[:rows*16])
		must(t, b.RoPEBackward(dq, in(pos), 2, tab))
		return []Buf{q, dq}
	})

	// a 4-bit weight
	const qr, qc = 24, 64
	wq, err := quant.Quantize(randn(rng, qr*qc, 1), qr, qc, "float32", quant.Default())
	must(t, err)
	twin(t, "4-bit dequantization into float32 (bit for bit)", 0, 0, func(b backend.Backend, in twinIn) []Buf {
		q4, err := b.UploadQ4(wq)
		must(t, err)
		out := in(make([]float32, qr*qc))
		must(t, b.Q4Dequantize(out, q4))
		return []Buf{out}
	})
	xq, dyq := rounded(rng, 3*qc, 1), rounded(rng, 3*qr, 1)
	twin(t, "4-bit products, float32 and bf16", 2e-2, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		q4, err := b.UploadQ4(wq)
		must(t, err)
		y1, y2, dx := in(make([]float32, 3*qr)), in(make([]float32, 3*qr), BF16), in(g[:3*qc])
		must(t, b.Q4MulT(y1, in(xq), q4, 3))
		must(t, b.Q4MulT(y2, in(xq, BF16), q4, 3)) // the fused product
		must(t, b.Q4MulAcc(dx, in(dyq), q4, 3))
		return []Buf{y1, y2, dx}
	})

	// attention: two spans over their own keys (one short: the row kernel), grouped heads
	at := backend.Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: float32(1 / math.Sqrt(8))}
	qw, kw := 32, 16
	spanOf := func(in twinIn, k, v, dk, dv Buf) []backend.Span {
		return []backend.Span{
			{Row: 0, N: 9, Pos: 0, K: k.Slice(0, 9*kw), V: v.Slice(0, 9*kw), DK: dk.Slice(0, 9*kw), DV: dv.Slice(0, 9*kw)},
			{Row: 9, N: 3, Pos: 5, K: k.Slice(9*kw, 8*kw), V: v.Slice(9*kw, 8*kw), DK: dk.Slice(9*kw, 8*kw), DV: dv.Slice(9*kw, 8*kw)},
		}
	}
	aq, ak, av, ad := rounded(rng, 12*qw, 1), rounded(rng, 17*kw, 1), rounded(rng, 17*kw, 1), rounded(rng, 12*qw, 1)
	twin(t, "attention float32, forward and backward", 2e-2, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		k, v, dk, dv := in(ak), in(av), in(make([]float32, 17*kw)), in(make([]float32, 17*kw))
		sp := spanOf(in, k, v, dk, dv)
		out, q, dq := in(make([]float32, 12*qw)), in(aq), in(make([]float32, 12*qw))
		must(t, b.AttentionForward(out, backend.Buf{}, q, sp, at))
		must(t, b.AttentionBackward(dq, in(ad), backend.Buf{}, q, sp, at))
		return []Buf{out, dq, dk, dv}
	})
	twin(t, "decode attention over a cache, float32 and bf16", 2e-2, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		// two sequences, 8 positions each, rows at positions 7 and 4 of sequences 1 and 0
		o1, o2 := in(make([]float32, 2*qw)), in(make([]float32, 2*qw), BF16)
		seq, p := in([]int32{1, 0}), in([]int32{7, 4})
		must(t, b.AttentionRows(o1, in(aq[:2*qw]), in(ak[:16*kw]), in(av[:16*kw]), seq, p, 2, at, 8*kw))
		must(t, b.AttentionRows(o2, in(aq[:2*qw], BF16), in(ak[:16*kw], BF16), in(av[:16*kw], BF16), seq, p, 2, at, 8*kw))
		return []Buf{o1, o2}
	})

	// the head
	head := rounded(rng, vocab*dim, 0.3)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab))
	}
	targets[2] = -1
	dlogp := randn(rng, rows, 1)
	twin(t, "LM head log-probs and backward, float32", 1e-3, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		lp, ent, dh := in(make([]float32, rows)), in(make([]float32, rows)), in(make([]float32, n))
		hb, hd, tg := in(x), in(head), in(targets)
		must(t, b.HeadLogProbs(lp, ent, hb, hd, tg, rows, dim, vocab, 0.7, 0))
		must(t, b.HeadLogProbsBackward(dh, hb, hd, in(dlogp), Buf{}, tg, rows, dim, vocab, 0.7, 0))
		logits, dl := in(make([]float32, rows*vocab)), in(make([]float32, rows*vocab))
		must(t, b.Logits(logits, hb, hd, rows, dim, vocab))
		must(t, b.LogProbBackward(dl, in(dlogp), Buf{}, logits, tg, rows, vocab, 0.7))
		return []Buf{lp, ent, dh, dl}
	})
}

func TestInterfaceRefusesHostMemory(t *testing.T) {
	b := testBackend(t)
	dev, err := b.Alloc(F32, 8)
	must(t, err)
	defer b.Free(dev)
	host := backend.HostF32(make([]float32, 8))
	for name, err := range map[string]error{
		"GELU":   b.GELUForward(dev, host, 8),
		"Copy":   b.Copy(host, dev),
		"Upload": b.Upload(host, make([]float32, 8)),
	} {
		if err == nil || !strings.Contains(err.Error(), "host memory") {
			t.Errorf("%s with a host buffer: %v, want a refusal naming host memory", name, err)
		}
	}
}

func TestSelectCUDA(t *testing.T) {
	device(t)
	b, err := backend.Select("cuda")
	must(t, err)
	defer b.Close()
	if b.Name() != "cuda" {
		t.Fatalf("Select(cuda) gave %s", b.Name())
	}
	x, err := b.Alloc(F32, 3)
	must(t, err)
	must(t, b.Upload(x, []float32{1, 2, 3}))
	got := make([]float32, 3)
	must(t, b.Download(got, x))
	if got[2] != 3 {
		t.Fatalf("round trip through Select(cuda): %v", got)
	}
}

// TestCheckFits: the stand-in's 16 GiB take the Qwen2.5-0.5B benchmark's run and refuse 64
// completions of 4096 tokens, saying what to lower; DeviceBytes counts what the backend holds.
func TestCheckFits(t *testing.T) {
	b := testBackend(t)
	// The passes' buffers come from the model's own layout, as the engine's runShape takes them.
	cfg := model.Config{ModelType: "qwen2", Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2, Hidden: 4864,
		MaxPos: 32768, NormEps: 1e-6, RopeTheta: 1e6, QKVBias: true, TieEmbed: true}
	shape := func(seqs, seqLen, completion int) RunShape {
		s := RunShape{Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, QDim: 896, KVDim: 128, Hidden: 4864, TiedHead: true,
			LinearParams: 24 * (896*(896+2*128+896) + 3*896*4864), LargestLinear: 896 * 4864, Quantized: true, LoRAParams: 8798208,
			Seqs: seqs, SeqLen: seqLen, Completion: completion}
		f := model.FootprintOf(&cfg, seqs, seqLen, completion, b.Precision())
		s.Tape, s.Grads, s.Passes, s.KVCache = f.Tape, f.Grads, f.Scratch, f.KVCache
		return s
	}
	must(t, b.CheckFits(shape(8, 96, 64)))
	err := b.CheckFits(shape(64, 4096, 3584))
	if err == nil || !strings.Contains(err.Error(), "per_device_train_batch_size") {
		t.Errorf("64 × 4096 tokens of Qwen2.5-0.5B on 16 GiB: %v, want a refusal naming what to lower", err)
	}
	x, err := b.Alloc(F32, 1<<20)
	must(t, err)
	defer b.Free(x)
	if got := b.DeviceBytes(); got < 4<<20 {
		t.Errorf("DeviceBytes %d while a 4 MiB buffer is held", got)
	}
	if !strings.HasPrefix(b.String(), "cuda: ") {
		t.Errorf("String() = %q", b.String())
	}
}
