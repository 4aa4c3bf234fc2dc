package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

// TestPublishedConfigs runs every config.json of ../shared/data/checkpoints (byte-for-byte
// copies of published folders) through the family parser, with generation_config.json, and
// checks what each must read.
func TestPublishedConfigs(t *testing.T) {
	root := testref.SharedData(t, "checkpoints")
	type want struct {
		mt                     string
		vocab, layers, headDim int
		scaling                string
		tie                    bool
		window                 int
		eos                    []int
	}
	wants := map[string]want{
		"HuggingFaceTB__SmolLM3-3B":           {"smollm3", 128256, 36, 128, "", true, 0, []int{128012}},
		"Qwen__Qwen3-8B":                      {"qwen3", 151936, 36, 128, "", false, 0, []int{151645, 151643}},
		"google__gemma-2b-it":                 {"gemma", 256000, 18, 256, "", true, 0, []int{1}},
		"meta-llama__Llama-3.2-1B-Instruct":   {"llama", 128256, 16, 64, "llama3", true, 0, []int{128001, 128008, 128009}},
		"meta-llama__Llama-3.2-3B-Instruct":   {"llama", 128256, 28, 128, "llama3", true, 0, []int{128001, 128008, 128009}},
		"microsoft__Phi-3-mini-128k-instruct": {"phi3", 32064, 32, 96, "longrope", false, 262144, []int{32000, 32001, 32007}},
		"mistralai__Mistral-7B-Instruct-v0.3": {"mistral", 32768, 32, 128, "", false, 0, []int{2}},
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "config.json"))
	if len(dirs) != len(wants) {
		t.Errorf("%d published configs, want %d", len(dirs), len(wants))
	}
	for _, p := range dirs {
		name := filepath.Base(filepath.Dir(p))
		c, err := LoadConfig(filepath.Dir(p))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		w := wants[name]
		scaling := ""
		if c.RopeScaling != nil {
			scaling = c.RopeScaling.Type
		}
		got := want{c.ModelType, c.Vocab, c.Layers, c.HeadDim, scaling, c.TieEmbed, c.Window, c.EOS}
		if got.mt != w.mt || got.vocab != w.vocab || got.layers != w.layers || got.headDim != w.headDim ||
			got.scaling != w.scaling || got.tie != w.tie || got.window != w.window || !slices.Equal(got.eos, w.eos) {
			t.Errorf("%s: read %+v, want %+v", name, got, w)
		}
	}
}

// qwen25Config is Qwen2.5-0.5B-Instruct's config.json as published (transformers 4), at a
// tiny size.
func qwen25Config() map[string]any {
	return map[string]any{"architectures": []any{"Qwen2ForCausalLM"}, "attention_dropout": 0.0, "bos_token_id": 151643,
		"eos_token_id": 5, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
		"intermediate_size": 48, "max_position_embeddings": 64, "max_window_layers": 21, "model_type": "qwen2",
		"num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
		"rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
		"transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 160}
}

// qwen25Transformers5 is the same config as transformers 5 re-saves it: rope_parameters, dtype,
// layer_types, a null sliding_window and pad_token_id, and keys this package does not read.
func qwen25Transformers5() map[string]any {
	m := qwen25Config()
	delete(m, "rope_theta")
	delete(m, "torch_dtype")
	m["rope_parameters"] = map[string]any{"rope_theta": 1000000, "rope_type": "default"}
	m["dtype"] = "bfloat16"
	m["layer_types"] = []any{"full_attention", "full_attention", "full_attention"}
	m["sliding_window"] = nil
	m["pad_token_id"] = nil
	m["transformers_version"] = "5.0.0"
	m["unsloth_fixed"] = true
	m["attn_logit_softcapping"] = nil
	m["cache_implementation"] = "hybrid"
	m["pretraining_tp"] = 1
	return m
}

// TestQwen25Transformers5Form: the transformers 5 form of Qwen2.5's config gives the same
// logits as its transformers 4 form on the same weights (exactly: they must parse to the same
// model), and the CRLF form of the file loads too.
func TestQwen25Transformers5Form(t *testing.T) {
	c4, err := parseMap(t, qwen25Config())
	if err != nil {
		t.Fatal(err)
	}
	dir := saveAs(t, randomModel(t, *c4, 7), "BF16")
	seq := [][]int{{1, 17, 99, 4, 150, 33, 8, 2, 77, 140, 12}}
	logits := func(cfg map[string]any, crlf bool) []float32 {
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if crlf {
			b = []byte(strings.ReplaceAll(string(b), "\n", "\r\n"))
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		cache := m.NewCache(1, 16)
		defer cache.Free()
		out, err := m.Forward(cache, seq, false, AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Clone(out)
	}
	v4 := logits(qwen25Config(), false)
	v5 := logits(qwen25Transformers5(), false)
	crlf := logits(qwen25Transformers5(), true)
	if !slices.Equal(v4, v5) || !slices.Equal(v4, crlf) {
		t.Fatalf("transformers 5 form: logits differ from the transformers 4 form (worst relative %.2e, CRLF %.2e)", relErr(v5, v4), relErr(crlf, v4))
	}
}
