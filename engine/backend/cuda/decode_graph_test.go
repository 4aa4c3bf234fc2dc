package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// decodeStructure is two layers of Qwen2.5-0.5B's structure (14 query and 2 key/value heads,
// q/k/v biases, tied head) at small widths: the decode step's graph against its eager run
// (the ledger's counts of the whole structure are TestLedgerGRPOStep's).
var decodeStructure = model.Config{ModelType: "qwen2", Vocab: 512, Dim: 112, Layers: 2, Heads: 14, KVHeads: 2, Hidden: 224,
	MaxPos: 512, NormEps: 1e-6, RopeTheta: 1e6, QKVBias: true, TieEmbed: true, BOS: -1}

// decodeModel is the structure above, NF4 with double quantization, LoRA r 16 (B random) on
// every linear, on b.
func decodeModel(t *testing.T, b *Backend) *model.Model {
	m, err := model.NewRandom(decodeStructure, 3)
	must(t, err)
	_, _, err = m.Quantize(quant.Default())
	must(t, err)
	must(t, m.Use(b))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(b, l.Name, l.In, l.Out, lora.Config{R: 16, Alpha: 32, TargetModules: []string{"all-linear"}}, rng)
		must(t, err)
		must(t, ll.RandomizeB(rng))
		l.Adapter = &loraAdapter{l: ll}
	}
	return m
}

// TestDecodeGraphMatchesEager: the decode step replayed as a CUDA graph gives the tokens and
// log-probs of the same step run op by op (GenerateOptions.Eager), with the same seed.
func TestDecodeGraphMatchesEager(t *testing.T) {
	b := testBackend(t)
	m := decodeModel(t, b)
	rng := rand.New(rand.NewPCG(5, 1))
	prompts := make([][]int, 20) // 16 rows and more: the tensor-core products
	for i := range prompts {
		for j := 0; j < 3+2*i; j++ {
			prompts[i] = append(prompts[i], rng.IntN(decodeStructure.Vocab))
		}
	}
	o := model.GenerateOptions{MaxNewTokens: 8, Temperature: 0.8, TopK: 50, Seed: 11, StopIDs: []int{1, 2, 3, 4, 5, 6, 7, 8}}
	before := b.Ledger()
	graph, err := m.Generate(prompts, o)
	must(t, err)
	if b.Ledger().Sub(before).GraphLaunches == 0 {
		t.Fatalf("no graph was launched")
	}
	o.Eager = true
	before = b.Ledger()
	eager, err := m.Generate(prompts, o)
	must(t, err)
	if l := b.Ledger().Sub(before); l.GraphLaunches != 0 {
		t.Fatalf("Eager launched %d graphs", l.GraphLaunches)
	}
	for i := range prompts {
		if !slices.Equal(graph.Tokens[i], eager.Tokens[i]) || !slices.Equal(graph.LogProbs[i], eager.LogProbs[i]) {
			t.Errorf("sequence %d: graph %v %v, eager %v %v", i, graph.Tokens[i], graph.LogProbs[i], eager.Tokens[i], eager.LogProbs[i])
		}
	}
	t.Logf("graph replay and eager decode agree on %d sequences (%v tokens)", len(prompts), lens(graph.Tokens))
}

func lens(x [][]int) []int {
	var n []int
	for _, s := range x {
		n = append(n, len(s))
	}
	return n
}

var _ backend.Capturer = (*Backend)(nil)
