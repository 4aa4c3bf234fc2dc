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
