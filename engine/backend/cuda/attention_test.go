package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend/cpu"
)

// TestKernelAttention: the cuBLAS path (scores, masked softmax, P·V; the backward's four
// products and the softmax backward) and the row kernel against the CPU, with grouped heads,
// a window, a span continuing a cache (pos > 0) and one-row spans.
func TestKernelAttention(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		heads, kv, hd, window int
		runs                  [][2]int // (n, pos)
	}{
		{4, 4, 8, 0, [][2]int{{9, 0}, {12, 0}, {1, 0}}},
		{6, 2, 10, 0, [][2]int{{13, 0}, {8, 5}}},
		{3, 1, 7, 4, [][2]int{{11, 0}, {2, 6}, {1, 20}}},
	} {
		a := attnShape{heads: c.heads, kvHeads: c.kv, hd: c.hd, scale: float32(1 / math.Sqrt(float64(c.hd))), window: c.window}
		ca := cpu.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd, Scale: a.scale, Window: c.window}
		qw, kw := a.qw(), a.kw()
		rows := 0
		for _, r := range c.runs {
			rows += r[0]
		}
		q, qr := putBF16(t, d, randn(rng, rows*qw, 1))
		var spans []span
		var cspans []cpu.Span
		row := 0
		var posArr []int32
		// each run's keys and values in a buffer of its own (as a cache slot would hold them)
		var kbufs, vbufs []devptr[bf16]
		var kvLens []int
		for _, r := range c.runs {
			n, pos := r[0], r[1]
			L := pos + n
			k, kr := putBF16(t, d, randn(rng, L*kw, 1))
			v, vr := putBF16(t, d, randn(rng, L*kw, 1))
			dk, dkr := putBF16(t, d, randn(rng, L*kw, 0.1))
			dv, dvr := putBF16(t, d, randn(rng, L*kw, 0.1))
			kbufs, vbufs, kvLens = append(kbufs, k), append(vbufs, v), append(kvLens, L*kw)
			spans = append(spans, span{row: row, n: n, pos: pos, k: k, v: v, ldk: kw, dk: dk, dv: dv})
			cspans = append(cspans, cpu.Span{Row: row, N: n, Pos: pos, K: kr, V: vr, DK: dkr, DV: dvr})
			for i := 0; i < n; i++ {
				posArr = append(posArr, int32(pos+i))
			}
			row += n
		}
		want := make([]float32, rows*qw)
		probsWant := make([]float32, cpu.ProbSize(ca, cspans))
		cpu.AttentionForward(want, probsWant, qr, cspans, ca)

		out := allocT[bf16](t, d, rows*qw)
		probs := allocT[bf16](t, d, len(probsWant))
		run(t, d, func(o *owner) error { return o.attentionForward(out, probs, q, spans, a) })
		closeTo(t, "attention (cuBLAS path)", getBF16(t, d, out, rows*qw), want, 2e-2, 1/32.)
		closeTo(t, "attention probabilities", getBF16(t, d, probs, len(probsWant)), probsWant, 2e-3, 1/100.)

		// the row kernel, each span's rows against its own key buffer
		out2 := allocT[bf16](t, d, rows*qw)
		var sp32 []int32
		for i, s := range spans {
			for j := 0; j < s.n; j++ {
				sp32 = append(sp32, int32(i))
			}
		}
		// one buffer holding every span's keys a slot apart: row r reads slot seq[r]
		stride := 0
		for i := range spans {
			stride = max(stride, kvLens[i])
		}
		kall, vall := allocT[bf16](t, d, len(spans)*stride), allocT[bf16](t, d, len(spans)*stride)
		for i := range spans {
			must(t, d.do(func(o *owner) error {
				return firstErr(o.copyDtoD(uintptr(bf16At(kall, i*stride)), uintptr(kbufs[i]), 2*kvLens[i]),
					o.copyDtoD(uintptr(bf16At(vall, i*stride)), uintptr(vbufs[i]), 2*kvLens[i]))
			}))
		}
		pp, sq := put(t, d, posArr), put(t, d, sp32)
		run(t, d, func(o *owner) error { return o.attentionRows(out2, q, kall, vall, sq, pp, int64(stride), rows, a, kw) })
		closeTo(t, "attention (row kernel)", getBF16(t, d, out2, rows*qw), want, 2e-2, 1/32.)

		// backward, with stored probabilities and recomputed ones
		dout, doutr := putBF16(t, d, randn(rng, rows*qw, 1))
		dq0 := randn(rng, rows*qw, 0.1)
		for _, stored := range []bool{true, false} {
			dq, dqr := putBF16(t, d, dq0)
			for i := range spans { // fresh key/value gradients
				kw0, vw0 := getBF16(t, d, spans[i].dk, len(cspans[i].DK)), getBF16(t, d, spans[i].dv, len(cspans[i].DV))
				if !stored {
					spans[i].dk, cspans[i].DK = putBF16(t, d, kw0)
					spans[i].dv, cspans[i].DV = putBF16(t, d, vw0)
				}
				_ = kw0
			}
			pr := probs
			var pw []float32 = probsWant
			if !stored {
				pr, pw = 0, nil
			}
			run(t, d, func(o *owner) error { return o.attentionBackward(dq, dout, pr, q, spans, a) })
			cpu.AttentionBackward(dqr, doutr, pw, qr, cspans, ca)
			closeTo(t, "attention dq", getBF16(t, d, dq, rows*qw), dqr, 3e-2, 1/32.)
			for i, s := range spans {
				closeTo(t, "attention dk", getBF16(t, d, s.dk, len(cspans[i].DK)), cspans[i].DK, 3e-2, 1/32.)
				closeTo(t, "attention dv", getBF16(t, d, s.dv, len(cspans[i].DV)), cspans[i].DV, 3e-2, 1/32.)
			}
		}
	}
}
