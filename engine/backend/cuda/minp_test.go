package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"rlhfstation/engine/model"
)

// TestGenerateMinPOnDevice: min_p and repetition_penalty are drawn inside the captured decode
// step (the sampling kernel penalises the row from its seen bits and thresholds min_p), so a
// decode token costs what it costs without them: the same graph launches, syncs and host
// copies (the seen bits cross once per decoder build, not per token), and nothing launched
// outside the graph. With min_p = 1 each token is the argmax of the logits after the
// repetition penalty of the tokens before it.
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
	const pen = 1.3
	raws := make([][][]float32, len(prompts))
	o := model.GenerateOptions{MaxNewTokens: 6, Temperature: 1, MinP: 1, RepetitionPenalty: pen, Seed: 3, NoEOS: true,
		OnLogits: func(seq, step int, logits []float32) { raws[seq] = append(raws[seq], slices.Clone(logits)) }}
	g, err := m.Generate(prompts, o)
	must(t, err)
	for i := range prompts {
		for s, tok := range g.Tokens[i] {
			row := raws[i][s]
			done := map[int]bool{}
			for _, j := range append(slices.Clone(prompts[i]), g.Tokens[i][:s]...) {
				if !done[j] { // each token once
					done[j] = true
					if row[j] < 0 {
						row[j] *= pen
					} else {
						row[j] /= pen
					}
				}
			}
			best := 0
			for j, v := range row {
				if v > row[best] {
					best = j
				}
			}
			if tok != best {
				t.Errorf("sequence %d step %d: drew %d, the penalised argmax is %d", i, s, tok, best)
			}
		}
	}
	// The captured step keeps the seen bits on the device; the eager draws rebuild them from
	// the host's tokens each step: the same tokens and log-probs.
	for _, opts := range []model.GenerateOptions{
		{MaxNewTokens: 8, Temperature: 0.9, TopK: 20, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1.4, Seed: 5, NoEOS: true},
		{MaxNewTokens: 8, RepetitionPenalty: 2, NoEOS: true},
	} {
		graph, err := m.Generate(prompts, opts)
		must(t, err)
		opts.Eager = true
		eager, err := m.Generate(prompts, opts)
		must(t, err)
		for i := range prompts {
			if !slices.Equal(graph.Tokens[i], eager.Tokens[i]) || !slices.Equal(graph.LogProbs[i], eager.LogProbs[i]) {
				t.Errorf("%+v sequence %d: the captured step drew %v, eager decoding %v", opts, i, graph.Tokens[i], eager.Tokens[i])
			}
		}
	}
	// The ledger of 4 more decode tokens (a generation of 10 new tokens less one of 6), with
	// and without them; no OnLogits, which downloads rows. (The first token, drawn from the
	// prefill's logits outside the graph, uploads its seen bits: once a generation.)
	ledger := func(o model.GenerateOptions, n int) Ledger {
		o.OnLogits, o.MaxNewTokens = nil, n
		before := b.Ledger()
		_, err := m.Generate(prompts, o)
		must(t, err)
		return b.Ledger().Sub(before)
	}
	decode4 := func(o model.GenerateOptions) Ledger {
		ledger(o, 10) // warm: kernels compiled, buffers cached
		return ledger(o, 10).Sub(ledger(o, 6))
	}
	for _, opts := range []model.GenerateOptions{o, {Temperature: 0.9, TopK: 20, TopP: 0.9, MinP: 0.1, RepetitionPenalty: 1.2, Seed: 4, NoEOS: true}} {
		p := opts
		p.MinP, p.RepetitionPenalty = 0, 0
		with, without := decode4(opts), decode4(p)
		t.Logf("min_p %g, repetition_penalty %g, 4 decode tokens: %d graph launches, %d syncs, %d+%d copies, %d launches outside graphs; without them %d, %d, %d+%d, %d",
			opts.MinP, opts.RepetitionPenalty, with.GraphLaunches, with.Syncs, with.HtoD.N, with.DtoH.N, with.Launches(),
			without.GraphLaunches, without.Syncs, without.HtoD.N, without.DtoH.N, without.Launches())
		if with.GraphLaunches != 4 || with.GraphLaunches != without.GraphLaunches || with.Syncs != without.Syncs ||
			with.DtoH.N != without.DtoH.N || with.HtoD.N != without.HtoD.N || with.Launches() != without.Launches() {
			t.Errorf("min_p %g, repetition_penalty %g: the decode tokens cost more than without them", opts.MinP, opts.RepetitionPenalty)
		}
	}
}
