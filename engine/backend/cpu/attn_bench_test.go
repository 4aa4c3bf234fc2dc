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
