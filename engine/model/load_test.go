package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/safetensors"
)

// editConfig rewrites dir/config.json through fn.
func editConfig(t *testing.T, dir string, fn func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rewriteTensors rewrites dir/model.safetensors through fn over its tensors.
func rewriteTensors(t *testing.T, dir string, fn func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	path := filepath.Join(dir, safetensors.SingleFile)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		v, shape, _ := f.Float32(n)
		ts = append(ts, safetensors.F32Tensor(n, shape, v))
	}
	f.Close()
	if err := safetensors.Write(path, fn(ts), nil); err != nil {
		t.Fatal(err)
	}
}

// TestLoadErrors: every bad folder gives an error naming what is wrong, never a panic.
func TestLoadErrors(t *testing.T) {
	base := func(t *testing.T, name string) string {
		return saveAs(t, randomModel(t, tinyConfigs()[name], 1), safetensors.F32)
	}
	cases := []struct {
		name  string
		model string
		edit  func(t *testing.T, dir string)
		want  []string // substrings of the error
	}{
		{"no config", "llama-gqa", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "config.json")) }, []string{"config.json"}},
		{"config not JSON", "llama-gqa", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "config.json"), []byte("{nope"), 0o644)
		}, []string{"config.json", "JSON"}},
		{"unknown model_type", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["model_type"] = "mamba" })
		}, []string{"config.json", `model_type "mamba"`}},
		{"missing size", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { delete(m, "hidden_size") })
		}, []string{"config.json", "hidden_size"}},
		{"bad GQA", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["num_key_value_heads"] = 3 })
		}, []string{"num_key_value_heads 3"}},
		{"rope scaling mrope", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "mrope", "factor": 4} })
		}, []string{"config.json", `rope_scaling type "mrope"`}},
		{"rope_theta as a string", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["rope_theta"] = "500000" })
		}, []string{"config.json", `rope_theta: want a number, got the string "500000"`}},
		{"hidden_size as a string", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["hidden_size"] = "192" })
		}, []string{"config.json", `hidden_size: want an integer, got the string "192"`}},
		{"tie_word_embeddings as a string", "gpt2-tied", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["tie_word_embeddings"] = "false" })
		}, []string{"config.json", `tie_word_embeddings: want a bool, got the string "false"`}},
		{"rope factor as a string", "llama-gqa", func(t *testing.T, d string) {
			editConfig(t, d, func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": "4"} })
		}, []string{"config.json", `rope_scaling.factor: want a number, got the string "4"`}},
		{"NaN weight", "llama-gqa", func(t *testing.T, d string) {
			rewriteTensors(t, d, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i, x := range ts {
					if x.Name == "model.layers.1.mlp.up_proj.weight" {
						v := make([]float32, x.Shape[0]*x.Shape[1])
						v[7] = float32(math.NaN())
						ts[i] = safetensors.F32Tensor(x.Name, x.Shape, v)
					}
				}
				return ts
			})
		}, []string{"model.safetensors", "model.layers.1.mlp.up_proj.weight", "NaN at index 7"}},
		{"no weights", "llama-gqa", func(t *testing.T, d string) { os.Remove(filepath.Join(d, "model.safetensors")) }, []string{"model.safetensors"}},
		{"truncated weights", "gpt2-tied", func(t *testing.T, d string) {
			p := filepath.Join(d, "model.safetensors")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-100)
		}, []string{"model.safetensors"}},
		{"missing tensor", "llama-gqa", func(t *testing.T, d string) {
			rewriteTensors(t, d, func(ts []safetensors.Tensor) []safetensors.Tensor {
				return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return x.Name == "model.layers.1.mlp.up_proj.weight" })
			})
		}, []string{"model.safetensors", "model.layers.1.mlp.up_proj.weight", "missing"}},
		{"wrong shape", "gpt2-tied", func(t *testing.T, d string) {
			rewriteTensors(t, d, func(ts []safetensors.Tensor) []safetensors.Tensor {
				for i, x := range ts {
					if x.Name == "transformer.h.0.attn.c_attn.weight" {
						v := make([]float32, 96*32)
						ts[i] = safetensors.F32Tensor(x.Name, []int{96, 32}, v)
					}
				}
				return ts
			})
		}, []string{"transformer.h.0.attn.c_attn.weight", "[96 32]", "expected [32 96]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := base(t, c.model)
			c.edit(t, dir)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestInputErrors(t *testing.T) {
	m := randomModel(t, tinyConfigs()["llama-gqa"], 1)
	long := make([]int, m.Config.MaxPos+1)
	if _, err := m.Generate([][]int{long}, GenerateOptions{MaxNewTokens: 1}); err == nil || !strings.Contains(err.Error(), "context of 64") {
		t.Errorf("long prompt: %v", err)
	}
	if _, err := m.LogProbs([][]int{long}, 1, AdaptersOn); err == nil || !strings.Contains(err.Error(), "context of 64") {
		t.Errorf("long sequence: %v", err)
	}
	if _, err := m.LogProbs([][]int{{1, m.Config.Vocab}}, 1, AdaptersOn); err == nil || !strings.Contains(err.Error(), "token id 200") {
		t.Errorf("bad id: %v", err)
	}
	c := m.NewCache(1, 4)
	if _, err := m.Forward(c, [][]int{{1, 2, 3, 4, 5}}, true, AdaptersOn); err == nil || !strings.Contains(err.Error(), "capacity 4") {
		t.Errorf("cache overflow: %v", err)
	}
	if _, err := m.Generate([][]int{{}}, GenerateOptions{MaxNewTokens: 1}); err == nil {
		t.Error("empty prompt: no error")
	}
}

// TestSaveLoadVariants: what Save writes loads back identically; GPT-2 weights without the
// transformer. prefix load; an absent lm_head.weight ties the head; sharded folders load;
// generation_config.json adds its eos ids; rope_theta may sit in rope_parameters.
func TestSaveLoadVariants(t *testing.T) {
	m := randomModel(t, tinyConfigs()["gpt2-untied"], 2)
	dir := saveAs(t, m, safetensors.F32)
	same := func(t *testing.T, a, b *Model) {
		t.Helper()
		for _, p := range a.Params {
			q, ok := b.Param(p.Name)
			if !ok || !slices.Equal(p.Data, q.Data) {
				t.Fatalf("tensor %s differs after the round trip", p.Name)
			}
		}
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	same(t, m, back)
	if back.Config.TieEmbed || back.Head == back.Embed {
		t.Fatal("untied head came back tied")
	}

	t.Run("no prefix, no head", func(t *testing.T) {
		rewriteTensors(t, dir, func(ts []safetensors.Tensor) []safetensors.Tensor {
			out := ts[:0]
			for _, x := range ts {
				if x.Name == "lm_head.weight" {
					continue
				}
				x.Name = strings.TrimPrefix(x.Name, "transformer.")
				out = append(out, x)
			}
			return out
		})
		b, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if b.Head != b.Embed || !b.Config.TieEmbed {
			t.Fatal("missing lm_head.weight did not tie the head")
		}
		p, _ := b.Param("transformer.h.1.mlp.c_fc.weight")
		q, _ := m.Param("transformer.h.1.mlp.c_fc.weight")
		if !slices.Equal(p.Data, q.Data) {
			t.Fatal("unprefixed tensors loaded differently")
		}
	})

	t.Run("sharded", func(t *testing.T) {
		lm := randomModel(t, tinyConfigs()["qwen2-bias"], 3)
		d := saveAs(t, lm, safetensors.F32)
		f, _ := safetensors.Open(filepath.Join(d, safetensors.SingleFile))
		shards := [2][]safetensors.Tensor{}
		index := map[string]string{}
		for i, n := range f.Names() {
			v, shape, _ := f.Float32(n)
			file := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i%2]
			shards[i%2] = append(shards[i%2], safetensors.BF16Tensor(n, shape, v))
			index[n] = file
		}
		f.Close()
		os.Remove(filepath.Join(d, safetensors.SingleFile))
		safetensors.Write(filepath.Join(d, "model-00001-of-00002.safetensors"), shards[0], nil)
		safetensors.Write(filepath.Join(d, "model-00002-of-00002.safetensors"), shards[1], nil)
		js, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": index})
		os.WriteFile(filepath.Join(d, safetensors.IndexFile), js, 0o644)
		os.WriteFile(filepath.Join(d, "generation_config.json"), []byte(`{"bos_token_id": 3, "eos_token_id": [6, 7]}`), 0o644)
		editConfig(t, d, func(m map[string]any) {
			delete(m, "rope_theta")
			m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 123456.0}
		})
		b, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		if b.Config.RopeTheta != 123456 || !slices.Equal(b.Config.EOS, []int{6, 7}) /* generation_config's win */ || b.Config.BOS != 3 {
			t.Fatalf("config: theta %g eos %v bos %d", b.Config.RopeTheta, b.Config.EOS, b.Config.BOS)
		}
		p, _ := b.Param("model.layers.0.self_attn.k_proj.bias")
		q, _ := lm.Param("model.layers.0.self_attn.k_proj.bias")
		for i := range p.Data {
			if d := p.Data[i] - q.Data[i]; d > 0.01 || d < -0.01 {
				t.Fatalf("sharded BF16 tensor: %g vs %g", p.Data[i], q.Data[i])
			}
		}
	})
}

// TestLyingConfig: a config claiming sizes its weights do not have fails on the first
// tensor's shape, before the parameters are allocated.
func TestLyingConfig(t *testing.T) {
	dir := saveAs(t, randomModel(t, tinyConfigs()["llama-gqa"], 1), safetensors.F32)
	editConfig(t, dir, func(m map[string]any) { m["vocab_size"] = 1 << 40 })
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "model.embed_tokens.weight") {
		t.Fatalf("got %v", err)
	}
}
