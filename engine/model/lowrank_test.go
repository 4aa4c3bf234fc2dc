package model

import (
	"math/rand/v2"
	"slices"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/optim"
	"rlhfstation/quant"
)

// TestAdapterCopiesRefreshAfterUpdate: the model's copies of the adapters' factors are made
// once and not cast again by later passes; an optimizer update casts them once (its
// AfterUpdate hook), and the next Generate sees the new weights: it gives what copies made
// afresh give.
func TestAdapterCopiesRefreshAfterUpdate(t *testing.T) {
	b := cpu.New()
	m := randomModel(t, tinyConfigs()["qwen2-bias"], 7)
	if err := m.Use(b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Quantize(quant.Options{Type: quant.NF4, BlockSize: 32, DoubleQuant: true}); err != nil {
		t.Fatal(err)
	}
	attachTestLoRA(m, 4, 3)
	rng := rand.New(rand.NewPCG(2, 9))
	var params []*optim.Param
	for _, l := range m.Linears() {
		lr := l.Adapter.(*testLoRA)
		for _, x := range []backend.Buf{lr.a, lr.bb} {
			g := make([]float32, x.Len())
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			params = append(params, &optim.Param{Name: l.Name, Data: x, Grad: backend.HostF32(g)})
		}
	}
	opt, err := optim.NewAdamW(b, params, 0.9, 0.999, 1e-8, 0)
	if err != nil {
		t.Fatal(err)
	}
	opt.AfterUpdate(m.AdaptersChanged)
	prompts := [][]int{randomIDs(rng, 6, m.Config.Vocab), randomIDs(rng, 3, m.Config.Vocab)}
	o := GenerateOptions{MaxNewTokens: 6, Temperature: 0, NoEOS: true}
	gen := func() *Generation {
		g, err := m.Generate(prompts, o)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g0 := gen()
	made := m.lr.refreshes
	if made != 1 {
		t.Fatalf("%d casts of the copies after the first Generate, want 1", made)
	}
	if g := gen(); m.lr.refreshes != made || !slices.Equal(g.LogProbs[0], g0.LogProbs[0]) {
		t.Fatalf("a second Generate without an update cast the copies again (%d casts) or changed its log-probs", m.lr.refreshes)
	}
	if err := opt.Update(0.05); err != nil {
		t.Fatal(err)
	}
	if m.lr.refreshes != made+1 {
		t.Fatalf("%d casts of the copies after the update, want %d (the optimizer's hook)", m.lr.refreshes, made+1)
	}
	g1 := gen()
	if m.lr.refreshes != made+1 {
		t.Fatalf("%d casts after the update and a Generate, want %d", m.lr.refreshes, made+1)
	}
	if slices.Equal(g1.LogProbs[0], g0.LogProbs[0]) {
		t.Fatalf("the Generate after the update gave the log-probs of before it: %v", g1.LogProbs[0])
	}
	m.lr.free() // copies made afresh from the updated factors
	m.lr = lowRank{}
	g2 := gen()
	for i := range prompts {
		if !slices.Equal(g1.Tokens[i], g2.Tokens[i]) || !slices.Equal(g1.LogProbs[i], g2.LogProbs[i]) {
			t.Fatalf("sequence %d: after the update %v %v, with fresh copies %v %v", i, g1.Tokens[i], g1.LogProbs[i], g2.Tokens[i], g2.LogProbs[i])
		}
	}
}
