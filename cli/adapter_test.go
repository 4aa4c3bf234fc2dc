package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
)

// randomAdapter saves a PEFT adapter on every linear of m with random A and B (B non-zero, so
// the adapter changes the model), as a run's checkpoint would hold it.
func randomAdapter(t *testing.T, m *model.Model, r int, alpha float64, rslora bool) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	cfg := lora.Config{R: r, Alpha: alpha, TargetModules: []string{"all-linear"}, RSLoRA: rslora}
	var layers []*lora.Layer
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(m.Backend(), l.Name, l.In, l.Out, cfg, rng)
		if err != nil {
			t.Fatal(err)
		}
		b := ll.B.F32() // the CPU's memory
		for i := range b {
			b[i] = float32(0.05 * rng.NormFloat64())
		}
		layers = append(layers, ll)
	}
	set := lora.NewSet(cfg, layers)
	dir := filepath.Join(t.TempDir(), "adapter")
	os.MkdirAll(dir, 0o755)
	tensors, err := set.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveAdapter(dir, set.AdapterConfig("test", m.Config.Family() == model.GPT2), tensors); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An adapter saved in PEFT's layout and merged by the PyTorch reference as W + s·B·A gives the
// log-probs that `rlhfstation score --adapter` prints (1e-4), for both families.
func TestScoreAdapterMatchesMergedReference(t *testing.T) {
	py := testref.Python(t)
	tokDir := testmodel.Dir(t)
	llama, err := model.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	gpt2Dir := t.TempDir()
	g, err := model.NewRandom(model.Config{ModelType: "gpt2", Vocab: llama.Config.Vocab, Dim: 32, Layers: 2, Heads: 4,
		Hidden: 64, MaxPos: 128, NormEps: 1e-5, TieEmbed: true, BOS: -1, EOS: []int{0}}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Save(gpt2Dir); err != nil {
		t.Fatal(err)
	}
	tj, _ := os.ReadFile(filepath.Join(tokDir, "tokenizer.json"))
	os.WriteFile(filepath.Join(gpt2Dir, "tokenizer.json"), tj, 0o644)

	text := "Question: Tom has 3 boxes of 12 apples. How many apples?\nAnswer: 36"
	for _, c := range []struct {
		name   string
		dir    string
		m      *model.Model
		rslora bool
	}{{"llama", tokDir, llama, false}, {"gpt2", gpt2Dir, g, true}} {
		adapter := randomAdapter(t, c.m, 4, 8, c.rslora)
		code, stdout, stderr := runCaptured(t, "score", "--model", c.dir, "--adapter", adapter, "--json", text)
		if code != 0 {
			t.Fatalf("%s: score exit %d: %s", c.name, code, stderr)
		}
		var doc struct {
			Texts []struct {
				Context  []int      `json:"context"`
				IDs      []int      `json:"ids"`
				LogProbs []*float64 `json:"logprobs"`
			} `json:"texts"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatal(err)
		}
		got := doc.Texts[0]
		seq := append(append([]int{}, got.Context...), got.IDs...)
		in, _ := json.Marshal(map[string]any{"seqs": [][]int{seq}})
		cmd := exec.Command(py, filepath.Join("..", "engine", "testdata", "merge_adapter.py"), c.dir, adapter)
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: merge_adapter.py: %v", c.name, err)
		}
		var want struct {
			LogP   [][]float64 `json:"logp"`
			Merged int         `json:"merged"`
		}
		json.Unmarshal(out, &want)
		if want.Merged != len(c.m.Linears()) {
			t.Fatalf("%s: the reference merged %d modules of %d", c.name, want.Merged, len(c.m.Linears()))
		}
		base, _ := c.m.LogProbs([][]int{seq}, 1, model.AdaptersOn)
		moved := 0.0
		for i, lp := range got.LogProbs {
			k := len(got.Context) + i
			if lp == nil {
				continue
			}
			if d := math.Abs(*lp - want.LogP[0][k]); d > 1e-4*math.Max(1, math.Abs(want.LogP[0][k])) {
				t.Errorf("%s: token %d log-prob %.6f with --adapter, merged reference %.6f", c.name, i, *lp, want.LogP[0][k])
			}
			moved = math.Max(moved, math.Abs(*lp-float64(base[0][k])))
		}
		if moved < 1e-3 {
			t.Errorf("%s: the adapter changed no log-prob by 1e-3: the test cannot tell", c.name)
		}
	}
}
