package cuda_test

import (
	"path/filepath"
	"testing"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// familyFolders are a model of each family whose maths differs from llama's.
func familyFolders() []struct {
	name string
	cfg  model.Config
} {
	return []struct {
		name string
		cfg  model.Config
	}{
		{"qwen3", model.Config{ModelType: "qwen3", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32, Hidden: 128,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 1e6, TieEmbed: true, BOS: -1}},
		{"gemma", model.Config{ModelType: "gemma", Dim: 64, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 32, Hidden: 128,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 1e4, TieEmbed: true, BOS: -1}},
		{"gemma2", model.Config{ModelType: "gemma2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, Hidden: 128,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 1e4, TieEmbed: true, Window: 8, Sliding: []bool{true, false},
			QueryScale: 16, AttnSoftcap: 5, FinalSoftcap: 8, BOS: -1}},
		{"gemma3_text", model.Config{ModelType: "gemma3_text", Dim: 64, Layers: 3, Heads: 4, KVHeads: 1, HeadDim: 16,
			Hidden: 128, MaxPos: 256, NormEps: 1e-6, RopeTheta: 1e6, LocalRopeTheta: 1e4, TieEmbed: true, Window: 8,
			Sliding: []bool{true, true, false}, QueryScale: 16, BOS: -1}},
		{"phi3", model.Config{ModelType: "phi3", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, RotaryDim: 12,
			Hidden: 96, MaxPos: 512, NormEps: 1e-5, RopeTheta: 1e4, TieEmbed: true, BOS: -1,
			RopeScaling: &model.RopeScaling{Type: "longrope", Factor: 2, OriginalMaxPos: 256, AttentionFactor: 1.05,
				ShortFactor: []float64{1, 1.1, 1.2, 1.4, 1.7, 2}, LongFactor: []float64{2, 2, 2, 2, 2, 2}}}},
		{"smollm3", model.Config{ModelType: "smollm3", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 128,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 5e6, TieEmbed: true, NoRoPE: []bool{false, true}, BOS: -1}},
		{"olmo2", model.Config{ModelType: "olmo2", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 128,
			MaxPos: 256, NormEps: 1e-6, RopeTheta: 5e5, BOS: -1}},
	}
}

// familyFolder is folder's random model (matrices ×8) for the families, with gemma's norm
// weights at 0: its norms scale by 1 + w, so that they scale by 1 as the other families' do
// (with w = 1 every activation doubles, and bf16's rounding in the device's attention and
// products with it: the same model with its weights folded to 2 and no offset gives the same
// log-probs to the last bit on either device, and differs from the CPU by 0.07 on the device).
func familyFolder(t *testing.T, cfg model.Config) string {
	t.Helper()
	src, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Vocab = tok.VocabSize()
	m, err := model.NewRandom(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Params {
		for i := range p.Data {
			switch {
			case len(p.Shape) == 2:
				p.Data[i] *= 8
			case m.Config.NormOffset == 1:
				p.Data[i] = 0
			}
		}
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(src, "tokenizer.json"), filepath.Join(dir, "tokenizer.json"))
	return dir
}

// TestFamiliesScoreOnTheDevice: `score --device cuda` against `--device cpu` on a folder of
// each family whose maths differs from llama's (random, matrices scaled ×8 as in
// TestScoreOnTheDevice): (1 + w) norms and GeGLU, soft-capping and sliding layers, q/k norms
// per head and over whole rows, local RoPE, partial rotary with longrope, NoPE layers, fused
// projections — each op of the family on the device in the model's bf16 activations, within
// the envelope of a bf16 computation that TestScoreOnTheDevice holds the built-in model to
// (0.1 at most, 0.02 on average: what PyTorch's own bf16 autocast differs from its float32 by
// there). Measured on the stand-in: at most 0.056 (qwen3, whose q/k norms round q and k to
// bf16 once more), means 0.007–0.015.
func TestFamiliesScoreOnTheDevice(t *testing.T) {
	onDevice(t)
	texts := []string{"The little robot found a key under the old tree.",
		"Tom has 12 apples and gives 5 to Ann. How many apples does Tom have left? #### 7"}
	for _, c := range familyFolders() {
		worst, mean, n := scoreBoth(t, familyFolder(t, c.cfg), texts...)
		t.Logf("%s: %d log-probs, --device cuda against cpu: largest difference %.4f, mean %.4f", c.name, n, worst, mean)
		if n == 0 || !(worst <= 0.1) || !(mean <= 0.02) {
			t.Errorf("%s: log-probs on the device differ from the CPU's by up to %.4f, %.4f on average (%d compared; tolerance 0.1, 0.02)",
				c.name, worst, mean, n)
		}
	}
}
