package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func decodeSetup() ([]float32, []float32, []Span, Attention) {
	rng := rand.New(rand.NewPCG(1, 1))
	a := Attention{Heads: 8, KVHeads: 4, HeadDim: 64, Scale: 0.125}
	L := 256
	q := randTensor(rng, 1, 8, a.Heads*a.HeadDim).Data
	var spans []Span
	for s := 0; s < 8; s++ {
		spans = append(spans, Span{Row: s, N: 1, Pos: L - 1, K: randTensor(rng, 1, L, a.KVHeads*a.HeadDim).Data,
			V: randTensor(rng, 1, L, a.KVHeads*a.HeadDim).Data})
	}
	return make([]float32, 8*a.Heads*a.HeadDim), q, spans, a
}

func BenchmarkDecodeAttentionRows(b *testing.B) {
	out, q, spans, a := decodeSetup()
	for b.Loop() {
		attentionRowsRef(out, q, spans, a)
	}
}

func BenchmarkDecodeAttentionGEMM(b *testing.B) {
	out, q, spans, a := decodeSetup()
	for b.Loop() {
		attentionRowsGEMM(out, q, spans, a)
	}
}

func TestDecodeAttentionPaths(t *testing.T) {
	out, q, spans, a := decodeSetup()
	attentionRowsRef(out, q, spans, a)
	out2 := make([]float32, len(out))
	attentionRowsGEMM(out2, q, spans, a)
	for i := range out {
		if math.Abs(float64(out[i]-out2[i])) > 1e-5 {
			t.Fatalf("%d: %g vs %g", i, out[i], out2[i])
		}
	}
}

// TestAttentionBackwardRecomputes: the backward gives the same gradients from stored
// probabilities and from probabilities it recomputes.
func TestAttentionBackwardRecomputes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	a := Attention{Heads: 4, KVHeads: 1, HeadDim: 8, Scale: 0.3, Window: 5}
	rows, qw, kw := 30, 32, 8
	q, k, v := randTensor(rng, 1, rows, qw).Data, randTensor(rng, 1, rows, kw).Data, randTensor(rng, 1, rows, kw).Data
	dout := randTensor(rng, 1, rows, qw).Data
	run := func(stored bool) (dq, dk, dv []float32) {
		dq, dk, dv = make([]float32, rows*qw), make([]float32, rows*kw), make([]float32, rows*kw)
		spans := []Span{{Row: 0, N: 20, K: k[:20*kw], V: v[:20*kw], DK: dk[:20*kw], DV: dv[:20*kw]},
			{Row: 20, N: 10, K: k[20*kw:], V: v[20*kw:], DK: dk[20*kw:], DV: dv[20*kw:]}}
		var probs []float32
		if stored {
			probs = make([]float32, ProbSize(a, spans))
		}
		AttentionForward(make([]float32, rows*qw), probs, q, spans, a)
		AttentionBackward(dq, dout, probs, q, spans, a)
		return
	}
	q1, k1, v1 := run(true)
	q2, k2, v2 := run(false)
	for _, pair := range [][2][]float32{{q1, q2}, {k1, k2}, {v1, v2}} {
		for i := range pair[0] {
			if pair[0][i] != pair[1][i] {
				t.Fatalf("entry %d: %g stored, %g recomputed", i, pair[0][i], pair[1][i])
			}
		}
	}
}

// TestDecodeAttentionRowKernels: one query row per item through the one-row kernels (f32row,
// axpyRows) against the per-head reference, on the shapes decoding meets: heads of 64, 128
// and 256 values (one to four kernel chunks), 1 to 7 query heads a key/value head, windows,
// soft-capping, spans of several rows, and a head of 80 values that takes the GEMM instead.
func TestDecodeAttentionRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, a := range []Attention{
		{Heads: 14, KVHeads: 2, HeadDim: 64, Scale: 0.125},
		{Heads: 8, KVHeads: 8, HeadDim: 128, Scale: 0.09, Window: 7},
		{Heads: 4, KVHeads: 2, HeadDim: 256, Scale: 0.06, Softcap: 5},
		{Heads: 6, KVHeads: 2, HeadDim: 80, Scale: 0.11},
	} {
		qw, kw := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
		var spans []Span
		row := 0
		for _, sh := range [][2]int{{1, 0}, {1, 40}, {3, 12}, {1, 300}} { // rows, position
			L := sh[0] + sh[1]
			spans = append(spans, Span{Row: row, N: sh[0], Pos: sh[1], K: randTensor(rng, 1, L, kw).Data, V: randTensor(rng, 1, L, kw).Data})
			row += sh[0]
		}
		q := randTensor(rng, 1, row, qw).Data
		want, got := make([]float32, row*qw), make([]float32, row*qw)
		attentionRowsRef(want, q, spans, a)
		attentionRowsGEMM(got, q, spans, a)
		for i := range want {
			if d := math.Abs(float64(want[i] - got[i])); d > 2e-6*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%+v: value %d: %g, reference %g", a, i, got[i], want[i])
			}
		}
	}
}

// TestAxpyRows: the kernel against its reference, bit for bit (both one fused or rounded
// multiply-add a key in key order: compared at a tolerance where Go does not fuse).
func TestAxpyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, sh := range [][3]int{{1, 64, 64}, {5, 128, 192}, {300, 64, 128}, {2, 256, 256}} {
		n, w, ldv := sh[0], sh[1], sh[2]
		p, v := randTensor(rng, 1, 1, n).Data, randTensor(rng, 1, n, ldv).Data
		y0 := randTensor(rng, 1, 1, w).Data
		got, want := append([]float32(nil), y0...), append([]float32(nil), y0...)
		axpyRows(p, v, ldv, got)
		axpyRowsGo(p, v, ldv, want)
		for k := range want {
			if d := math.Abs(float64(got[k] - want[k])); d > 1e-5*(1+math.Abs(float64(want[k]))) {
				t.Fatalf("n %d width %d: value %d: %g, reference %g", n, w, k, got[k], want[k])
			}
		}
	}
}
