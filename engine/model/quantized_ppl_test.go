package model

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/quant"
)

// builtinDir is the built-in model's folder in the source tree (engine/builtin/model), read
// by path so that this package does not depend on the embedding one.
const builtinDir = "../builtin/model"

// heldOutSeed is a synthetic-corpus seed no pretraining run uses (the built-in model is made
// from seed 1).
const heldOutSeed = 999

// heldOut returns up to maxTokens tokens of held-out synthetic text as sequences of at most
// seqLen tokens, one document each (longer documents cut). Without a tokenizer the bytes are
// the ids.
func heldOut(tok *tokenizer.Tokenizer, maxTokens, seqLen int) [][]int {
	var seqs [][]int
	n := 0
	for _, d := range synth.Generate(heldOutSeed, 8*maxTokens) {
		var ids []int
		if tok != nil {
			ids = tok.Encode(d.Text, false).IDs
		} else {
			for _, b := range []byte(d.Text) {
				ids = append(ids, int(b))
			}
		}
		ids = ids[:min(len(ids), seqLen, maxTokens-n)]
		if len(ids) < 2 {
			break
		}
		seqs = append(seqs, ids)
		n += len(ids)
	}
	return seqs
}

// perplexity is exp of the mean next-token NLL over every token that has a context.
func perplexity(t *testing.T, m *Model, seqs [][]int) (float64, int) {
	t.Helper()
	lp, err := m.LogProbs(seqs, 1, AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	n := 0
	for _, s := range lp {
		for _, v := range s[1:] {
			sum -= float64(v)
			n++
		}
	}
	return math.Exp(sum / float64(n)), n
}

// The perplexity change from quantizing the base, on held-out synthetic text: the built-in
// model when its folder is in the tree (else a random model of its shape, said in the log),
// float32 against NF4 and FP4 (blocks of 64, with and without double quantization).
func TestQuantizedPerplexity(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	load := func() (*Model, *tokenizer.Tokenizer, string) {
		if _, err := os.Stat(filepath.Join(builtinDir, "config.json")); err != nil {
			m, err := NewRandom(builtinShape(), 1)
			if err != nil {
				t.Fatal(err)
			}
			return m, nil, "a random llama of the built-in shape (the built-in model is not in the tree); byte ids"
		}
		m, err := Load(builtinDir)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.Load(filepath.Join(builtinDir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		return m, tok, "the built-in model " + builtinDir
	}
	m, tok, what := load()
	seqs := heldOut(tok, 4096, m.Config.MaxPos)
	base, n := perplexity(t, m, seqs)
	t.Logf("%s, held-out synthetic text (seed %d): %d sequences, %d scored tokens", what, heldOutSeed, len(seqs), n)
	t.Logf("%-22s ppl %8.4f  resident %8.3f MiB", "float32", base, float64(m.ResidentBytes())/(1<<20))
	for _, c := range []struct {
		name  string
		opt   quant.Options
		bound float64 // largest relative ppl increase accepted
	}{
		{"nf4 double-quant", quant.Default(), 0.03},
		{"nf4", quant.Options{Type: quant.NF4, BlockSize: 64}, 0.03},
		{"fp4 double-quant", quant.Options{Type: quant.FP4, BlockSize: 64, DoubleQuant: true}, 0.05},
	} {
		q, _, _ := load()
		if _, _, err := q.Quantize(c.opt); err != nil {
			t.Fatal(err)
		}
		ppl, _ := perplexity(t, q, seqs)
		qp, qb := q.QuantStats()
		change := ppl/base - 1
		t.Logf("%-22s ppl %8.4f  (%+.2f%%)  resident %8.3f MiB, %.4f bits per quantized parameter",
			c.name, ppl, 100*change, float64(q.ResidentBytes())/(1<<20), 8*float64(qb)/float64(qp))
		if math.IsNaN(ppl) || change > c.bound || change < -c.bound {
			t.Errorf("%s: perplexity %.4f against %.4f in float32 (%+.2f%%), outside ±%.0f%%", c.name, ppl, base, 100*change, 100*c.bound)
		}
	}
}
