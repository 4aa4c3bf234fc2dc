// Package testmodel makes the small model folders tests run GRPO and the commands on: a
// random llama with a byte-level BPE tokenizer trained on the synthetic corpus, written once
// per test binary.
package testmodel

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

var (
	once sync.Once
	dir  string
	err  error
)

// Main runs a package's tests and removes the folder Dir made: call it from TestMain as
// os.Exit(testmodel.Main(m)), or every test binary leaves a model folder in the temp folder.
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}

// Dir returns the folder (config.json, model.safetensors, tokenizer.json) of a 2-layer llama
// of dim 32 over a 400-token vocabulary, made once per test binary (removed by Main).
func Dir(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "rlhfstation-testmodel-")
		if err != nil {
			return
		}
		var texts []string
		for _, d := range synth.Generate(1, 200_000) {
			texts = append(texts, d.Text)
		}
		var tok *tokenizer.Tokenizer
		if tok, err = tokenizer.Train(texts, 400, []string{"<|endoftext|>"}); err != nil {
			return
		}
		if err = tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
			return
		}
		var m *model.Model
		m, err = model.NewRandom(model.Config{ModelType: "llama", Vocab: tok.VocabSize(), Dim: 32, Layers: 2, Heads: 4,
			KVHeads: 2, Hidden: 64, MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1, EOS: []int{0}}, 3)
		if err != nil {
			return
		}
		err = m.Save(dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
