package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testmodel"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

func quantTestTensor(r *rand.Rand, shape ...int) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * 0.05)
	}
	return v
}

// writeQuantTestModel writes a config.json, weights and a stand-in tokenizer.json, returning the
// float32 value of every tensor as written.
func writeQuantTestModel(t *testing.T, dir, family string) map[string][]float32 {
	t.Helper()
	r := rand.New(rand.NewPCG(4, 2))
	vals := map[string][]float32{}
	var tensors []safetensors.Tensor
	add := func(name string, bf16 bool, shape ...int) {
		v := quantTestTensor(r, shape...)
		if bf16 {
			tt := safetensors.BF16Tensor(name, shape, v)
			for i := range v {
				v[i] = safetensors.BF16ToF32(safetensors.F32ToBF16(v[i]))
			}
			tensors = append(tensors, tt)
		} else {
			tensors = append(tensors, safetensors.F32Tensor(name, shape, v))
		}
		vals[name] = v
	}
	var cfg string
	switch family {
	case "llama":
		cfg = `{"model_type": "llama", "hidden_size": 64, "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "num_hidden_layers": 2}`
		add("model.embed_tokens.weight", true, 50, 64)
		add("lm_head.weight", true, 50, 64)
		add("model.norm.weight", false, 64)
		for _, l := range []string{"0", "1"} {
			p := "model.layers." + l + "."
			add(p+"input_layernorm.weight", false, 64)
			add(p+"post_attention_layernorm.weight", false, 64)
			add(p+"self_attn.q_proj.weight", true, 64, 64)
			add(p+"self_attn.k_proj.weight", true, 32, 64)
			add(p+"self_attn.v_proj.weight", true, 32, 64)
			add(p+"self_attn.o_proj.weight", true, 64, 64)
			add(p+"mlp.gate_proj.weight", true, 96, 64)
			add(p+"mlp.up_proj.weight", true, 96, 64)
			add(p+"mlp.down_proj.weight", true, 64, 96)
		}
	case "gpt2":
		cfg = `{"model_type": "gpt2", "n_embd": 64, "layer_norm_epsilon": 1e-05}`
		add("transformer.wte.weight", false, 50, 64)
		add("transformer.wpe.weight", false, 16, 64)
		add("transformer.ln_f.weight", false, 64)
		add("transformer.h.0.ln_1.weight", false, 64)
		add("transformer.h.0.attn.c_attn.weight", false, 64, 192)
		add("transformer.h.0.attn.c_attn.bias", false, 192)
		add("transformer.h.0.attn.c_proj.weight", false, 64, 64)
		add("transformer.h.0.mlp.c_fc.weight", false, 64, 256)
		add("transformer.h.0.mlp.c_proj.weight", false, 256, 64)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": {"type": "BPE"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": 2}`), 0o644)
	return vals
}

func runQuantizeCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestQuantizeLlama(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	vals := writeQuantTestModel(t, src, "llama")
	out := filepath.Join(dir, "q")
	code, stdout, stderr := runQuantizeCmd("quantize", "--model", src, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "14 quantized, 7 kept") || !strings.Contains(stdout, "bits per parameter") {
		t.Errorf("summary:\n%s", stdout)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("output folder mode %v (%v), want rwxr-xr-x", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the parent holds %d entries, want src and q (no temporary folder left)", len(entries))
	}
	for _, f := range []string{"tokenizer.json", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("%s not copied", f)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
	c, ok, err := quant.IsQuantized(raw)
	if err != nil || !ok || c.QuantType != quant.NF4 || !c.DoubleQuant || c.ComputeDType != "bfloat16" {
		t.Errorf("quantization_config: %+v %v %v\n%s", c, ok, err, raw)
	}
	if !strings.Contains(string(raw), `"rms_norm_eps": 1e-05`) {
		t.Errorf("config.json numbers not kept as written:\n%s", raw)
	}
	set, err := safetensors.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	for name, want := range vals {
		prefix := strings.TrimSuffix(name, ".weight")
		w, ok, err := quant.LoadWeight(set, prefix)
		if err != nil {
			t.Fatal(err)
		}
		linear := strings.Contains(name, "_proj")
		if ok != linear {
			t.Errorf("%s: quantized=%v", name, ok)
			continue
		}
		if !ok {
			got, _, err := set.Float32(name)
			if err != nil || len(got) != len(want) {
				t.Fatalf("%s: %v", name, err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s kept tensor changed at %d", name, i)
				}
			}
			continue
		}
		info, _ := set.Info(name)
		if w.DType != "bfloat16" || w.Rows*w.Cols != len(want) || info.Shape[0] != (len(want)+1)/2 || info.Shape[1] != 1 {
			t.Errorf("%s: %s [%d %d], stored %v", name, w.DType, w.Rows, w.Cols, info.Shape)
		}
		got := make([]float32, len(want))
		w.Dequantize(got)
		var num, den float64
		for i := range got {
			num += math.Pow(float64(got[i]-want[i]), 2)
			den += math.Pow(float64(want[i]), 2)
		}
		if rel := math.Sqrt(num / den); rel > 0.11 {
			t.Errorf("%s: relative error %.3f", name, rel)
		}
	}
	// Quantizing the quantized folder is refused; so is a non-empty --out.
	if code, _, stderr := runQuantizeCmd("quantize", "--model", out, "--out", filepath.Join(dir, "qq")); code != 1 || !strings.Contains(stderr, "already quantized") {
		t.Errorf("re-quantize: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runQuantizeCmd("quantize", "--model", src, "--out", out); code != 1 || !strings.Contains(stderr, "not empty") {
		t.Errorf("existing out: exit %d, %s", code, stderr)
	}
}

func TestQuantizeGPT2(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	vals := writeQuantTestModel(t, src, "gpt2")
	out := filepath.Join(dir, "q")
	code, stdout, stderr := runQuantizeCmd("quantize", "--model", src, "--out", out, "--quant", "fp4", "--blocksize", "128", "--double-quant=false", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var sum quant.FolderSummary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	if sum.Quantized != 4 || sum.Kept != 5 || sum.QuantType != "fp4" || sum.BlockSize != 128 || sum.DoubleQuant {
		t.Errorf("summary %+v", sum)
	}
	// 4 bits + 32/128 for absmax, plus 64 bytes of code book and the JSON state per tensor.
	if sum.BitsPerParameter < 4.25 || sum.BitsPerParameter > 4.6 {
		t.Errorf("bits per parameter %.3f", sum.BitsPerParameter)
	}
	set, err := safetensors.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	w, ok, err := quant.LoadWeight(set, "transformer.h.0.attn.c_attn")
	if err != nil || !ok {
		t.Fatalf("c_attn: %v %v", ok, err)
	}
	// Conv1D [in=64, out=192] is stored quantized as the linear [out, in].
	if w.Rows != 192 || w.Cols != 64 || w.Type != quant.FP4 || w.Nested() {
		t.Fatalf("c_attn quantized as [%d %d] %s nested=%v", w.Rows, w.Cols, w.Type, w.Nested())
	}
	got := make([]float32, 192*64)
	w.Dequantize(got)
	orig := vals["transformer.h.0.attn.c_attn.weight"]
	var num, den float64
	for i := 0; i < 64; i++ {
		for j := 0; j < 192; j++ {
			d := float64(got[j*64+i] - orig[i*192+j])
			num += d * d
			den += float64(orig[i*192+j]) * float64(orig[i*192+j])
		}
	}
	if rel := math.Sqrt(num / den); rel > 0.16 {
		t.Errorf("c_attn relative error %.3f: transposition wrong?", rel)
	}
	if _, ok, _ := quant.LoadWeight(set, "transformer.wte"); ok {
		t.Error("embedding quantized")
	}
}

func TestQuantizeUsage(t *testing.T) {
	dir := t.TempDir()
	writeQuantTestModel(t, dir, "llama")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"quantize", "--model", dir}, 2, "needs --out"},
		{[]string{"quantize", "--model", dir, "--out", filepath.Join(dir, "o"), "--blocksize", "48"}, 2, "--blocksize 48"},
		{[]string{"quantize", "--model", dir, "--out", filepath.Join(dir, "o"), "--quant", "int4"}, 2, `--quant "int4"`},
		{[]string{"quantize", "--model", filepath.Join(dir, "none"), "--out", filepath.Join(dir, "o")}, 1, "config.json"},
	}
	for _, c := range cases {
		code, _, stderr := runQuantizeCmd(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "mamba"}`), 0o644)
	if code, _, stderr := runQuantizeCmd("quantize", "--model", dir, "--out", filepath.Join(dir, "o")); code != 1 || !strings.Contains(stderr, `model_type "mamba"`) {
		t.Errorf("mamba: exit %d, %s", code, stderr)
	}
}

