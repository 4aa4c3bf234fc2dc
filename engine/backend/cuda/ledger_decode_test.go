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

// decodeStructure is Qwen2.5-0.5B's structure (24 layers, 14 query and 2 key/value heads,
// q/k/v biases, tied head) at small widths: the calls of a decode step per layer and per
// token do not depend on the widths, and the stand-in runs it in seconds.
var decodeStructure = model.Config{ModelType: "qwen2", Vocab: 512, Dim: 112, Layers: 24, Heads: 14, KVHeads: 2, Hidden: 224,
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

// TestLedgerDecodeStep prints and checks the model's own decode step per token (model.Generate
// on the CUDA backend) at 8 and 32 sequences against issue 31's budget: at most 2 graph
// launches, 2 host copies and 1 sync a token, at most 20 graph nodes a layer, no cast kernels.
// A token's share is the difference of two generations of 3 and 7 tokens, over 4: what a
// generation costs once (prefill, the step's buffers and adapter copies, the capture) cancels.
func TestLedgerDecodeStep(t *testing.T) {
	b := testBackend(t)
	m := decodeModel(t, b)
	L := int64(decodeStructure.Layers)
	_, err := m.Generate([][]int{{1, 2}}, model.GenerateOptions{MaxNewTokens: 2}) // the weights placed on the device
	must(t, err)
	for _, seqs := range []int{8, 32} {
		rng := rand.New(rand.NewPCG(uint64(seqs), 1))
		prompts := make([][]int, seqs)
		for i := range prompts {
			for j := 0; j < 6+i%5; j++ { // ragged lengths
				prompts[i] = append(prompts[i], rng.IntN(decodeStructure.Vocab))
			}
		}
		gen := func(n int) Ledger {
			before := b.Ledger()
			_, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: n, Temperature: 1, Seed: 7, NoEOS: true})
			must(t, err)
			must(t, b.Sync())
			return b.Ledger().Sub(before)
		}
		gen(3) // warm-up: the prefill's 4-bit weights expanded once and kept (expandedQ4)
		short, long := gen(3), gen(7)
		d := long.Sub(short)
		const n = 4
		per := func(x int64) float64 { return float64(x) / n }
		casts := d.LaunchedPrefix("cast_")
		t.Logf("decode token, 0.5B structure, %d sequences: %.1f graph launches, %.1f graph nodes (%.1f a layer), %.1f kernels outside graphs, "+
			"%.1f cuBLAS calls outside graphs, %.1f host→device and %.1f device→host copies, %.1f syncs, %.1f cast kernels",
			seqs, per(d.GraphLaunches), per(d.GraphNodes()), per(d.GraphNodes())/float64(L), per(d.Launches()), per(d.BLAS.N),
			per(d.HtoD.N), per(d.DtoH.N), per(d.Syncs), per(casts))
		if testing.Verbose() {
			t.Logf("per-token nodes by kernel: %v", nodesPer(d, n))
		}
		switch {
		case d.GraphLaunches > 2*n, d.Copies() > 2*n, d.Syncs > 1*n, d.GraphNodes() > 20*L*n, casts != 0:
			t.Errorf("%d sequences: over the decode budget (2 graph launches, 2 host copies, 1 sync a token, 20 nodes a layer, no casts)", seqs)
		case d.Launches() != 0 || d.BLAS.N != 0:
			t.Errorf("%d sequences: %d kernels and %d cuBLAS calls outside the graph over %d tokens", seqs, d.Launches(), d.BLAS.N, n)
		}
	}
}

func nodesPer(l Ledger, n int64) map[string]float64 {
	out := map[string]float64{}
	for k, c := range l.Nodes {
		out[k] = float64(c.N) / float64(n)
	}
	return out
}

// TestDecodeGraphMatchesEager: the decode step replayed as a CUDA graph gives the tokens and
// log-probs of the same step run op by op (GenerateOptions.Eager), with the same seed.
func TestDecodeGraphMatchesEager(t *testing.T) {
	b := testBackend(t)
	m := decodeModel(t, b)
	rng := rand.New(rand.NewPCG(5, 1))
	prompts := make([][]int, 6)
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
