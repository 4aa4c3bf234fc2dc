package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend"
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

// TestFlashAttention: the tensor-core kernels (attn_fwd_tc*, attn_bwd_dq_tc*,
// attn_bwd_dkv_tc*) against the CPU's attention and its backward on the same bf16 inputs,
// on shapes their tiles do not divide: spans of 37, 20 and 1 rows (tiles of 16), a span
// continuing a cache, head dims 64, 80, 128 and 256 (the 64-, 128- and 256-dim instances,
// 256 in two dK/dV blocks), grouped-query ratios 1, 4 and 7, a sliding window and
// soft-capped scores. The error bound is a few bf16 roundings of the output's scale (P
// and dS are rounded to bf16 for the products); a wrong mask, tile edge or layout is off
// by the values themselves. The ledger shows that the tensor-core kernels ran, once each.
func TestFlashAttention(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(31, 16))
	for _, c := range []struct {
		heads, kv, hd, window int
		softcap               float32
		runs                  [][2]int // (n, pos)
	}{
		{8, 8, 64, 0, 0, [][2]int{{37, 0}, {20, 13}, {1, 5}}},
		{14, 2, 64, 0, 0, [][2]int{{33, 0}, {17, 0}}},
		{8, 2, 128, 0, 0, [][2]int{{29, 3}, {18, 0}}},
		{4, 4, 80, 13, 1.5, [][2]int{{40, 0}, {9, 30}}},
		{4, 1, 256, 20, 0, [][2]int{{35, 0}, {3, 17}}},
	} {
		name := fmt.Sprintf("heads=%d kv=%d hd=%d window=%d softcap=%g runs=%v", c.heads, c.kv, c.hd, c.window, c.softcap, c.runs)
		a := backend.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd, Scale: float32(1 / math.Sqrt(float64(c.hd))), Window: c.window, Softcap: c.softcap}
		ca := cpu.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd, Scale: a.Scale, Window: c.window, Softcap: c.softcap}
		qw, kw := c.heads*c.hd, c.kv*c.hd
		rows, capacity := 0, 0
		for _, r := range c.runs {
			rows += r[0]
			capacity = max(capacity, r[0]+r[1])
		}
		total := len(c.runs) * capacity * kw
		q, qr := upBF16(t, b, randn(rng, rows*qw, 1))
		k, kr := upBF16(t, b, randn(rng, total, 1))
		v, vr := upBF16(t, b, randn(rng, total, 1))
		dout, doutr := upBF16(t, b, randn(rng, rows*qw, 1))
		dk, dkr := upBF16(t, b, make([]float32, total))
		dv, dvr := upBF16(t, b, make([]float32, total))
		dq, dqr := upBF16(t, b, make([]float32, rows*qw))
		var spans []backend.Span
		var cspans []cpu.Span
		row := 0
		for i, r := range c.runs {
			n, pos := r[0], r[1]
			o, L := i*capacity*kw, (pos+n)*kw
			spans = append(spans, backend.Span{Row: row, N: n, Pos: pos, K: k.Slice(o, L), V: v.Slice(o, L), DK: dk.Slice(o, L), DV: dv.Slice(o, L)})
			cspans = append(cspans, cpu.Span{Row: row, N: n, Pos: pos, K: kr[o : o+L], V: vr[o : o+L], DK: dkr[o : o+L], DV: dvr[o : o+L]})
			row += n
		}
		want := make([]float32, rows*qw)
		probs := make([]float32, cpu.ProbSize(ca, cspans))
		cpu.AttentionForward(want, probs, qr, cspans, ca)
		cpu.AttentionBackward(dqr, doutr, probs, qr, cspans, ca)

		out, err := b.Alloc(BF16, rows*qw)
		must(t, err)
		b.ResetLedger()
		must(t, b.AttentionForward(out, backend.Buf{}, q, spans, a))
		must(t, b.AttentionBackward(dq, dout, backend.Buf{}, q, spans, a))
		must(t, b.Sync())
		l := b.Ledger()
		inst := fmt.Sprint(tcDims(c.hd))
		for _, kname := range []string{"attn_fwd_tc", "attn_bwd_dq_tc", "attn_bwd_dkv_tc"} {
			if n := l.Launched(kname + inst); n != 1 {
				t.Errorf("%s: %s%s launched %d times, want 1", name, kname, inst, n)
			}
		}
		for _, x := range []struct {
			what      string
			buf       Buf
			want      []float32
			tolOfPeak float64
		}{{"out", out, want, 8e-3}, {"dq", dq, dqr, 1.2e-2}, {"dk", dk, dkr, 1.2e-2}, {"dv", dv, dvr, 1.2e-2}} {
			got := make([]float32, x.buf.Len())
			must(t, b.Download(got, x.buf))
			peak, worst := 0.0, 0.0
			for i := range got {
				peak = max(peak, math.Abs(float64(x.want[i])))
				if d := math.Abs(float64(got[i]) - float64(x.want[i])); d > worst || math.IsNaN(d) {
					worst = d
				}
			}
			t.Logf("%s: %s max error %.2e of peak %.3g", name, x.what, worst, peak)
			if !(worst <= x.tolOfPeak*peak) {
				t.Errorf("%s: %s differs from the CPU by %.3g, above %.3g of its peak %.3g", name, x.what, worst, x.tolOfPeak, peak)
			}
		}
	}
}
