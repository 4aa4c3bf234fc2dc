package quant

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/safetensors"
)

// tinyGPT2Folder writes a GPT-2-shaped folder: two Conv1D weights stored [in, out], an
// embedding in BF16, a bias, and a tokenizer file.
func tinyGPT2Folder(t *testing.T) (dir string, conv map[string][]float32) {
	t.Helper()
	dir = t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	conv = map[string][]float32{"h.0.attn.c_attn.weight": randn(8 * 24), "h.0.mlp.c_fc.weight": randn(8 * 32)}
	tensors := []safetensors.Tensor{
		safetensors.F32Tensor("h.0.attn.c_attn.weight", []int{8, 24}, conv["h.0.attn.c_attn.weight"]),
		safetensors.F32Tensor("h.0.mlp.c_fc.weight", []int{8, 32}, conv["h.0.mlp.c_fc.weight"]),
		safetensors.F32Tensor("h.0.attn.c_attn.bias", []int{24}, randn(24)),
		safetensors.BF16Tensor("wte.weight", []int{10, 8}, randn(80)),
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2", "torch_dtype": "bfloat16", "n_embd": 8}`), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{}`), 0o644)
	return dir, conv
}

// A 4-bit folder exported to f32 holds each linear dequantized and put back in GPT-2's Conv1D
// layout, the other tensors converted, no quant state, and a config without
// quantization_config; Update sees the weights in the layout written.
func TestExportDequantizes(t *testing.T) {
	dir, _ := tinyGPT2Folder(t)
	q := filepath.Join(t.TempDir(), "q")
	if _, err := QuantizeFolder(dir, q, FolderOptions{Options: Default()}); err != nil {
		t.Fatal(err)
	}
	qset, err := safetensors.OpenSet(q)
	if err != nil {
		t.Fatal(err)
	}
	defer qset.Close()
	out := filepath.Join(t.TempDir(), "plain")
	seen := map[string][]int{}
	sum, err := ExportFolder(q, out, ExportOptions{DType: safetensors.F32,
		Wants: func(name string) bool { return strings.HasPrefix(name, "h.0.") && strings.HasSuffix(name, ".weight") },
		Update: func(name string, w []float32, shape []int) error {
			seen[name] = shape
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dequantized != 2 || sum.Updated != 2 || sum.Tensors != 4 || sum.Shards != 1 || sum.DType != "float32" {
		t.Errorf("summary %+v", sum)
	}
	if s := seen["h.0.attn.c_attn.weight"]; len(s) != 2 || s[0] != 8 || s[1] != 24 {
		t.Errorf("Update saw c_attn as %v, want the Conv1D layout [8 24]", s)
	}
	set, err := safetensors.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if len(set.Names()) != 4 {
		t.Errorf("tensors %v", set.Names())
	}
	for _, name := range []string{"h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight"} {
		w, ok, err := LoadWeight(qset, strings.TrimSuffix(name, ".weight"))
		if !ok || err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		deq := make([]float32, w.Len())
		w.Dequantize(deq) // [out, in]
		got, shape, err := set.Float32(name)
		if err != nil || shape[0] != w.Cols || shape[1] != w.Rows {
			t.Fatalf("%s: shape %v (%v), want [%d %d]", name, shape, err, w.Cols, w.Rows)
		}
		for o := 0; o < w.Rows; o++ {
			for i := 0; i < w.Cols; i++ {
				if got[i*w.Rows+o] != deq[o*w.Cols+i] {
					t.Fatalf("%s[%d][%d] = %v, dequantized %v", name, i, o, got[i*w.Rows+o], deq[o*w.Cols+i])
				}
			}
		}
	}
	emb, _, _ := set.Float32("wte.weight")
	orig, _, _ := qset.Float32("wte.weight")
	for i := range orig {
		if emb[i] != orig[i] {
			t.Fatalf("wte.weight[%d] = %v, was %v", i, emb[i], orig[i])
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(out, "config.json"))
	if _, isQ, _ := IsQuantized(cfg); isQ || !strings.Contains(string(cfg), `"torch_dtype": "float32"`) {
		t.Errorf("config.json %s", cfg)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); err != nil {
		t.Error("tokenizer.json not copied")
	}
	// Without a dtype, the model's own (bfloat16 here).
	out2 := filepath.Join(t.TempDir(), "own")
	if sum, err := ExportFolder(dir, out2, ExportOptions{}); err != nil || sum.DType != "bfloat16" {
		t.Errorf("default dtype: %+v %v", sum, err)
	}
}

// A failure while writing leaves neither the output nor anything beside it; values beyond
// float16's range are refused rather than written as infinities.
func TestExportFailsCleanly(t *testing.T) {
	dir, _ := tinyGPT2Folder(t)
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	boom := errors.New("boom")
	_, err := ExportFolder(dir, out, ExportOptions{ShardBytes: 100,
		Wants:  func(name string) bool { return name == "wte.weight" },
		Update: func(string, []float32, []int) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("%d entries left beside the output after a failure", len(ents))
	}
	_, err = ExportFolder(dir, out, ExportOptions{DType: safetensors.F16,
		Wants:  func(name string) bool { return name == "h.0.mlp.c_fc.weight" },
		Update: func(_ string, w []float32, _ []int) error { w[3] = 1e5; return nil }})
	if err == nil || !strings.Contains(err.Error(), "tensor h.0.mlp.c_fc.weight: value 3 (100000) is beyond float16's range") {
		t.Errorf("f16 overflow: %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("%d entries left beside the output after a refusal", len(ents))
	}
}
