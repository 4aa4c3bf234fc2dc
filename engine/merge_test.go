package engine

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testref"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// mergeBase saves a random model with tokenizer files beside it (merge copies them).
func mergeBase(t *testing.T, c model.Config, seed uint64) string {
	t.Helper()
	m, err := model.NewRandom(c, seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), c.ModelType)
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"tokenizer.json": `{"model": {"type": "BPE"}}`, "tokenizer_config.json": `{"eos_token": "<e>"}`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mergeAdapter saves a PEFT adapter on every linear of the model in dir, with random A and B
// (B ≠ 0, so that merging changes the model).
func mergeAdapter(t *testing.T, dir string, seed uint64, rslora bool) string {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	lc := lora.Config{R: 4, Alpha: 16, TargetModules: []string{"all-linear"}, RSLoRA: rslora}
	rng := rand.New(rand.NewPCG(seed, 1))
	var layers []*lora.Layer
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(m.Backend(), l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			t.Fatal(err)
		}
		if err := ll.RandomizeB(rng); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, ll)
	}
	set := lora.NewSet(lc, layers)
	out := t.TempDir()
	tensors, err := set.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveAdapter(out, set.AdapterConfig(dir, m.Config.ModelType == "gpt2"), tensors); err != nil {
		t.Fatal(err)
	}
	return out
}

