package model

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// factors is a longrope factor list of n values from a to b.
func factors(n int, a, b float64) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = a + (b-a)*float64(i)/float64(n-1)
	}
	return out
}

// smolRoPE is SmolLM3-3B's no_rope_layers: every fourth of its 36 layers without RoPE.
func smolRoPE() []any {
	out := make([]any, 36)
	for l := range out {
		out[l] = 1
		if (l+1)%4 == 0 {
			out[l] = 0
		}
	}
	return out
}

// familyConfigs are config.json files with the keys and sizes of the checkpoints each
// family is used with (the long factor lists shortened to made-up values of the right
// length).
func familyConfigs() map[string]map[string]any {
	return map[string]map[string]any{
		"Qwen3-0.6B": {"architectures": []any{"Qwen3ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
			"initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
			"model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
			"rms_norm_eps": 1e-06, "rope_scaling": nil, "rope_theta": 1000000, "sliding_window": nil,
			"tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
			"vocab_size": 151936},
		"gemma-2b": {"architectures": []any{"GemmaForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 2, "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048,
			"initializer_range": 0.02, "intermediate_size": 16384, "max_position_embeddings": 8192, "model_type": "gemma",
			"num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1, "pad_token_id": 0,
			"rms_norm_eps": 1e-06, "rope_scaling": nil, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "vocab_size": 256000},
		"gemma-2-2b-it": {"architectures": []any{"Gemma2ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": []any{1, 107},
			"final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
			"hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "intermediate_size": 9216,
			"max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26,
			"num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
			"rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32", "vocab_size": 256000},
		"gemma-3-1b-it": {"architectures": []any{"Gemma3ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"attn_logit_softcapping": nil, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": []any{1, 106},
			"final_logit_softcapping": nil, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
			"initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
			"model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
			"pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
			"rope_scaling": nil, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
			"torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 262144},
		"SmolLM3-3B": {"architectures": []any{"SmolLM3ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": nil, "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
			"intermediate_size": 11008, "max_position_embeddings": 65536, "max_window_layers": 28, "mlp_bias": false,
			"model_type": "smollm3", "no_rope_layer_interval": 4, "no_rope_layers": smolRoPE(), "num_attention_heads": 16,
			"num_hidden_layers": 36, "num_key_value_heads": 4, "pad_token_id": 128004, "rms_norm_eps": 1e-06,
			"rope_scaling": nil, "rope_theta": 5000000.0, "sliding_window": nil, "tie_word_embeddings": true,
			"torch_dtype": "bfloat16", "use_cache": false, "use_sliding_window": false, "vocab_size": 128256},
		"OLMo-2-0425-1B": {"architectures": []any{"Olmo2ForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": nil, "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
			"intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 16,
			"num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
			"rope_scaling": nil, "rope_theta": 500000, "tie_word_embeddings": false, "torch_dtype": "float32",
			"use_cache": true, "vocab_size": 100352},
		"Phi-3-mini-4k-instruct": {"architectures": []any{"Phi3ForCausalLM"}, "attention_bias": false,
			"attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
			"hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
			"model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
			"original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
			"rope_scaling": nil, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
			"torch_dtype": "bfloat16", "vocab_size": 32064},
		"Phi-4-mini-instruct": {"architectures": []any{"Phi3ForCausalLM"}, "attention_bias": false,
			"attention_dropout": 0.0, "bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999,
			"full_attn_mod": 1, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
			"intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": false, "max_position_embeddings": 131072,
			"mlp_bias": false, "model_type": "phi3", "num_attention_heads": 24, "num_hidden_layers": 32,
			"num_key_value_heads": 8, "original_max_position_embeddings": 4096, "pad_token_id": 199999,
			"partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
			"rope_scaling": map[string]any{"long_factor": factors(48, 1, 50), "short_factor": factors(48, 1, 3), "type": "longrope"},
			"rope_theta":   10000.0, "sliding_window": 262144, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
			"vocab_size": 200064},
	}
}

func parseMap(t *testing.T, m map[string]any) (*Config, error) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return ParseConfig(b)
}

// TestFamilyConfigs: each family's config.json keys land in the fields the layer loop reads.
func TestFamilyConfigs(t *testing.T) {
	type want struct {
		c      Config
		window []int // per layer, checked when set
		local  []bool
	}
	gemma2Windows := make([]int, 26)
	for l := range gemma2Windows {
		if l%2 == 0 {
			gemma2Windows[l] = 4096
		}
	}
	gemma3Windows, gemma3Local := make([]int, 26), make([]bool, 26)
	for l := range gemma3Windows {
		if (l+1)%6 != 0 {
			gemma3Windows[l], gemma3Local[l] = 512, true
		}
	}
	wants := map[string]want{
		"Qwen3-0.6B": {c: Config{ModelType: "qwen3", Vocab: 151936, Dim: 1024, Layers: 28, Heads: 16, KVHeads: 8,
			HeadDim: 128, Hidden: 3072, MaxPos: 40960, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: 151643,
			EOS: []int{151645}, MLP: SwiGLU, QKNorm: true}},
		"gemma-2b": {c: Config{ModelType: "gemma", Vocab: 256000, Dim: 2048, Layers: 18, Heads: 8, KVHeads: 1,
			HeadDim: 256, Hidden: 16384, MaxPos: 8192, NormEps: 1e-6, RopeTheta: 10000, TieEmbed: true, BOS: 2,
			EOS: []int{1}, MLP: GeGLU, NormOffset: 1, EmbedScale: math.Sqrt(2048)}},
		"gemma-2-2b-it": {c: Config{ModelType: "gemma2", Vocab: 256000, Dim: 2304, Layers: 26, Heads: 8, KVHeads: 4,
			HeadDim: 256, Hidden: 9216, MaxPos: 8192, NormEps: 1e-6, RopeTheta: 10000, TieEmbed: true, BOS: 2,
			EOS: []int{1, 107}, Window: 4096, MLP: GeGLU, NormOffset: 1, EmbedScale: math.Sqrt(2304), Sandwich: true,
			QueryScale: 256, AttnSoftcap: 50, FinalSoftcap: 30}, window: gemma2Windows, local: make([]bool, 26)},
		"gemma-3-1b-it": {c: Config{ModelType: "gemma3_text", Vocab: 262144, Dim: 1152, Layers: 26, Heads: 4, KVHeads: 1,
			HeadDim: 256, Hidden: 6912, MaxPos: 32768, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: 2,
			EOS: []int{1, 106}, Window: 512, MLP: GeGLU, NormOffset: 1, EmbedScale: math.Sqrt(1152), Sandwich: true,
			QKNorm: true, QueryScale: 256, LocalRopeTheta: 10000}, window: gemma3Windows, local: gemma3Local},
		"SmolLM3-3B": {c: Config{ModelType: "smollm3", Vocab: 128256, Dim: 2048, Layers: 36, Heads: 16, KVHeads: 4,
			HeadDim: 128, Hidden: 11008, MaxPos: 65536, NormEps: 1e-6, RopeTheta: 5e6, TieEmbed: true, BOS: -1,
			EOS: []int{128012}, MLP: SwiGLU}},
		"OLMo-2-0425-1B": {c: Config{ModelType: "olmo2", Vocab: 100352, Dim: 2048, Layers: 16, Heads: 16, KVHeads: 16,
			HeadDim: 128, Hidden: 8192, MaxPos: 4096, NormEps: 1e-6, RopeTheta: 500000, BOS: -1, EOS: []int{100257},
			MLP: SwiGLU, QKNorm: true, PostNorm: true, QKNormFull: true}},
		"Phi-3-mini-4k-instruct": {c: Config{ModelType: "phi3", Vocab: 32064, Dim: 3072, Layers: 32, Heads: 32,
			KVHeads: 32, HeadDim: 96, Hidden: 8192, MaxPos: 4096, NormEps: 1e-5, RopeTheta: 10000, Window: 2047, BOS: 1,
			EOS: []int{32000}, MLP: SwiGLU, Fused: true}},
		"Phi-4-mini-instruct": {c: Config{ModelType: "phi3", Vocab: 200064, Dim: 3072, Layers: 32, Heads: 24,
			KVHeads: 8, HeadDim: 128, Hidden: 8192, MaxPos: 131072, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true,
			Window: 262144, BOS: 199999, EOS: []int{199999}, MLP: SwiGLU, Fused: true, RotaryDim: 96}},
	}
	for name, raw := range familyConfigs() {
		t.Run(name, func(t *testing.T) {
			c, err := parseMap(t, raw)
			if err != nil {
				t.Fatal(err)
			}
			w := wants[name]
			got := *c
			got.Sliding, got.RopeScaling, got.NoRoPE = nil, nil, nil
			if !reflect.DeepEqual(got, w.c) {
				t.Errorf("parsed\n %+v\nwant\n %+v", got, w.c)
			}
			for l := range c.Layers {
				if want := name != "SmolLM3-3B" || (l+1)%4 != 0; c.RoPE(l) != want {
					t.Errorf("layer %d rotates: %v, want %v", l, c.RoPE(l), want)
				}
			}
			for l, win := range w.window {
				if c.LayerWindow(l) != win || c.LocalRoPE(l) != w.local[l] {
					t.Errorf("layer %d: window %d local rope %v, want %d %v", l, c.LayerWindow(l), c.LocalRoPE(l), win, w.local[l])
				}
			}
			// the config.json Save writes reads back into the same configuration
			back, err := json.Marshal(c.hfJSON())
			if err != nil {
				t.Fatal(err)
			}
			c2, err := ParseConfig(back)
			if err != nil {
				t.Fatalf("own config.json refused: %v\n%s", err, back)
			}
			if !reflect.DeepEqual(c, c2) {
				t.Errorf("round trip through hfJSON changed\n %+v\ninto\n %+v\n%s", c, c2, back)
			}
		})
	}
}

// TestLongRoPE: Phi-4-mini's longrope scaling — the short factors divide the inverse
// frequencies of the 96 rotated dimensions, cos and sin are scaled by √(1 + ln 32 / ln 4096),
// and the context is the original 4096 positions.
func TestLongRoPE(t *testing.T) {
	c, err := parseMap(t, familyConfigs()["Phi-4-mini-instruct"])
	if err != nil {
		t.Fatal(err)
	}
	inv := c.InvFreq()
	if len(inv) != 48 {
		t.Fatalf("%d frequencies, want 48", len(inv))
	}
	short := factors(48, 1, 3)
	for i, f := range inv {
		want := 1 / (short[i].(float64) * math.Pow(10000, float64(2*i)/96))
		if math.Abs(f-want) > 1e-15*want {
			t.Errorf("inv_freq[%d] = %g, want %g", i, f, want)
		}
	}
	if got, want := c.RopeAttentionFactor(), math.Sqrt(1+math.Log(32)/math.Log(4096)); math.Abs(got-want) > 1e-15 {
		t.Errorf("attention factor %g, want %g", got, want)
	}
	if c.Context() != 131072 { // the long factors past 4096
		t.Errorf("context %d, want 131072", c.Context())
	}
	if c.LocalInvFreq() != nil {
		t.Error("phi3 has no local RoPE")
	}
}

// TestGemma3RopeParameters: transformers 5 writes gemma3's RoPE per layer type.
func TestGemma3RopeParameters(t *testing.T) {
	raw := familyConfigs()["gemma-3-1b-it"]
	delete(raw, "rope_theta")
	delete(raw, "rope_local_base_freq")
	delete(raw, "rope_scaling")
	raw["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0},
	}
	c, err := parseMap(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	if c.RopeTheta != 1e6 || c.LocalRopeTheta != 1e4 || c.RopeScaling == nil || c.RopeScaling.Type != "linear" || c.RopeScaling.Factor != 8 {
		t.Fatalf("theta %g local %g scaling %+v", c.RopeTheta, c.LocalRopeTheta, c.RopeScaling)
	}
	if g, l := c.InvFreq()[1], c.LocalInvFreq()[1]; math.Abs(g-math.Pow(1e6, -2.0/256)/8) > 1e-18 || math.Abs(l-math.Pow(1e4, -2.0/256)) > 1e-18 {
		t.Errorf("global %g local %g", g, l)
	}
	raw["rope_parameters"].(map[string]any)["sliding_attention"] = map[string]any{"rope_type": "linear", "factor": 2.0}
	if _, err := parseMap(t, raw); err == nil || !strings.Contains(err.Error(), "sliding_attention") {
		t.Errorf("scaled local RoPE accepted: %v", err)
	}
}

// TestFamilyConfigErrors: keys a family does not have, and maths this package does not
// implement, are refused with the key named.
func TestFamilyConfigErrors(t *testing.T) {
	cases := []struct {
		name, base string
		edit       func(m map[string]any)
		want       string
	}{
		{"softcapping on qwen3", "Qwen3-0.6B", func(m map[string]any) { m["attn_logit_softcapping"] = 50.0 }, "attn_logit_softcapping is not part of qwen3"},
		{"final softcapping on gemma 1", "gemma-2b", func(m map[string]any) { m["final_logit_softcapping"] = 30.0 }, "final_logit_softcapping is not part of gemma"},
		{"query scalar on phi3", "Phi-3-mini-4k-instruct", func(m map[string]any) { m["query_pre_attn_scalar"] = 96 }, "query_pre_attn_scalar is not part of phi3"},
		{"local rope base on gemma2", "gemma-2-2b-it", func(m map[string]any) { m["rope_local_base_freq"] = 10000 }, "rope_local_base_freq is not part of gemma2"},
		{"pattern on gemma2", "gemma-2-2b-it", func(m map[string]any) { m["sliding_window_pattern"] = 2 }, "sliding_window_pattern is not part of gemma2"},
		{"partial rotary on qwen3", "Qwen3-0.6B", func(m map[string]any) { m["partial_rotary_factor"] = 0.5 }, "partial_rotary_factor is not supported for qwen3"},
		{"sliding layers on qwen3", "Qwen3-0.6B", func(m map[string]any) {
			lt := make([]any, 28)
			for i := range lt {
				lt[i] = "full_attention"
			}
			lt[3] = "sliding_attention"
			m["layer_types"] = lt
		}, `layer_types[3] "sliding_attention" is not supported for qwen3`},
		{"qwen3 sliding window", "Qwen3-0.6B", func(m map[string]any) { m["use_sliding_window"] = true }, "use_sliding_window"},
		{"layer types of the wrong length", "gemma-3-1b-it", func(m map[string]any) { m["layer_types"] = []any{"full_attention"} }, "layer_types has 1 entries for 26 layers"},
		{"layer types not strings", "gemma-3-1b-it", func(m map[string]any) { m["layer_types"] = []any{1, 2} }, "layer_types: want a list of strings"},
		{"mrope on qwen3", "Qwen3-0.6B", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "mrope", "mrope_section": []any{16, 24, 24}}
		}, `rope_scaling type "mrope" is not supported`},
		{"yarn with a negative factor", "Qwen3-0.6B", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": -4.0, "original_max_position_embeddings": 32768}
		}, `rope_scaling yarn needs a positive factor`},
		{"dynamic below 1", "gemma-2-2b-it", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "dynamic", "factor": 0.5} }, `rope_scaling dynamic needs a factor of at least 1`},
		{"longrope factors of the wrong length", "Phi-4-mini-instruct", func(m map[string]any) {
			m["rope_scaling"].(map[string]any)["short_factor"] = factors(64, 1, 2)
		}, "short_factor and long_factor need 48 values each"},
		{"longrope factor not a number", "Phi-4-mini-instruct", func(m map[string]any) {
			m["rope_scaling"].(map[string]any)["long_factor"] = []any{"1"}
		}, "rope_scaling.long_factor: want a list of numbers"},
		{"longrope without factors", "Phi-4-mini-instruct", func(m map[string]any) { delete(m["rope_scaling"].(map[string]any), "short_factor") }, "missing short_factor"},
		{"odd rotated part", "Phi-4-mini-instruct", func(m map[string]any) { m["partial_rotary_factor"] = 45.0 / 128 }, "partial_rotary_factor 0.3515625 gives 45 rotated dimensions"},
		{"exact GELU on gemma2", "gemma-2-2b-it", func(m map[string]any) { m["hidden_activation"] = "gelu" }, `hidden_activation "gelu" is not supported`},
		{"GELU on qwen3", "Qwen3-0.6B", func(m map[string]any) { m["hidden_act"] = "gelu_pytorch_tanh" }, `hidden_act "gelu_pytorch_tanh"`},
		{"bidirectional", "gemma-3-1b-it", func(m map[string]any) { m["use_bidirectional_attention"] = true }, "use_bidirectional_attention"},
		{"negative softcap", "gemma-2-2b-it", func(m map[string]any) { m["attn_logit_softcapping"] = -1.0 }, "attn_logit_softcapping -1 must be positive"},
		{"softcap as a string", "gemma-2-2b-it", func(m map[string]any) { m["final_logit_softcapping"] = "30" }, `final_logit_softcapping: want a number, got the string "30"`},
		{"NoPE layers on llama", "Qwen3-0.6B", func(m map[string]any) { m["no_rope_layer_interval"] = 4 }, "no_rope_layers is not part of qwen3"},
		{"short no_rope_layers", "SmolLM3-3B", func(m map[string]any) { m["no_rope_layers"] = []any{1, 1} }, "no_rope_layers has 2 entries for 36 layers"},
		{"no_rope_layers not a flag", "SmolLM3-3B", func(m map[string]any) { m["no_rope_layers"].([]any)[5] = 2 }, "no_rope_layers[5] is 2"},
		{"image-text gemma3", "gemma-3-1b-it", func(m map[string]any) { m["model_type"] = "gemma3" }, `model_type "gemma3" (the image-text model)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := familyConfigs()[c.base]
			c.edit(m)
			_, err := parseMap(t, m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// gemma2's soft-capping defaults apply when the keys are absent, and null turns them off
	m := familyConfigs()["gemma-2-2b-it"]
	delete(m, "attn_logit_softcapping")
	m["final_logit_softcapping"] = nil
	c, err := parseMap(t, m)
	if err != nil || c.AttnSoftcap != 50 || c.FinalSoftcap != 0 {
		t.Errorf("gemma2 defaults: attn %v final %v (%v)", c.AttnSoftcap, c.FinalSoftcap, err)
	}
}
