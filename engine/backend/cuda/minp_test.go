package cuda

import (
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/model"
)

// TestGenerateMinPOnDevice: with min_p (applied on the host between the device's logits and
// its draw) decoding runs eagerly, not as the captured step, and min_p = 1 leaves only each
// step's most likely token: every token drawn is the argmax of the logits OnLogits saw.
func TestGenerateMinPOnDevice(t *testing.T) {
	b := testBackend(t)
	m := decodeModel(t, b)
	rng := rand.New(rand.NewPCG(7, 1))
	prompts := make([][]int, 4)
	for i := range prompts {
		for j := 0; j < 3+2*i; j++ {
			prompts[i] = append(prompts[i], rng.IntN(decodeStructure.Vocab))
		}
	}
	argmax := make([][]int, len(prompts))
	o := model.GenerateOptions{MaxNewTokens: 6, Temperature: 1, MinP: 1, Seed: 3, NoEOS: true,
		OnLogits: func(seq, step int, logits []float32) {
			best := 0
			for j, v := range logits {
				if v > logits[best] {
					best = j
				}
			}
			argmax[seq] = append(argmax[seq], best)
		}}
	before := b.Ledger()
	g, err := m.Generate(prompts, o)
	must(t, err)
	if l := b.Ledger().Sub(before); l.GraphLaunches != 0 {
		t.Errorf("min_p decoding launched %d graphs", l.GraphLaunches)
	}
	for i := range prompts {
		for s, tok := range g.Tokens[i] {
			if tok != argmax[i][s] {
				t.Errorf("sequence %d step %d: drew %d, the argmax is %d", i, s, tok, argmax[i][s])
			}
		}
	}
}