func TestQuantizeSharded(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	vals := writeQuantTestModel(t, src, "llama")
	out := filepath.Join(dir, "q")
	// quantize's own folder writer, with shards of 16 KiB instead of 4 GiB.
	if _, err := quant.QuantizeFolder(src, out, quant.FolderOptions{Options: quant.Default(), ShardBytes: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if set.Index == "" || len(set.Files) < 3 {
		t.Fatalf("want an index and several shards, got %d files", len(set.Files))
	}
	if _, ok, err := quant.LoadWeight(set, "model.layers.1.mlp.down_proj"); !ok || err != nil {
		t.Errorf("down_proj from shards: %v %v", ok, err)
	}
	got, _, err := set.Float32("model.embed_tokens.weight")
	if err != nil || len(got) != len(vals["model.embed_tokens.weight"]) {
		t.Errorf("embeddings from shards: %v", err)
	}
}

// A folder written by quantize loads without the original and runs like any other: its
// logits are those of its float32 dequantization to 1e-5, score's log-probabilities too,
// generate and a --batch run work on it, and the run's resident bytes are the 4-bit ones.
func TestQuantizedFolderRuns(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	src := testmodel.Dir(t)
	qdir := filepath.Join(t.TempDir(), "q")
	if code, _, stderr := runQuantizeCmd("quantize", "--model", src, "--out", qdir); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	orig, err := model.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(qdir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Linears() {
		if _, ok := l.W.(*model.Quantized); !ok {
			t.Fatalf("%s loaded dense from the quantized folder", l.Name)
		}
	}
	if m.NumParams() != orig.NumParams() || m.ResidentBytes() >= orig.ResidentBytes() {
		t.Errorf("parameters %d (original %d), resident %d bytes (original %d)", m.NumParams(), orig.NumParams(), m.ResidentBytes(), orig.ResidentBytes())
	}
	d, err := m.Dequantize()
	if err != nil {
		t.Fatal(err)
	}

	text := "The pump moves water from the tank to the valve."
	code, stdout, stderr := runCaptured(t, "score", "--model", qdir, "--json", text)
	if code != 0 {
		t.Fatalf("score: exit %d: %s", code, stderr)
	}
	var doc struct {
		Texts []struct {
			Context  []int      `json:"context"`
			IDs      []int      `json:"ids"`
			LogProbs []*float64 `json:"logprobs"`
		} `json:"texts"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || len(doc.Texts) != 1 {
		t.Fatalf("score --json: %v\n%s", err, stdout)
	}
	ts := doc.Texts[0]
	seq := append(append([]int(nil), ts.Context...), ts.IDs...)
	if len(seq) < 5 {
		t.Fatalf("only %d tokens", len(seq))
	}
	want, err := d.LogProbs([][]int{seq}, 1, model.AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	origLP, _ := orig.LogProbs([][]int{seq}, 1, model.AdaptersOn)
	var drift float64
	for i, lp := range ts.LogProbs {
		j := len(ts.Context) + i
		if lp == nil {
			if j != 0 {
				t.Fatalf("log-prob %d is null", i)
			}
			continue
		}
		w := float64(want[0][j])
		if math.Abs(*lp-w) > 1e-5*math.Max(1, math.Abs(w)) {
			t.Errorf("token %d: score on the 4-bit folder %g, dequantized float32 %g", i, *lp, w)
		}
		drift = math.Max(drift, math.Abs(*lp-float64(origLP[0][j])))
	}
	// Quantization changes the model a little, never to another one.
	if drift == 0 || drift > 0.5 {
		t.Errorf("largest log-prob change from quantization %g", drift)
	}
	t.Logf("largest log-prob change from quantization: %.4f", drift)

	if code, stdout, stderr := runCaptured(t, "generate", "--model", qdir, "--max-new-tokens", "6", "--seed", "3", "The pump"); code != 0 || stdout == "" {
		t.Errorf("generate: exit %d: %s%s", code, stdout, stderr)
	}

	out := t.TempDir()
	code, stdout, stderr = runCaptured(t, "--batch", "--model", qdir, "--out", out, "--steps", "1", "--batch-size", "1",
		"--num-generations", "2", "--max-completion-length", "4", "--run-name", "q", "--preset", "story")
	if code != 0 {
		t.Fatalf("--batch: exit %d\n%s\n%s", code, stdout, stderr)
	}
	evs, err := events.ReadFile(filepath.Join(out, "q", "events.jsonl"))
	if err != nil || len(evs) == 0 || evs[0].Type != events.RunStart || evs[0].Params == nil {
		t.Fatalf("events: %v", err)
	}
	if p := evs[0].Params; p.ResidentBytes != m.ResidentBytes() || p.Total != int64(m.NumParams()) {
		t.Errorf("run_start params %+v, want %d parameters in %d bytes", *p, m.NumParams(), m.ResidentBytes())
	}
}

// GPT-2's Conv1D weights, stored [in, out], are quantized as the [out, in] linear and load back
// as such: each weight is the original's up to FP4 noise, and the 4-bit folder's logits are its
// dequantization's to 1e-5.
func TestQuantizedGPT2FolderLoads(t *testing.T) {
	orig, err := model.NewRandom(model.Config{ModelType: "gpt2", Vocab: 96, Dim: 64, Layers: 2, Heads: 4,
		Hidden: 128, MaxPos: 32, NormEps: 1e-5, TieEmbed: true, BOS: -1}, 5)
	if err != nil {
		t.Fatal(err)
	}
	src, qdir := t.TempDir(), filepath.Join(t.TempDir(), "q")
	if err := orig.Save(src); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runQuantizeCmd("quantize", "--model", src, "--out", qdir, "--quant", "fp4", "--double-quant=false"); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	m, err := model.Load(qdir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Dequantize()
	if err != nil {
		t.Fatal(err)
	}
	seq := []int{3, 17, 42, 8, 95, 0, 61, 12, 30}
	logits := func(m *model.Model) []float32 {
		lg, err := m.Forward(m.NewCache(1, len(seq)), [][]int{seq}, false, model.AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), lg...)
	}
	got, want, base := logits(m), logits(d), logits(orig)
	var drift, scale float64
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("logit %d: 4-bit %g, dequantized %g", i, got[i], want[i])
		}
		drift = math.Max(drift, math.Abs(float64(got[i]-base[i])))
		scale = math.Max(scale, math.Abs(float64(base[i])))
	}
	t.Logf("largest logit change from FP4: %.4g (largest logit %.4g)", drift, scale)
	if drift > 0.2*scale {
		t.Errorf("logits moved by %g from the original's (largest %g)", drift, scale)
	}
	// Each dequantized weight is the original up to FP4 noise (a transposed one would be
	// unrelated: relative error about √2).
	for _, l := range orig.Linears() {
		name := l.Name + ".weight"
		a, _ := orig.Param(name)
		b, _ := d.Param(name)
		var num, den float64
		for i := range a.Data {
			num += math.Pow(float64(a.Data[i]-b.Data[i]), 2)
			den += math.Pow(float64(a.Data[i]), 2)
		}
		if rel := math.Sqrt(num / den); rel > 0.2 {
			t.Errorf("%s: relative error %.3f against the original", name, rel)
		}
	}
}

// TestQuantizeHead: --head writes lm_head 4-bit too (15 tensors quantized), with a
// quantization_config whose skip list is complete without it (TestBnb4bitHead loads such a
// folder). A tied head (GPT-2's) is refused with the reason.
func TestQuantizeHead(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	writeQuantTestModel(t, src, "llama")
	out := filepath.Join(dir, "q")
	code, stdout, stderr := runQuantizeCmd("quantize", "--model", src, "--out", out, "--head")
	if code != 0 || !strings.Contains(stdout, "15 quantized, 6 kept") {
		t.Fatalf("exit %d: %s\n%s", code, stdout, stderr)
	}
	raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
	if c, ok, err := quant.IsQuantized(raw); err != nil || !ok || c.SkipModules == nil || len(c.SkipModules) != 0 {
		t.Errorf("quantization_config skips %v (%v): want an empty list, so that transformers quantizes lm_head", c.SkipModules, err)
	}
	set, err := safetensors.OpenSet(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if w, ok, err := quant.LoadWeight(set, "lm_head"); err != nil || !ok || w.Rows != 50 || w.Cols != 64 {
		t.Fatalf("lm_head not stored 4-bit [50 64]: %v", err)
	}
	g := filepath.Join(dir, "gpt2")
	os.Mkdir(g, 0o755)
	writeQuantTestModel(t, g, "gpt2")
	if code, _, stderr := runQuantizeCmd("quantize", "--model", g, "--out", filepath.Join(dir, "gq"), "--head"); code != 1 || !strings.Contains(stderr, "tied") {
		t.Errorf("a tied head: exit %d, %s", code, stderr)
	}
}
