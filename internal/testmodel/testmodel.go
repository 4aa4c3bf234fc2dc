// Package testmodel makes the small model folders tests run GRPO and the commands on: a
// random llama with a byte-level BPE tokenizer trained on the synthetic corpus, written once
// per test binary.
package testmodel

import (
	"encoding/json"
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
	if toolDir != "" {
		os.RemoveAll(toolDir)
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

// WithChatTemplate returns a copy of the model folder src (its weights linked) that has a chat
// template: a tokenizer_config.json holding template with bos_token and eos_token set to
// "<|endoftext|>" (id 0 of the tokenizers trained here), and a tokenizer.json whose
// post-processor puts that token in front of every encoding, as a BOS. A prompt whose template
// writes {{ bos_token }} and that is then encoded with special tokens shows two of them.
func WithChatTemplate(t testing.TB, src, template string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch name := e.Name(); name {
		case "tokenizer.json", "tokenizer_config.json", "chat_template.jinja":
		default:
			abs, err := filepath.Abs(filepath.Join(src, name))
			if err == nil {
				err = os.Symlink(abs, filepath.Join(dst, name))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tj map[string]any
	if err := json.Unmarshal(b, &tj); err != nil {
		t.Fatal(err)
	}
	const bos = "<|endoftext|>"
	processors := []any{map[string]any{"type": "TemplateProcessing",
		"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": bos, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
		"pair":           []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
		"special_tokens": map[string]any{bos: map[string]any{"id": bos, "ids": []any{0}, "tokens": []any{bos}}}}}
	if pp, ok := tj["post_processor"].(map[string]any); ok {
		processors = append([]any{pp}, processors...)
	}
	tj["post_processor"] = map[string]any{"type": "Sequence", "processors": processors}
	cfg := map[string]any{"bos_token": bos, "eos_token": bos, "add_bos_token": true, "chat_template": template}
	for name, v := range map[string]any{"tokenizer.json": tj, "tokenizer_config.json": cfg} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, name), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
