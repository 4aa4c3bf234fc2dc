package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testref"
)

// tinyModelDir makes a random gpt2-family model folder with GPT-2's tokenizer.
func tinyModelDir(t *testing.T) (string, *model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	src := testref.SharedData(t, "tokenizers/gpt2/tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(model.Config{ModelType: "gpt2", Vocab: tok.VocabSize(), Dim: 32, Layers: 2, Heads: 4,
		Hidden: 64, MaxPos: 64, NormEps: 1e-5, TieEmbed: true, BOS: 50256, EOS: []int{50256}}, 1)
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

func TestScoreCommand(t *testing.T) {
	dir, m, tok := tinyModelDir(t)
	code, out, errOut := runCaptured(t, "score", "--model", dir, "--json", "Hello world", "A second, longer text.")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Texts []struct {
			Text       string     `json:"text"`
			Context    []int      `json:"context"`
			IDs        []int      `json:"ids"`
			Tokens     []string   `json:"tokens"`
			LogProbs   []*float64 `json:"logprobs"`
			MeanNLL    *float64   `json:"mean_nll"`
			Perplexity *float64   `json:"perplexity"`
		} `json:"texts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, out)
	}
	if len(doc.Texts) != 2 {
		t.Fatalf("%d texts", len(doc.Texts))
	}
	for _, r := range doc.Texts {
		ids := tok.Encode(r.Text, false).IDs
		if !slices.Equal(r.IDs, ids) || !slices.Equal(r.Context, []int{50256}) || len(r.Tokens) != len(ids) {
			t.Fatalf("%q: ids %v context %v", r.Text, r.IDs, r.Context)
		}
		want, err := m.LogProbs([][]int{append([]int{50256}, ids...)}, 1, model.AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		var nll float64
		for j := range ids {
			if r.LogProbs[j] == nil || math.Abs(*r.LogProbs[j]-float64(want[0][j+1])) > 1e-6 {
				t.Fatalf("%q token %d: log-prob %v, want %g", r.Text, j, r.LogProbs[j], want[0][j+1])
			}
			nll -= *r.LogProbs[j]
		}
		nll /= float64(len(ids))
		if math.Abs(*r.MeanNLL-nll) > 1e-9 || math.Abs(*r.Perplexity-math.Exp(nll)) > 1e-6*math.Exp(nll) {
			t.Fatalf("%q: mean NLL %g perplexity %g, want %g %g", r.Text, *r.MeanNLL, *r.Perplexity, nll, math.Exp(nll))
		}
	}
	code, out, _ = runCaptured(t, "score", "--model", dir, "Hello world")
	if code != 0 || !strings.Contains(out, "perplexity") || !strings.Contains(out, `"Hello"`) {
		t.Fatalf("human output (exit %d):\n%s", code, out)
	}
	if code, _, _ := runCaptured(t, "score", "--model", dir); code != exitUsage {
		t.Errorf("no text: exit %d", code)
	}
	if code, _, errOut := runCaptured(t, "score", "--model", t.TempDir(), "x"); code != exitFailed || !strings.Contains(errOut, "config.json") {
		t.Errorf("empty folder: exit %d, %q", code, errOut)
	}
	if code, _, _ := runCaptured(t, "score", "-h"); code != exitOK {
		t.Errorf("-h: exit %d", code)
	}
}

func TestGenerateCommand(t *testing.T) {
	dir, m, tok := tinyModelDir(t)
	code, out, errOut := runCaptured(t, "generate", "--model", dir, "--temperature", "0", "--max-new-tokens", "12", "--json", "Once upon a time")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		PromptIDs []int     `json:"prompt_ids"`
		Text      string    `json:"text"`
		IDs       []int     `json:"ids"`
		Tokens    []string  `json:"tokens"`
		LogProbs  []float32 `json:"logprobs"`
		Cut       bool      `json:"cut"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, out)
	}
	g, err := m.Generate([][]int{tok.Encode("Once upon a time", true).IDs}, model.GenerateOptions{MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(doc.IDs, g.Tokens[0]) || len(doc.LogProbs) != len(doc.IDs) || len(doc.Tokens) != len(doc.IDs) ||
		doc.Text != tok.Decode(g.Tokens[0], true) || doc.Cut != g.Cut[0] {
		t.Fatalf("got %+v, want ids %v", doc, g.Tokens[0])
	}
	// Seeded sampling is reproducible.
	args := []string{"generate", "--model", dir, "--seed", "5", "--max-new-tokens", "8", "Hello"}
	_, a, _ := runCaptured(t, args...)
	_, b, _ := runCaptured(t, args...)
	if a != b || a == "" {
		t.Errorf("same seed, different text: %q vs %q", a, b)
	}
	if code, _, _ := runCaptured(t, "generate", "--model", dir, "--top-p", "0", "x"); code != exitUsage {
		t.Errorf("bad --top-p: exit %d", code)
	}
	long := strings.Repeat("word ", 100)
	if code, _, errOut := runCaptured(t, "generate", "--model", dir, long); code != exitFailed || !strings.Contains(errOut, "context") {
		t.Errorf("prompt over the context: exit %d, %q", code, errOut)
	}
}
