package cuda

import (
	"math/rand/v2"
	"testing"
)

func TestRepro(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(1, 1))
	lg := up(t, b, F32, randn(rng, 8*1000, 1))
	u := make([]float64, 8)
	for i := range u {
		u[i] = rng.Float64()
	}
	tok, _, err := b.Sample(lg, u, 8, 1000, 1, 0, 0)
	t.Log(tok, err)
}
