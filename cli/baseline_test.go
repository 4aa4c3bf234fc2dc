package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"rlhfstation/engine"
	"strings"
	"testing"

	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/rewards"
)

// baselineCorpus trains the test tokenizer; its merges make words of several tokens.
const baselineCorpus = "the cat sat on the mat. the dog ran to the park! where is the cat? " +
	"Natalia sold 48 clips in April and half as many in May.\n#### 72\n"

// llamaTestDir makes a random llama-family model folder with a tokenizer trained here
// (<s> is id 0 and the model's BOS).
func llamaTestDir(t *testing.T) (string, *model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	tok, err := tokenizer.Train([]string{baselineCorpus, baselineCorpus}, 300, []string{"<s>"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(model.Config{ModelType: "llama", Vocab: tok.VocabSize(), Dim: 32, Layers: 2, Heads: 4, KVHeads: 2,
		HeadDim: 8, Hidden: 64, MaxPos: 96, NormEps: 1e-5, RopeTheta: 10000, BOS: 0, EOS: []int{0}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	return dir, m, tok
}

// directWordPerplexity is P_word computed without the rewards package: the full logits of
// context+text from one forward pass, log-softmax in float64, Σ NLL over the text's tokens,
// divided by the number of whitespace-separated words (every token belongs to one word).
func directWordPerplexity(t *testing.T, m *model.Model, context, ids []int, text string) float64 {
	t.Helper()
	seq := append(append([]int(nil), context...), ids...)
	logits, err := m.Forward(m.NewCache(1, len(seq)), [][]int{seq}, false, model.AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config.Vocab
	total := 0.0
	for j := range ids {
		row := logits[(len(context)+j-1)*v : (len(context)+j)*v]
		maxL := math.Inf(-1)
		for _, x := range row {
			maxL = math.Max(maxL, float64(x))
		}
		sum := 0.0
		for _, x := range row {
			sum += math.Exp(float64(x) - maxL)
		}
		total += maxL + math.Log(sum) - float64(row[ids[j]])
	}
	return math.Exp(total / float64(len(strings.Fields(text))))
}

func TestBaselineCommand(t *testing.T) {
	dir, m, tok := llamaTestDir(t)
	docs := []string{"the cat sat on the mat.\nthe dog ran!", "where is the   cat? in the park"}
	textPath := filepath.Join(t.TempDir(), "ref.txt")
	os.WriteFile(textPath, []byte(docs[0]+"\n\n"+docs[1]+"\n"), 0o644)
	out := filepath.Join(t.TempDir(), "baselines.json")

	code, stdout, stderr := runCaptured(t, "baseline", "--model", dir, "--data", textPath, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "baselines over 2 samples") || !strings.Contains(stdout, "wrote "+out) {
		t.Errorf("output:\n%s", stdout)
	}
	b, err := rewards.LoadBaselines(out)
	if err != nil {
		t.Fatal(err)
	}
	mh, th, _ := rewards.FolderHashes(dir)
	if b.ModelHash != mh || b.TokenizerHash != th || b.Samples != 2 || b.Source != textPath {
		t.Errorf("baselines %+v", b)
	}
	// B_word is the geometric mean of the documents' P_word, each scored after the BOS.
	want := 1.0
	for _, d := range docs {
		want *= directWordPerplexity(t, m, []int{0}, tok.Encode(d, false).IDs, d)
	}
	want = math.Sqrt(want)
	if math.Abs(b.Levels.Word-want) > 1e-4*want {
		t.Errorf("B_word = %v, want %v", b.Levels.Word, want)
	}
	if b.Levels.Phrase <= 0 || b.Levels.Sentence <= 0 || b.Std.Word <= 0 {
		t.Errorf("levels %+v std %+v", b.Levels, b.Std)
	}

	// --max-samples and --json.
	code, stdout, _ = runCaptured(t, "baseline", "--model", dir, "--data", textPath, "--out", out, "--max-samples", "1", "--json")
	var doc rewards.Baselines
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Samples != 1 {
		t.Errorf("--max-samples 1 --json: exit %d, %q", code, stdout)
	}
	// Usage errors.
	if code, _, _ := runCaptured(t, "baseline", "--model", dir); code != 2 {
		t.Errorf("no --data: exit %d, want 2", code)
	}
	if code, _, stderr := runCaptured(t, "baseline", "--model", dir, "--data", filepath.Join(t.TempDir(), "none.txt")); code != 1 || !strings.Contains(stderr, "none.txt") {
		t.Errorf("missing data: exit %d %s", code, stderr)
	}
}

func TestBaselineSamples(t *testing.T) {
	_, m, tok := llamaTestDir(t)
	// GSM8K: the answer is scored after BOS + question + newline.
	gsm := []data.Example{{Prompt: "How many clips?", Answer: "72", Text: "She sold 72 clips.\n#### 72"}}
	s := engine.BaselineSamples(tok, 0, m.Config.MaxPos, gsm, data.GSM8K, "\n", 256, 0)
	wantCtx := append([]int{0}, tok.Encode("How many clips?\n", false).IDs...)
	if len(s) != 1 || !equalInts(s[0].Context, wantCtx) || s[0].Text != gsm[0].Text || !equalInts(s[0].IDs, tok.Encode(gsm[0].Text, false).IDs) {
		t.Fatalf("gsm8k sample %+v", s)
	}

	// A long document in chunks of at most 6 tokens, each after the tokens before it (at
	// most 6 of them, BOS first once the document's start is cut off).
	doc := "the cat sat on the mat. the dog ran to the park! where is the cat?"
	ids := tok.Encode(doc, false).IDs
	s = engine.BaselineSamples(tok, 0, m.Config.MaxPos, []data.Example{{Text: doc}}, data.Documents, "\n", 6, 0)
	all := append([]int{0}, ids...)
	pos, joined := 0, ""
	for k, c := range s {
		if len(c.IDs) == 0 || len(c.IDs) > 6 || len(c.Spans) != len(c.IDs) {
			t.Fatalf("chunk %d: %d ids, %d spans", k, len(c.IDs), len(c.Spans))
		}
		if !equalInts(c.IDs, ids[pos:pos+len(c.IDs)]) {
			t.Errorf("chunk %d ids %v", k, c.IDs)
		}
		start := 1 + pos // index of the chunk in all
		wantCtx := all[max(0, start-6):start]
		if start > 6 {
			wantCtx = append([]int{0}, all[start-5:start]...)
		}
		if !equalInts(c.Context, wantCtx) {
			t.Errorf("chunk %d context %v, want %v", k, c.Context, wantCtx)
		}
		last := c.Spans[len(c.Spans)-1]
		if last.End != len(c.Text) {
			t.Errorf("chunk %d: spans %v do not cover %q", k, c.Spans, c.Text)
		}
		joined += c.Text
		pos += len(c.IDs)
	}
	if pos != len(ids) || joined != doc {
		t.Errorf("chunks cover %d of %d tokens: %q", pos, len(ids), joined)
	}
	if got := engine.BaselineSamples(tok, 0, m.Config.MaxPos, []data.Example{{Text: doc}}, data.Documents, "\n", 6, 2); len(got) != 2 {
		t.Errorf("max samples 2: %d", len(got))
	}
	// Without a BOS the first token only conditions the rest.
	s = engine.BaselineSamples(tok, -1, m.Config.MaxPos, []data.Example{{Text: "the cat"}}, data.Documents, "\n", 256, 0)
	if len(s) != 1 || len(s[0].Context) != 1 || s[0].Context[0] != ids[0] {
		t.Errorf("no BOS: %+v", s)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestScoreRewards(t *testing.T) {
	dir, m, tok := llamaTestDir(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	text := "the cat sat. the dog ran!"
	ids := tok.Encode(text, false).IDs
	lp, err := m.LogProbs([][]int{append([]int{0}, ids...)}, 1, model.AdaptersOn)
	if err != nil {
		t.Fatal(err)
	}
	logProbs := make([]*float64, len(ids))
	for i := range ids {
		v := float64(lp[0][i+1])
		logProbs[i] = &v
	}
	pword := directWordPerplexity(t, m, []int{0}, ids, text)

	// Baselines 2% above this text's levels in every level: I = 2%/1.02 ≈ 1.96% → story's step reward 0.7.
	rs, err := newScoreRewards(dir, "", "", false, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rs.score(tok, text, logProbs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Preset != "story" || r.Reward != nil || len(r.Words) != 6 || math.Abs(*r.Word-pword) > 1e-4*pword {
		t.Fatalf("without baselines: %+v (P_word want %v)", r, pword)
	}
	mh, th, _ := rewards.FolderHashes(dir)
	b := rewards.Baselines{Format: rewards.BaselinesFormat, Samples: 1, ModelHash: mh, TokenizerHash: th,
		Levels: rewards.Levels{Word: *r.Word * 1.02, Phrase: *r.Phrase * 1.02, Sentence: *r.Sentence * 1.02}}
	path := filepath.Join(t.TempDir(), "b.json")
	b.Save(path)
	rs, err = newScoreRewards(dir, "story", path, false, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = rs.score(tok, text, logProbs)
	if math.Abs(*r.Improvement-0.02/1.02) > 1e-9 || *r.Reward != 0.7 {
		t.Errorf("with baselines: improvement %v reward %v", *r.Improvement, *r.Reward)
	}
	var sb strings.Builder
	printTextRewards(&sb, r)
	if !strings.Contains(sb.String(), "improvement +1.96%  reward 0.70") || !strings.Contains(sb.String(), "word NLLs: the:") {
		t.Errorf("printed:\n%s", sb.String())
	}

	// Baselines of another model are refused, unless accepted.
	b.ModelHash = "sha256:other"
	b.Save(path)
	if _, err := newScoreRewards(dir, "story", path, false, os.Stderr); err == nil || !strings.Contains(err.Error(), "--accept-baselines") {
		t.Errorf("mismatched baselines: %v", err)
	}
	var warn strings.Builder
	if _, err := newScoreRewards(dir, "story", path, true, &warn); err != nil || !strings.Contains(warn.String(), "warning") {
		t.Errorf("accepted: %v %q", err, warn.String())
	}
}
