package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend"
)

// TestFamilyOps: the ops the qwen3, gemma and phi3 families add, on the CUDA backend against
// the CPU one: (1 + w) RMSNorm, GeGLU, soft-capping (alone, in attention, in the LM head) and
// partial rotary embeddings.
func TestFamilyOps(t *testing.T) {
	device(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, dim, vocab = 7, 37, 61
	n := rows * dim
	x, y, g := rounded(rng, n, 1), rounded(rng, n, 1), rounded(rng, n, 0.1)
	w := rounded(rng, dim, 0.3) // gemma's weights sit around 0: the scale is 1 + w
	const bfTol = 1. / 64

	twin(t, "RMSNorm (1 + w), float32 and bf16 out, and backward", 1e-4, bfTol, func(b backend.Backend, in twinIn) []Buf {
		o1, o2, r1, r2 := in(make([]float32, n)), in(make([]float32, n), BF16), in(make([]float32, rows)), in(make([]float32, rows))
		xin, wb := in(x), in(w)
		must(t, b.RMSNormForward(o1, r1, xin, wb, rows, dim, 1e-6, 1))
		must(t, b.RMSNormForward(o2, r2, xin, wb, rows, dim, 1e-6, 1))
		dx, dw := in(g), in(make([]float32, dim))
		must(t, b.RMSNormBackward(dx, dw, in(y), xin, wb, r1, rows, dim, 1))
		return []Buf{o1, o2, r1, dx, dw}
	})
	twin(t, "GeGLU float32 and bf16, and backward", 1e-5, bfTol, func(b backend.Backend, in twinIn) []Buf {
		o1, o2 := in(make([]float32, n)), in(make([]float32, n), BF16)
		must(t, b.GeGLUForward(o1, in(x), in(y), n))
		must(t, b.GeGLUForward(o2, in(x, BF16), in(y, BF16), n))
		dgate, dup := in(g), in(g)
		must(t, b.GeGLUBackward(dgate, dup, in(y), in(x), in(y), n))
		return []Buf{o1, o2, dgate, dup}
	})
	big := rounded(rng, n, 4)
	twin(t, "soft-capping in place, and backward from the output", 1e-5, 1e-5, func(b backend.Backend, in twinIn) []Buf {
		v := in(big)
		must(t, b.SoftcapForward(v, v, n, 2.5))
		dx := in(g)
		must(t, b.SoftcapBackward(dx, in(y), v, n, 2.5))
		return []Buf{v, dx}
	})
	twin(t, "partial RoPE: 6 of each head's 10 dimensions, float32 and bf16", 1e-5, bfTol, func(b backend.Backend, in twinIn) []Buf {
		tab, err := b.NewRoPETable([]float64{1, 0.2, 0.01}, 32)
		must(t, err)
		tab.HeadDim = 10
		pos := make([]int32, rows)
		for i := range pos {
			pos[i] = int32(3 * i)
		}
		q1, q2 := in(x[:rows*30]), in(x[:rows*30], BF16) // 3 heads of 10
		must(t, b.RoPEForward(q1, in(pos), 3, tab))
		must(t, b.RoPEForward(q2, in(pos), 3, tab))
		dq := in(y[:rows*30])
		must(t, b.RoPEBackward(dq, in(pos), 3, tab))
		return []Buf{q1, q2, dq}
	})

	// soft-capped attention: a long span (through cuBLAS), a short one (the row kernel), a window
	at := backend.Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: float32(1 / math.Sqrt(8)), Window: 6, Softcap: 1.5}
	qw, kw := 32, 16
	aq, ak, av, ad := rounded(rng, 12*qw, 2), rounded(rng, 17*kw, 2), rounded(rng, 17*kw, 1), rounded(rng, 12*qw, 1)
	twin(t, "soft-capped attention, forward and backward", 2e-2, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		k, v, dk, dv := in(ak), in(av), in(make([]float32, 17*kw)), in(make([]float32, 17*kw))
		sp := []backend.Span{
			{Row: 0, N: 9, Pos: 0, K: k.Slice(0, 9*kw), V: v.Slice(0, 9*kw), DK: dk.Slice(0, 9*kw), DV: dv.Slice(0, 9*kw)},
			{Row: 9, N: 3, Pos: 5, K: k.Slice(9*kw, 8*kw), V: v.Slice(9*kw, 8*kw), DK: dk.Slice(9*kw, 8*kw), DV: dv.Slice(9*kw, 8*kw)},
		}
		out, q, dq := in(make([]float32, 12*qw)), in(aq), in(make([]float32, 12*qw))
		must(t, b.AttentionForward(out, backend.Buf{}, q, sp, at))
		must(t, b.AttentionBackward(dq, in(ad), backend.Buf{}, q, sp, at))
		rowsOut := in(make([]float32, 2*qw))
		must(t, b.AttentionRows(rowsOut, in(aq[:2*qw]), in(ak[:16*kw]), in(av[:16*kw]), in([]int32{1, 0}), in([]int32{7, 4}), 2, at, 8*kw))
		return []Buf{out, dq, dk, dv, rowsOut}
	})

	// the LM head with final-logit soft-capping
	head := rounded(rng, vocab*dim, 0.3)
	targets := make([]int32, rows)
	for i := range targets {
		targets[i] = int32(rng.IntN(vocab))
	}
	targets[2] = -1
	dlogp := randn(rng, rows, 1)
	twin(t, "LM head log-probs with soft-capping, and backward", 1e-3, 2e-2, func(b backend.Backend, in twinIn) []Buf {
		lp, ent, dh := in(make([]float32, rows)), in(make([]float32, rows)), in(make([]float32, n))
		hb, hd, tg := in(x), in(head), in(targets)
		must(t, b.HeadLogProbs(lp, ent, hb, hd, tg, rows, dim, vocab, 0.7, 2))
		must(t, b.HeadLogProbsBackward(dh, hb, hd, in(dlogp), Buf{}, tg, rows, dim, vocab, 0.7, 2))
		return []Buf{lp, ent, dh}
	})
}
