package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testref"
)

// TestGemma3TokenizerLargerThanEmbedding: Gemma 3's published tokenizer holds 262,145
// tokens, one more than its vocab_size (<image_soft_token>, id 262144). A gemma3_text folder
// with vocab_size 262144 and the real tokenizer loads, scores and generates; a prompt holding
// <image_soft_token> is refused with the token's name.
func TestGemma3TokenizerLargerThanEmbedding(t *testing.T) {
	src := testref.SharedData(t, "tokenizers/gemma3/tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID("<image_soft_token>"); tok.VocabSize() != 262145 || !ok || id != 262144 {
		t.Fatalf("the gemma3 tokenizer: %d tokens, <image_soft_token> at %d (%v); want 262145 and 262144", tok.VocabSize(), id, ok)
	}
	m, err := model.NewRandom(model.Config{ModelType: "gemma3_text", Vocab: 262144, Dim: 8, Layers: 2, Heads: 1, KVHeads: 1,
		HeadDim: 8, Hidden: 16, MaxPos: 128, NormEps: 1e-6, RopeTheta: 1e6, LocalRopeTheta: 1e4, TieEmbed: true,
		Window: 512, Sliding: []bool{true, false}, QueryScale: 8, BOS: 2, EOS: []int{1, 106}}, 3)
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

	code, stdout, stderr := runCaptured(t, "score", "--model", dir, "--json", "The sky is blue.")
	if code != 0 {
		t.Fatalf("score: exit %d: %s", code, stderr)
	}
	var doc struct {
		Texts []struct {
			LogProbs []*float64 `json:"logprobs"`
		} `json:"texts"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("score --json: %v\n%s", err, stdout)
	}
	if len(doc.Texts) != 1 || len(doc.Texts[0].LogProbs) == 0 {
		t.Fatalf("score --json: %s", stdout)
	}
	for _, lp := range doc.Texts[0].LogProbs {
		// a log-prob over the 262,144 rows of a near-uniform random model
		if lp == nil || !(*lp < 0) || *lp < -40 || math.IsNaN(*lp) {
			t.Fatalf("log-probs %s", stdout)
		}
	}

	code, _, stderr = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "3", "Hello")
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	code, _, stderr = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "3", "look: <image_soft_token>")
	if code != 1 || !strings.Contains(stderr, `"<image_soft_token>" (id 262144)`) || !strings.Contains(stderr, "vocab_size is 262144") {
		t.Fatalf("generate with <image_soft_token>: exit %d, %s; want exit 1 naming the token", code, stderr)
	}
	code, _, stderr = runCaptured(t, "score", "--model", dir, "a <image_soft_token> b")
	if code != 1 || !strings.Contains(stderr, "<image_soft_token>") {
		t.Fatalf("score with <image_soft_token>: exit %d, %s", code, stderr)
	}
}
