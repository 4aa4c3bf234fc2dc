package builtin

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/env"
	"rlhfstation/engine/model"
	"rlhfstation/engine/pretrain"
	"rlhfstation/engine/tokenizer"
)

func TestExtractIsIdempotentAndAtomic(t *testing.T) {
	parent := t.TempDir()
	// several first uses at once agree on one complete copy
	var wg sync.WaitGroup
	dirs := make([]string, 6)
	errs := make([]error, 6)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = extract(parent)
		}()
	}
	wg.Wait()
	h, _ := Hash()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != filepath.Join(parent, "builtin-"+h) {
			t.Fatalf("extract %d: %q, %v", i, dirs[i], errs[i])
		}
	}
	dir := dirs[0]
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the cache folder holds %v, want only builtin-%s (no temporary folder left)", names, h)
	}
	want, _ := files.ReadFile("model/model.safetensors")
	got, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("extracted model.safetensors differs from the embedded one (%v)", err)
	}
	// a second use leaves the copy alone
	info, _ := os.Stat(filepath.Join(dir, "config.json"))
	again, err := extract(parent)
	if err != nil || again != dir {
		t.Fatalf("second extract: %q, %v", again, err)
	}
	info2, _ := os.Stat(filepath.Join(dir, "config.json"))
	if !info2.ModTime().Equal(info.ModTime()) {
		t.Errorf("the second use rewrote the folder")
	}
	// a copy damaged by hand is replaced by a whole one
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if again, err = extract(parent); err != nil || again != dir {
		t.Fatalf("extract over a damaged copy: %q, %v", again, err)
	}
	if !complete(dir) {
		t.Errorf("the damaged copy was not repaired")
	}
}

func TestDirUsesTheUserCacheFolder(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache) // macOS: Library/Caches under HOME
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, cache) || !strings.HasPrefix(filepath.Base(dir), "builtin-") || filepath.Base(filepath.Dir(dir)) != "rlhfstation" {
		t.Errorf("Dir() = %s, want <cache>/rlhfstation/builtin-<hash>", dir)
	}
}

// TestBuiltinModel measures the built-in model on held-out synthetic text (documents of a
// seed the corpus never used) and shows its greedy continuations of held-out prompts.
func TestBuiltinModel(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != m.Config.Vocab || m.Config.Family() != model.Llama || len(m.Config.EOS) == 0 || m.Config.EOS[0] != 0 {
		t.Fatalf("tokenizer of %d entries, model %s of vocabulary %d, EOS %v", tok.VocabSize(), m.Config.ModelType, m.Config.Vocab, m.Config.EOS)
	}
	var texts []string
	for _, d := range synth.Generate(987654, 48<<10) {
		texts = append(texts, d.Text)
	}
	s := pretrain.Tokenize(tok, texts)
	var seqs [][]int
	T := m.Config.MaxPos
	for lo := 0; lo+T <= len(s.IDs) && len(seqs) < 32; lo += T {
		w := make([]int, T)
		for i := range w {
			w[i] = int(s.IDs[lo+i])
		}
		seqs = append(seqs, w)
	}
	loss, err := pretrain.MeanLoss(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	lnV := math.Log(float64(m.Config.Vocab))
	t.Logf("built-in model: %d parameters; validation loss %.4f nats/token on %d held-out tokens (perplexity %.2f); uniform guess ln %d = %.4f",
		m.NumParams(), loss, len(seqs)*(T-1), math.Exp(loss), m.Config.Vocab, lnV)
	if loss > 0.5*lnV {
		t.Errorf("validation loss %.4f, want below half of ln V = %.4f", loss, 0.5*lnV)
	}

	story, _ := synth.Prompts("story", 1, 1)
	math1, _ := synth.Prompts("math", 1, 1)
	for _, p := range []synth.Prompt{story[0], math1[0]} {
		g, err := m.Generate([][]int{tok.Encode(p.Prompt, true).IDs}, model.GenerateOptions{MaxNewTokens: 96})
		if err != nil {
			t.Fatal(err)
		}
		out := tok.Decode(g.Tokens[0], true)
		t.Logf("greedy continuation\nPROMPT: %s\nOUTPUT: %s", p.Prompt, out)
		if len(strings.TrimSpace(out)) == 0 {
			t.Errorf("empty continuation of %q", p.Prompt)
		}
		if p.Answer != "" && !strings.Contains(out, "#### ") {
			t.Errorf("math continuation %q has no #### line", out)
		}
	}
}

// TestBuiltinModelCallsTheCalculator: asked a held-out word problem as a math-tools episode
// renders it (the prompt, a newline), the shipped model calls calc in some of its sampled first
// turns, in the plain template's syntax with an expression the calculator evaluates, and with
// the right numbers in only some of them: what a math-tools run has to learn from.
func TestBuiltinModelCallsTheCalculator(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const prompts, samples = 16, 4
	ps, err := synth.Prompts("math", 1000, prompts)
	if err != nil {
		t.Fatal(err)
	}
	var in [][]int
	var answers []string
	for _, p := range ps {
		for range samples {
			in = append(in, tok.Encode(p.Prompt+"\n", true).IDs)
			answers = append(answers, p.Answer)
		}
	}
	g, err := m.Generate(in, model.GenerateOptions{MaxNewTokens: 64, Temperature: 1, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var calls, malformed, right int
	for i, ids := range g.Tokens {
		text := tok.Decode(ids, true)
		if !strings.Contains(text, "<tool_call>") {
			continue
		}
		calls++
		_, cs, err := env.Parse(env.Hermes, text)
		if err != nil || len(cs) != 1 || cs[0].Name != "calc" {
			malformed++
			t.Logf("malformed: %q", text)
			continue
		}
		expr, _ := cs[0].Arguments["expression"].(string)
		v, err := env.Eval(expr)
		if err != nil {
			malformed++
			continue
		}
		if env.FormatNumber(v) == answers[i] {
			right++
		}
	}
	n := float64(len(in))
	t.Logf("%d first turns: %.0f%% call calc, %d of %d calls malformed, %d calls give the answer", len(in), 100*float64(calls)/n, malformed, calls, right)
	if share := float64(calls) / n; share < 0.2 || share > 0.8 || float64(malformed) > 0.25*float64(calls) || right == 0 || right == calls-malformed {
		t.Errorf("%.2f of first turns call calc (want 0.2–0.8), %d of %d malformed (want at most a quarter), %d give the answer (want some, not all)",
			share, malformed, calls, right)
	}
}
