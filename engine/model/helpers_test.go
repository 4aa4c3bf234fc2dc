package model

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
	"rlhfstation/safetensors"
)

// tinyConfigs are the small random models the tests run, one per feature to cover.
func tinyConfigs() map[string]Config {
	return map[string]Config{
		"gpt2-tied": {ModelType: "gpt2", Vocab: 160, Dim: 32, Layers: 2, Heads: 4, Hidden: 96, MaxPos: 64,
			NormEps: 1e-5, TieEmbed: true, BOS: 0, EOS: []int{0}},
		"gpt2-untied": {ModelType: "gpt2", Vocab: 130, Dim: 48, Layers: 2, Heads: 3, Hidden: 64, MaxPos: 48,
			NormEps: 1e-5, BOS: -1},
		"llama-gqa": {ModelType: "llama", Vocab: 200, Dim: 64, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 8,
			Hidden: 96, MaxPos: 64, NormEps: 1e-6, RopeTheta: 500000, BOS: 1, EOS: []int{2}},
		"llama-tied-bias": {ModelType: "llama", Vocab: 150, Dim: 32, Layers: 2, Heads: 4, KVHeads: 4, HeadDim: 8,
			Hidden: 80, MaxPos: 64, NormEps: 1e-5, RopeTheta: 10000, QKVBias: true, MLPBias: true, TieEmbed: true, BOS: 1},
		"llama3-scaling": {ModelType: "llama", Vocab: 120, Dim: 32, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16,
			Hidden: 64, MaxPos: 64, NormEps: 1e-5, RopeTheta: 500000, TieEmbed: true, BOS: 1,
			RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 16}},
		"qwen2-bias": {ModelType: "qwen2", Vocab: 180, Dim: 48, Layers: 2, Heads: 6, KVHeads: 2, HeadDim: 8,
			Hidden: 72, MaxPos: 64, NormEps: 1e-6, RopeTheta: 1000000, TieEmbed: true, BOS: -1, EOS: []int{5, 6}},
		"mistral-window": {ModelType: "mistral", Vocab: 140, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
			Hidden: 64, MaxPos: 64, NormEps: 1e-5, RopeTheta: 10000, Window: 6, BOS: 1},
		// the families of family_test.go, made here by NewRandom and written by Save
		"qwen3-qknorm": {ModelType: "qwen3", Vocab: 150, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16,
			Hidden: 64, MaxPos: 64, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: -1, EOS: []int{5}},
		"gemma-geglu": {ModelType: "gemma", Vocab: 140, Dim: 32, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16,
			Hidden: 64, MaxPos: 64, NormEps: 1e-6, RopeTheta: 10000, TieEmbed: true, BOS: 2, EOS: []int{1}},
		"gemma2-softcap": {ModelType: "gemma2", Vocab: 140, Dim: 32, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8,
			Hidden: 64, MaxPos: 64, NormEps: 1e-6, RopeTheta: 10000, TieEmbed: true, Window: 5, Sliding: []bool{true, false, true},
			QueryScale: 12, AttnSoftcap: 1.5, FinalSoftcap: 2, BOS: 2, EOS: []int{1}},
		"gemma3-local": {ModelType: "gemma3_text", Vocab: 140, Dim: 32, Layers: 4, Heads: 4, KVHeads: 1, HeadDim: 8,
			Hidden: 64, MaxPos: 64, NormEps: 1e-6, RopeTheta: 10000, LocalRopeTheta: 100, TieEmbed: true, Window: 4,
			Sliding: []bool{true, true, false, true}, QueryScale: 8, RopeScaling: &RopeScaling{Type: "linear", Factor: 4}, BOS: 2},
		"smollm3-nope": {ModelType: "smollm3", Vocab: 120, Dim: 32, Layers: 3, Heads: 4, KVHeads: 2, HeadDim: 8, Hidden: 48,
			MaxPos: 64, NormEps: 1e-6, RopeTheta: 5e6, TieEmbed: true, NoRoPE: []bool{false, true, false}, BOS: -1},
		"olmo2-postnorm": {ModelType: "olmo2", Vocab: 130, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, Hidden: 48,
			MaxPos: 64, NormEps: 1e-6, RopeTheta: 5e5, BOS: -1, EOS: []int{4}},
		"phi3-partial": {ModelType: "phi3", Vocab: 130, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, RotaryDim: 12,
			Hidden: 48, MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, Window: 7, BOS: 1, EOS: []int{3},
			RopeScaling: &RopeScaling{Type: "longrope", Factor: 256.0 / 48, OriginalMaxPos: 48, AttentionFactor: 1.2,
				ShortFactor: []float64{1, 1.1, 1.3, 1.6, 2, 2.5}, LongFactor: []float64{2, 2, 2, 2, 2, 2}}},
	}
}