// scoreWithAdapter is `score --adapter`: the unmerged base with the adapter attached.
func scoreWithAdapter(t *testing.T, base, adapter string, seqs [][]int) [][]float32 {
	t.Helper()
	m, err := model.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if adapter != "" {
		if _, err := AttachAdapter(m, adapter); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := m.LogProbs(seqs, 1, model.AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	return lp
}

// folderLogProbs scores seqs under plain folders with the independent PyTorch forward.
func folderLogProbs(t *testing.T, dirs []string, seqs [][]int) [][][]float64 {
	t.Helper()
	py := testref.Python(t)
	script := filepath.Join("testdata", "folder_logprobs.py")
	for _, f := range []string{script, filepath.Join("model", "testdata", "reference.py")} {
		if _, err := os.ReadFile(f); err != nil { // read here so that go test's cache sees them
			t.Fatal(err)
		}
	}
	var jobs []map[string]any
	for _, d := range dirs {
		jobs = append(jobs, map[string]any{"dir": d, "seqs": seqs})
	}
	req, _ := json.Marshal(map[string]any{"jobs": jobs})
	cmd := exec.Command(py, script)
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("folder_logprobs.py: %v\n%s", err, stderr.String())
	}
	var res struct{ Results []struct{ LogP [][]float64 } }
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != len(dirs) {
		t.Fatalf("folder_logprobs.py answered %d jobs of %d", len(res.Results), len(dirs))
	}
	var lps [][][]float64
	for _, r := range res.Results {
		lps = append(lps, r.LogP)
	}
	return lps
}

// maxDiff is the largest |a − b| over the log-probs.
func maxDiff(a [][]float32, b [][]float64) float64 {
	d := 0.0
	for i := range a {
		for k := range a[i] {
			d = math.Max(d, math.Abs(float64(a[i][k])-b[i][k]))
		}
	}
	return d
}

// TestMergeMatchesScoreWithAdapter: a merged folder scored by the independent PyTorch forward
// gives the log-probs `score --adapter` gives on the unmerged base and adapter, within 1e-4,
// for a GQA llama, a gpt2 (Conv1D weights, written in shards of 64 KB with an index) and a
// 4-bit NF4 base of the llama; the merged folder is plain (no quantization_config, no quant
// state) with the tokenizer files copied, and the base alone scores differently.
func TestMergeMatchesScoreWithAdapter(t *testing.T) {
	llama := mergeBase(t, model.Config{ModelType: "llama", Vocab: 96, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2,
		Hidden: 64, MaxPos: 64, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}, 5)
	gpt2 := mergeBase(t, model.Config{ModelType: "gpt2", Vocab: 96, Dim: 32, Layers: 2, Heads: 4,
		Hidden: 128, MaxPos: 64, NormEps: 1e-5, TieEmbed: true, BOS: -1}, 6)
	nf4 := filepath.Join(t.TempDir(), "llama-nf4")
	if _, err := quant.QuantizeFolder(llama, nf4, quant.FolderOptions{Options: quant.Default()}); err != nil {
		t.Fatal(err)
	}
	llamaAdapter := mergeAdapter(t, llama, 7, false)
	cases := []struct {
		name, base, adapter string
		shard               int64
		shards, modules     int
	}{
		{"llama", llama, llamaAdapter, 0, 1, 14},
		{"gpt2", gpt2, mergeAdapter(t, gpt2, 8, true), 64 << 10, 2, 8}, // rslora
		{"llama-nf4", nf4, llamaAdapter, 0, 1, 14},
	}
	seqs := [][]int{{3, 17, 42, 8, 91, 5, 60, 12, 33}, {70, 2, 2, 45}}
	outs := make([]string, len(cases))
	for i, c := range cases {
		outs[i] = filepath.Join(t.TempDir(), "merged")
		sum, err := Merge(c.base, c.adapter, outs[i], MergeOptions{DType: safetensors.F32, ShardBytes: c.shard})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if sum.Shards != c.shards || sum.Modules != c.modules || sum.Dequantized != 14*btoi(c.name == "llama-nf4") {
			t.Errorf("%s: summary %+v", c.name, sum)
		}
	}
	torch := folderLogProbs(t, outs, seqs)
	for i, c := range cases {
		out, got := outs[i], torch[i]
		want := scoreWithAdapter(t, c.base, c.adapter, seqs)
		if d := maxDiff(want, got); !(d <= 1e-4) {
			t.Errorf("%s: merged folder (PyTorch) and score --adapter (unmerged) differ by %.3g in log-prob (tolerance 1e-4)", c.name, d)
		} else {
			t.Logf("%s: merged (PyTorch) vs score --adapter: max |Δ logp| = %.2g", c.name, d)
		}
		if d := maxDiff(scoreWithAdapter(t, c.base, "", seqs), got); d < 1e-3 {
			t.Errorf("%s: the base alone scores within %.3g of the merged folder: the test cannot tell", c.name, d)
		}
		// Our own loader reads it back to the same policy.
		if d := maxDiff(scoreWithAdapter(t, out, "", seqs), got); !(d <= 1e-4) {
			t.Errorf("%s: model.Load of the merged folder differs from PyTorch by %.3g", c.name, d)
		}
		cfg, err := os.ReadFile(filepath.Join(out, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if _, q, _ := quant.IsQuantized(cfg); q || !strings.Contains(string(cfg), `"torch_dtype": "float32"`) {
			t.Errorf("%s: config.json %s", c.name, cfg)
		}
		set, err := safetensors.OpenSet(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range set.Names() {
			if info, _ := set.Info(n); quant.IsStateKey(n) || info.DType != safetensors.F32 {
				t.Errorf("%s: tensor %s (%s) in the merged folder", c.name, n, info.DType)
			}
		}
		set.Close()
		if _, err := os.Stat(filepath.Join(out, safetensors.IndexFile)); (err == nil) != (c.shards > 1) {
			t.Errorf("%s: index file present = %v with %d shards", c.name, err == nil, c.shards)
		}
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
			a, _ := os.ReadFile(filepath.Join(c.base, f))
			b, err := os.ReadFile(filepath.Join(out, f))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: %s not copied: %v", c.name, f, err)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bf16 and f16 outputs are the f32 merge rounded to nearest even, and say so in config.json.
func TestMergeDTypes(t *testing.T) {
	base := mergeBase(t, model.Config{ModelType: "llama", Vocab: 64, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1,
		Hidden: 32, MaxPos: 32, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}, 9)
	adapter := mergeAdapter(t, base, 10, false)
	dirs := map[safetensors.DType]string{}
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16} {
		dirs[dt] = filepath.Join(t.TempDir(), string(dt))
		sum, err := Merge(base, adapter, dirs[dt], MergeOptions{DType: dt})
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := os.ReadFile(filepath.Join(dirs[dt], "config.json"))
		if !strings.Contains(string(cfg), `"torch_dtype": "`+sum.DType+`"`) {
			t.Errorf("%s: config.json %s", dt, cfg)
		}
	}
	f32, err := safetensors.OpenSet(dirs[safetensors.F32])
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		set, err := safetensors.OpenSet(dirs[dt])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range f32.Names() {
			want, _, _ := f32.Float32(n)
			info, _ := set.Info(n)
			raw, _ := set.Bytes(n)
			if info.DType != dt || len(raw) != 2*len(want) {
				t.Fatalf("%s: tensor %s is %s with %d bytes", dt, n, info.DType, len(raw))
			}
			for i, v := range want {
				h := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
				r := safetensors.F32ToBF16(v)
				if dt == safetensors.F16 {
					r = safetensors.F32ToF16(v)
				}
				if h != r {
					t.Fatalf("%s: %s[%d] = %#04x, want %#04x (%g rounded)", dt, n, i, h, r, v)
				}
			}
		}
		set.Close()
	}
}

// Adapters that do not fit the model, or that merge cannot represent, are refused before
// anything is written, and an existing output folder is never touched.
func TestMergeRefusals(t *testing.T) {
	base := mergeBase(t, model.Config{ModelType: "llama", Vocab: 64, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1,
		Hidden: 32, MaxPos: 32, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}, 11)
	other := mergeBase(t, model.Config{ModelType: "llama", Vocab: 64, Dim: 24, Layers: 1, Heads: 2, KVHeads: 1,
		Hidden: 32, MaxPos: 32, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}, 12)
	good := mergeAdapter(t, base, 13, false)
	editConfig := func(edit func(c *checkpoint.AdapterConfig)) string {
		dir := t.TempDir()
		cfg, tensors, err := checkpoint.LoadAdapter(good)
		if err != nil {
			t.Fatal(err)
		}
		edit(&cfg)
		if err := checkpoint.SaveAdapter(dir, cfg, tensors); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	withTensors := func(edit func([]checkpoint.Tensor) []checkpoint.Tensor) string {
		dir := t.TempDir()
		cfg, tensors, _ := checkpoint.LoadAdapter(good)
		if err := checkpoint.SaveAdapter(dir, cfg, edit(tensors)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, c := range []struct {
		name, base, adapter, want string
	}{
		{"other shapes", other, good, "but the weight model.layers.0."},
		{"dora", base, editConfig(func(c *checkpoint.AdapterConfig) { c.UseDoRA = true }), "DoRA adapters are not merged"},
		{"rank pattern", base, editConfig(func(c *checkpoint.AdapterConfig) { c.RankPattern = map[string]int{"q_proj": 8} }), "rank_pattern and alpha_pattern"},
		{"rank", base, editConfig(func(c *checkpoint.AdapterConfig) { c.R = 8 }), "rank 4, but adapter_config.json says r = 8"},
		{"stray tensor", base, withTensors(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			return append(ts, checkpoint.Tensor{Name: "base_model.model.lm_head.modules_to_save.default.weight", Shape: []int{1, 1}, Data: []float32{1}})
		}), "is not a LoRA factor"},
		{"unknown module", base, withTensors(func(ts []checkpoint.Tensor) []checkpoint.Tensor {
			for i := range ts {
				ts[i].Name = strings.Replace(ts[i].Name, "layers.0", "layers.7", 1)
			}
			return ts
		}), "has no weight model.layers.7."},
		{"half a module", base, withTensors(func(ts []checkpoint.Tensor) []checkpoint.Tensor { return ts[1:] }), "has only one of lora_A and lora_B"},
	} {
		out := filepath.Join(t.TempDir(), "merged")
		_, err := Merge(c.base, c.adapter, out, MergeOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: the output folder exists after a refusal", c.name)
		}
		if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
			t.Errorf("%s: %d leftovers beside the output", c.name, len(ents))
		}
	}
	// An output folder that holds something is refused and left as it was.
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "keep.txt"), []byte("mine"), 0o644)
	if _, err := Merge(base, good, out, MergeOptions{}); err == nil || !strings.Contains(err.Error(), "exists and is not empty") {
		t.Errorf("non-empty output: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "keep.txt")); string(b) != "mine" {
		t.Error("the existing output folder was changed")
	}
}
