package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
)

// familyDir writes a random model of config c beside the test model's tokenizer (its
// vocabulary size set here) and returns the folder, the model and the tokenizer.
func familyDir(t *testing.T, c model.Config) (string, *model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	src := filepath.Join(testmodel.Dir(t), "tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	c.Vocab = tok.VocabSize()
	m, err := model.NewRandom(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, m, tok
}

// familyConfigs are a gemma2 (GeGLU, (1 + w) norms, norms around attention and MLP, both
// soft-cappings, alternating sliding windows) and a phi3 (fused qkv_proj and gate_up_proj,
// partial rotary, longrope) for the commands' tests.
func familyConfigs() map[string]model.Config {
	return map[string]model.Config{
		"gemma2": {ModelType: "gemma2", Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, Hidden: 64, MaxPos: 256,
			NormEps: 1e-6, RopeTheta: 10000, TieEmbed: true, Window: 16, Sliding: []bool{true, false}, QueryScale: 8,
			AttnSoftcap: 20, FinalSoftcap: 15, BOS: 0, EOS: []int{0}},
		"phi3": {ModelType: "phi3", Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 6, Hidden: 48,
			MaxPos: 512, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: 0, EOS: []int{0},
			RopeScaling: &model.RopeScaling{Type: "longrope", Factor: 2, OriginalMaxPos: 256, AttentionFactor: 1.06,
				ShortFactor: []float64{1, 1.2, 1.5}, LongFactor: []float64{2, 2, 2}}},
	}
}

// TestFamilyCommands: score, generate, --batch (LoRA on every linear, PEFT's names),
// inspect and quantize on a gemma2 and a phi3 folder.
func TestFamilyCommands(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for name, c := range familyConfigs() {
		t.Run(name, func(t *testing.T) {
			dir, m, tok := familyDir(t, c)

			// score: the log-probs the model gives
			code, out, errOut := runCaptured(t, "score", "--model", dir, "--json", "Two plus two is four.")
			if code != 0 {
				t.Fatalf("score: exit %d: %s", code, errOut)
			}
			var doc struct {
				Texts []struct {
					IDs      []int      `json:"ids"`
					Context  []int      `json:"context"`
					LogProbs []*float64 `json:"logprobs"`
				} `json:"texts"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Texts) != 1 {
				t.Fatalf("score --json: %v\n%s", err, out)
			}
			r := doc.Texts[0]
			want, err := m.LogProbs([][]int{append(slices.Clone(r.Context), r.IDs...)}, 1, model.AdaptersOn)
			if err != nil {
				t.Fatal(err)
			}
			for j := range r.IDs {
				if r.LogProbs[j] == nil || math.Abs(*r.LogProbs[j]-float64(want[0][len(r.Context)+j])) > 1e-6 {
					t.Fatalf("score: token %d log-prob %v, want %g", j, r.LogProbs[j], want[0][len(r.Context)+j])
				}
			}

			// generate: greedy tokens as Generate gives them
			code, out, errOut = runCaptured(t, "generate", "--model", dir, "--temperature", "0", "--max-new-tokens", "10", "--json", "Once upon a time")
			if code != 0 {
				t.Fatalf("generate: exit %d: %s", code, errOut)
			}
			var gen struct {
				IDs []int `json:"ids"`
			}
			if err := json.Unmarshal([]byte(out), &gen); err != nil {
				t.Fatal(err)
			}
			g, err := m.Generate([][]int{tok.Encode("Once upon a time", true).IDs}, model.GenerateOptions{MaxNewTokens: 10})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(gen.IDs, g.Tokens[0]) {
				t.Fatalf("generate: %v, want %v", gen.IDs, g.Tokens[0])
			}

			// --batch: two GRPO steps over a 4-bit base with LoRA on every linear
			runs := t.TempDir()
			code, out, errOut = runCaptured(t, "--batch", "--model", dir, "--out", runs, "--steps", "2", "--batch-size", "2",
				"--num-generations", "2", "--max-completion-length", "6", "--save-steps", "2", "--run-name", "r", "--preset", "math")
			if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
				t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
			}
			list, err := checkpoint.List(filepath.Join(runs, "r", "checkpoints"))
			if err != nil || len(list) == 0 {
				t.Fatalf("checkpoints %v %v", list, err)
			}
			ck := list[len(list)-1].Path
			cfgRaw, err := os.ReadFile(filepath.Join(ck, checkpoint.AdapterConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			wantModule := map[string]string{"gemma2": `"gate_proj"`, "phi3": `"qkv_proj"`}[name]
			if !strings.Contains(string(cfgRaw), wantModule) {
				t.Errorf("adapter_config.json does not name %s:\n%s", wantModule, cfgRaw)
			}

			// inspect: the checkpoint's health over the family's modules
			code, out, errOut = runCaptured(t, "inspect", ck, "--json")
			if code != 0 {
				t.Fatalf("inspect: exit %d: %s", code, errOut)
			}
			var insp struct {
				Adapter struct {
					Modules int `json:"modules"`
				} `json:"adapter"`
			}
			if err := json.Unmarshal([]byte(out), &insp); err != nil || insp.Adapter.Modules != len(m.Linears()) {
				t.Errorf("inspect: %d modules (%v), want %d\n%s", insp.Adapter.Modules, err, len(m.Linears()), out)
			}

			// quantize: a 4-bit folder that loads and scores
			q := filepath.Join(t.TempDir(), "q")
			code, out, errOut = runCaptured(t, "quantize", "--model", dir, "--out", q)
			if code != 0 || !strings.Contains(out, "quantized") {
				t.Fatalf("quantize: exit %d\n%s\n%s", code, out, errOut)
			}
			qm, err := model.Load(q)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range qm.Linears() {
				if _, ok := l.W.(*model.Quantized); !ok {
					t.Errorf("%s not 4-bit after quantize", l.Name)
				}
			}
			if code, _, errOut := runCaptured(t, "score", "--model", q, "Two plus two is four."); code != 0 {
				t.Errorf("score on the 4-bit folder: exit %d: %s", code, errOut)
			}
		})
	}
}
