package cli

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
	"rlhfstation/safetensors"
)

// shrink is a published config.json at a test's size: the same keys and forms (scalar or
// list eos, layer_types, rope tables, null values), smaller numbers, the test tokenizer's
// vocabulary.
func shrink(published map[string]any, vocab int) map[string]any {
	c := maps.Clone(published)
	c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"] = 32, 48, 2, vocab
	c["num_attention_heads"], c["num_key_value_heads"] = 4, 2
	if c["model_type"] == "gemma3_text" {
		c["num_key_value_heads"] = 1
	}
	if _, ok := c["head_dim"]; ok {
		c["head_dim"] = 8
	}
	if lt, ok := c["layer_types"].([]any); ok {
		c["layer_types"] = []any{lt[0], "full_attention"}
	}
	if _, ok := c["eos_token_id"].([]any); ok {
		c["eos_token_id"] = []any{0, 1}
	} else {
		c["eos_token_id"] = 0
	}
	c["bos_token_id"] = 0
	if c["pad_token_id"] != nil {
		c["pad_token_id"] = 0
	}
	return c
}

// publishedDir writes a random-weight folder of a published layout at a test's size: config.json
// as published (shrunk), bf16 weights under the published names, the test tokenizer.
func publishedDir(t *testing.T, published map[string]any) string {
	t.Helper()
	src := filepath.Join(testmodel.Dir(t), "tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.MarshalIndent(shrink(published, tok.VocabSize()), "", "  ")
	c, err := model.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(*c, 9)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveAs(dir, safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	copyFile(t, src, filepath.Join(dir, "tokenizer.json"))
	return dir
}

// TestPublishedLayoutsEndToEnd: random-weight folders of SmolLM2-135M-Instruct,
// Qwen2.5-0.5B-Instruct (transformers 4 and 5 forms), gemma-3-270m-it and Llama-3.2-1B-Instruct
// (their published config.json keys and tensor names, at a test's size: the full sizes are
// checked from headers in engine/check) load, score, generate and run two GRPO steps with
// --batch on the CPU; and a prequantized bitsandbytes 4-bit folder (what `quantize` writes,
// bitsandbytes' layout) runs as it is: the 4-bit bytes the model computes with are the file's.
// With -short only the transformers 5 Qwen2.5 folder and the 4-bit one run --batch.
func TestPublishedLayoutsEndToEnd(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	layouts := testmodel.PublishedLayouts()
	// a two-line prompt file: the baselines are scored on it, not on the built-in corpus
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\nThe river ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := func(t *testing.T, dir string) {
		runs := t.TempDir()
		code, out, errOut := runCaptured(t, "--batch", "--model", dir, "--data", data, "--out", runs, "--steps", "2", "--batch-size", "1",
			"--num-generations", "2", "--max-completion-length", "4", "--run-name", "r", "--device", "cpu")
		if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
			t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(layouts)) {
		t.Run(name, func(t *testing.T) {
			dir := publishedDir(t, layouts[name])
			if code, _, errOut := runCaptured(t, "check", "--model", dir); code != 0 {
				t.Fatalf("check: exit %d: %s", code, errOut)
			}
			code, out, errOut := runCaptured(t, "score", "--model", dir, "--json", "Two plus two is four.")
			if code != 0 || !strings.Contains(out, `"logprobs"`) {
				t.Fatalf("score: exit %d: %s", code, errOut)
			}
			if code, _, errOut = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "4", "Once upon a time"); code != 0 {
				t.Fatalf("generate: exit %d: %s", code, errOut)
			}
			if !testing.Short() || name == "Qwen2.5-0.5B-Instruct-transformers5" {
				batch(t, dir)
			}
			if name != "SmolLM2-135M-Instruct" {
				return
			}
			q := filepath.Join(t.TempDir(), "bnb-4bit")
			if code, _, errOut = runCaptured(t, "quantize", "--model", dir, "--out", q); code != 0 {
				t.Fatalf("quantize: exit %d: %s", code, errOut)
			}
			m, err := model.Load(q)
			if err != nil {
				t.Fatal(err)
			}
			set, err := safetensors.OpenSet(q)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			n := 0
			for _, l := range m.Linears() {
				w, ok := l.W.(*model.Quantized)
				if !ok {
					continue
				}
				file, err := set.Bytes(l.Name + ".weight")
				if err != nil || !bytes.Equal(file, w.W.Packed) {
					t.Fatalf("%s: the 4-bit codes differ from the file's (%v)", l.Name, err)
				}
				n++
			}
			if n != 2*7 {
				t.Fatalf("%d linears 4-bit, want 14", n)
			}
			batch(t, q)
		})
	}
}
