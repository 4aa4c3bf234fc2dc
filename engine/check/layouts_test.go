package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/internal/testmodel"
)

// TestPublishedLayoutsFullSize: each published layout at its full size, as bf16 shards of
// the exact tensor names and shapes (headers real, data sparse), passes check with the
// published parameter count.
func TestPublishedLayoutsFullSize(t *testing.T) {
	want := map[string]int64{"SmolLM2-135M-Instruct": 134515008, "Qwen2.5-0.5B-Instruct": 494032768,
		"Qwen2.5-0.5B-Instruct-transformers5": 494032768, "gemma-3-270m-it": 268098176, "Llama-3.2-1B-Instruct": 1235814400}
	for name, cfg := range testmodel.PublishedLayouts() {
		src, dir := t.TempDir(), t.TempDir()
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(filepath.Join(src, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sparseFolder(t, src, dir, 2)
		r, err := Folder(dir, 0)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if w := r.Weights; w.Params != want[name] || w.Bytes != 2*w.Params || !w.TiedHead || len(w.Unused) != 0 {
			t.Errorf("%s: weights %+v, want %d parameters", name, w, want[name])
		}
	}
}

// TestTransformers5TokenizerFiles: a folder as transformers 5 saves it (the template in
// chat_template.jinja, tokenizer_config.json without added_tokens_decoder, extra_special_tokens
// as a list, model_max_length near 1e30, CRLF line endings) passes check and renders the
// template, with the config's values read from rope_parameters and dtype.
func TestTransformers5TokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	crlf := func(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }
	cfg, _ := json.MarshalIndent(testmodel.PublishedLayouts()["Qwen2.5-0.5B-Instruct-transformers5"], "", "  ")
	files := map[string][]byte{
		"config.json": crlf(string(cfg)),
		"tokenizer_config.json": crlf(`{
  "bos_token": null,
  "eos_token": "<|im_end|>",
  "pad_token": "<|endoftext|>",
  "extra_special_tokens": ["<|im_start|>", "<|im_end|>"],
  "model_max_length": 1000000000000000019884624838656,
  "tokenizer_class": "Qwen2Tokenizer",
  "clean_up_tokenization_spaces": false,
  "unsloth_fixed": true
}`),
		"chat_template.jinja":    crlf("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
		"generation_config.json": crlf(`{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643, "repetition_penalty": 1.1, "temperature": 0.7, "top_k": 20, "top_p": 0.8}`),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Folder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Template == nil || !strings.Contains(r.Template.Example, "<|im_start|>user") || !strings.Contains(r.Template.Example, "<|im_start|>assistant") {
		t.Errorf("template: %+v", r.Template)
	}
	temp, topP, topK := r.Generation.Sampling()
	if temp != 0.7 || topP != 0.8 || topK != 20 {
		t.Errorf("generation defaults %g %g %d", temp, topP, topK)
	}
	for _, s := range r.Sources {
		if s.Name == "rope_theta" && (s.Value != 1e6 || s.From != "config.json rope_parameters.rope_theta") ||
			s.Name == "dtype" && (s.Value != "bfloat16" || s.From != "config.json dtype") ||
			s.Name == "eos_token_id" && !strings.HasPrefix(s.From, "generation_config.json") {
			t.Errorf("source %+v", s)
		}
	}
}