// randomModel makes a model whose every tensor is random (biases and norm weights
// included) and large enough that logits are far from uniform.
func randomModel(t testing.TB, c Config, seed uint64) *Model {
	t.Helper()
	m, err := NewRandom(c, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for _, p := range m.Params {
		for i := range p.Data {
			switch {
			case len(p.Shape) == 2:
				p.Data[i] = float32(rng.NormFloat64() * 0.15)
			case isNormWeight(p.Name):
				p.Data[i] = float32(1 + 0.2*rng.NormFloat64())
			default:
				p.Data[i] = float32(0.1 * rng.NormFloat64())
			}
		}
	}
	return m
}

// saveAs writes m into a temporary folder, with the weights stored in dtype.
func saveAs(t testing.TB, m *Model, dtype safetensors.DType) string {
	t.Helper()
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if dtype == safetensors.F32 {
		return dir
	}
	path := filepath.Join(dir, safetensors.SingleFile)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		v, shape, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if dtype == safetensors.F16 {
			ts = append(ts, safetensors.F16Tensor(name, shape, v))
		} else {
			ts = append(ts, safetensors.BF16Tensor(name, shape, v))
		}
	}
	f.Close()
	if err := safetensors.Write(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func randomIDs(rng *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// refJob and refResult mirror testdata/reference.py's protocol.
type refJob struct {
	Make   *refMake    `json:"make,omitempty"`
	Model  string      `json:"model"`
	Seqs   [][]int     `json:"seqs,omitempty"`
	Greedy *refGreedy  `json:"greedy,omitempty"`
	Grad   *refGradJob `json:"grad,omitempty"`
}

// refMake asks the reference for a small random model of a family's config.json.
type refMake struct {
	Dir    string         `json:"dir"`
	Config map[string]any `json:"config"`
	DType  string         `json:"dtype"` // F32 or BF16
	Seed   uint64         `json:"seed"`
}

// refLoRA puts LoRA adapters on named linears in a grad job.
type refLoRA struct {
	Scale    float32                `json:"scale"`
	Adapters map[string]*refAdapter `json:"adapters"`
}

// refAdapter is one adapter's factors, A [r,in] and B [out,r].
type refAdapter struct {
	A []float32 `json:"a"`
	B []float32 `json:"b"`
	R int       `json:"r"`
}

type refGreedy struct {
	Prompt []int `json:"prompt"`
	N      int   `json:"n"`
}

type refGradJob struct {
	Seqs        [][]int     `json:"seqs"`
	DLogp       [][]float32 `json:"dlogp"`
	Temperature float32     `json:"temperature"`
	LoRA        *refLoRA    `json:"lora,omitempty"`
}

type refResult struct {
	Logits [][][]float32 `json:"logits"`
	Greedy []int         `json:"greedy"`
	Grad   *struct {
		Logp   [][]float64          `json:"logp"`
		Params map[string][]float64 `json:"params"`
		LoRA   map[string]struct {
			A []float64 `json:"a"`
			B []float64 `json:"b"`
		} `json:"lora"`
	} `json:"grad"`
}

// runReference runs testdata/reference.py on jobs (skipping without PyTorch).
func runReference(t testing.TB, jobs []refJob) []refResult {
	t.Helper()
	py := testref.Python(t)
	req, _ := json.Marshal(map[string]any{"jobs": jobs})
	cmd := exec.Command(py, filepath.Join("testdata", "reference.py"))
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var resp struct{ Results []refResult }
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reference.py output: %v", err)
	}
	return resp.Results
}

// relErr is max_j |got_j − want_j| / max_j |want_j|: the logits tolerance's measure.
func relErr(got []float32, want []float32) float64 {
	var d, s float64
	for j := range want {
		d = math.Max(d, math.Abs(float64(got[j])-float64(want[j])))
		s = math.Max(s, math.Abs(float64(want[j])))
	}
	if s == 0 {
		return d
	}
	return d / s
}

func sortedNames(m map[string]Config) []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			if strings.Compare(names[j], names[i]) < 0 {
				names[i], names[j] = names[j], names[i]
			}
		}
	}
	return names
}

// newGrads is NewGrads, failing the test on error.
func newGrads(t testing.TB, m *Model) *Grads {
	t.Helper()
	g, err := m.NewGrads()
	if err != nil {
		t.Fatal(err)
	}
	return g
}
