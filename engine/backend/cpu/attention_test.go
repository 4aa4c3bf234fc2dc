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
