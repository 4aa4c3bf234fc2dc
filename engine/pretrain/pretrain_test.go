package pretrain

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/safetensors"
)

// tiny is a model small enough to train for a few dozen steps in a test.
func tiny() Options {
	o := Defaults()
	o.Config = model.Config{ModelType: "llama", Vocab: 320, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2,
		Hidden: 64, MaxPos: 64, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1}
	o.CorpusBytes, o.ValBytes, o.TokenizerBytes = 200_000, 20_000, 0
	o.Steps, o.Batch, o.LR, o.Warmup = 60, 8, 1e-2, 5
	o.EvalEvery, o.EvalTokens = 0, 4096
	return o
}

func TestTrainingLowersLoss(t *testing.T) {
	tr, err := New(tiny())
	if err != nil {
		t.Fatal(err)
	}
	before, err := tr.ValLoss()
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	res, err := tr.Run(context.Background(), func(p Progress) {
		losses = append(losses, p.Loss)
		if p.Tokens != p.Step*8*64 || p.TokensPerSec <= 0 {
			t.Errorf("step %d: tokens %d, %.0f tokens/s", p.Step, p.Tokens, p.TokensPerSec)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	first, last := mean(losses[:3]), mean(losses[len(losses)-5:])
	lnV := math.Log(float64(tr.Opts.Config.Vocab))
	t.Logf("ln V %.3f; training loss %.3f → %.3f; validation %.3f → %.3f", lnV, first, last, before, res.ValLoss)
	if len(losses) != 60 || res.Steps != 60 || res.Interrupted {
		t.Fatalf("%d progress calls, result %+v", len(losses), res)
	}
	if math.Abs(first-lnV) > 0.5 {
		t.Errorf("first losses %.3f, want about ln V = %.3f (a fresh model guesses uniformly)", first, lnV)
	}
	if last > first-1.0 {
		t.Errorf("training loss went from %.3f to %.3f, want a drop of at least 1 nat", first, last)
	}
	if res.ValLoss > before-1.0 || res.UniformLoss != lnV {
		t.Errorf("validation loss %.3f → %.3f (uniform %.3f), want a drop of at least 1 nat", before, res.ValLoss, res.UniformLoss)
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func TestDeterministicForASeed(t *testing.T) {
	run := func(seed uint64) []float64 {
		o := tiny()
		o.Seed, o.CorpusBytes = seed, 60_000
		tr, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for range 4 {
			p, err := tr.Step()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p.Loss)
		}
		return out
	}
	a, b, c := run(3), run(3), run(4)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 3 twice: losses %v and %v", a, b)
		}
	}
	if a[3] == c[3] {
		t.Errorf("seeds 3 and 4 gave the same loss %v", a[3])
	}
}

func TestInterruptStopsAndKeepsTheModel(t *testing.T) {
	o := tiny()
	o.CorpusBytes = 60_000
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := tr.Run(ctx, func(p Progress) {
		if p.Step == 3 {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Steps != 3 || math.IsNaN(res.ValLoss) {
		t.Errorf("interrupted run: %+v, want Interrupted after 3 steps with a validation loss", res)
	}
}

func TestSaveWritesALoadableFolder(t *testing.T) {
	o := tiny()
	o.CorpusBytes, o.Steps = 60_000, 3
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "stale.txt"), []byte("old"), 0o644)
	if err := tr.Save(dir, safetensors.F16, res); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(dir))
	if len(entries) != 1 {
		t.Errorf("beside the folder: %d entries, want only the folder (no temporary left)", len(entries))
	}
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "pretrain.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "stale.txt")); err == nil {
		t.Errorf("the old folder's files survived: the folder was not replaced whole")
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Vocab != tr.Opts.Config.Vocab || len(m.Config.EOS) != 1 || m.Config.EOS[0] != 0 || m.Config.BOS != -1 {
		t.Errorf("loaded config: vocab %d, EOS %v, BOS %d", m.Config.Vocab, m.Config.EOS, m.Config.BOS)
	}
	f, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range f.Names() {
		if info, _ := f.Info(name); info.DType != safetensors.F16 {
			t.Errorf("%s is %s, want F16", name, info.DType)
		}
	}
	f.Close()
	// F16 weights: the loaded model scores like the trained one within F16's rounding.
	seqs := evalWindows(tr.val, 64, 256)
	want, _ := MeanLoss(tr.Model, seqs)
	got, err := MeanLoss(m, seqs)
	if err != nil || math.Abs(got-want) > 1e-2 {
		t.Errorf("loss of the saved model %.5f, of the trained one %.5f (%v)", got, want, err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID(EOS); !ok || id != 0 || tok.VocabSize() != m.Config.Vocab {
		t.Errorf("tokenizer: EOS id %d (%v), vocab %d", id, ok, tok.VocabSize())
	}
	var rec map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "pretrain.json"))
	if err := json.Unmarshal(b, &rec); err != nil || rec["steps"] != 3.0 || rec["result"] == nil {
		t.Errorf("pretrain.json: %s (%v)", b, err)
	}
}

func TestFileCorpusHoldsOutEveryTwentiethDocument(t *testing.T) {
	var docs []string
	for i := range 40 {
		docs = append(docs, strings.Repeat("word ", i+1)+"end.")
	}
	dir := t.TempDir()
	blank := filepath.Join(dir, "blank.txt")
	os.WriteFile(blank, []byte(strings.Join(docs, "\n\n")+"\n"), 0o644)
	lines := filepath.Join(dir, "lines.txt")
	os.WriteFile(lines, []byte(strings.Join(docs, "\n")+"\n"), 0o644)
	for _, p := range []string{blank, lines} {
		train, val, err := Documents(p, 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(train) != 38 || len(val) != 2 || val[0] != docs[19] || val[1] != docs[39] {
			t.Errorf("%s: %d training and %d validation documents (%q)", filepath.Base(p), len(train), len(val), val)
		}
	}
	if _, _, err := Documents(filepath.Join(dir, "absent.txt"), 1, 0, 0); err == nil || !strings.Contains(err.Error(), "absent.txt") {
		t.Errorf("absent corpus: %v, want an error naming the file", err)
	}
}

func TestStreamAndWindows(t *testing.T) {
	tok, err := TrainTokenizer([]string{"one two three", "four five six"}, 270, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := Tokenize(tok, []string{"one two", "three"})
	if s.Starts[0] != 0 || s.IDs[s.Starts[1]-1] != 0 || s.IDs[len(s.IDs)-1] != 0 {
		t.Errorf("stream %v starts %v: each document must end with EOS (0)", s.IDs, s.Starts)
	}
	if got := tok.Decode(intsOf(s.IDs), false); got != "one two<|endoftext|>three<|endoftext|>" {
		t.Errorf("stream decodes to %q", got)
	}
	w := evalWindows(s, 3, 0)
	n := 0
	for _, x := range w {
		n += len(x)
	}
	if n != len(s.IDs) || len(w[0]) != 3 {
		t.Errorf("eval windows %v cover %d of %d tokens", w, n, len(s.IDs))
	}
	sm, err := newSampler(s, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]int, 3)
	for range 20 {
		sm.window(dst)
	}
	if _, err := newSampler(s, len(s.IDs), 1); err == nil {
		t.Errorf("a window as long as the stream was accepted")
	}
}

func intsOf(v []int32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func TestBadOptions(t *testing.T) {
	for _, mod := range []func(*Options){
		func(o *Options) { o.Config.ModelType = "gpt2" },
		func(o *Options) { o.Config.Vocab = 100 },
		func(o *Options) { o.Config.Heads = 5 },
		func(o *Options) { o.Steps = -1 },
	} {
		o := tiny()
		mod(&o)
		_, err := New(o)
		var oe *OptionsError
		if !errors.As(err, &oe) {
			t.Errorf("options %+v: error %v, want an OptionsError", o.Config, err)
		}
	}
}

// Continued pretraining (From) starts from the folder's weights and tokenizer, on the corpus
// with tool-call transcripts, lowers their loss, and records the run it continued.
func TestContinuedPretraining(t *testing.T) {
	o := tiny()
	o.CorpusBytes, o.Steps = 60_000, 3
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tr.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(t.TempDir(), "first")
	if err := tr.Save(first, safetensors.F32, res); err != nil {
		t.Fatal(err)
	}
	c := tiny()
	c.From, c.Corpus, c.Steps, c.LR, c.Warmup, c.Config = first, SyntheticTools, 30, 3e-3, 2, model.Config{}
	tr2, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if tr2.Tokenizer.VocabSize() != tr.Tokenizer.VocabSize() || tr2.Opts.Config.Dim != 32 {
		t.Fatalf("continued: vocabulary %d, dim %d", tr2.Tokenizer.VocabSize(), tr2.Opts.Config.Dim)
	}
	before, err := tr2.ValLoss()
	if err != nil {
		t.Fatal(err)
	}
	if was, _ := MeanLoss(tr.Model, evalWindows(tr2.val, 64, 4096)); math.Abs(was-before) > 1e-4 {
		t.Fatalf("continued run starts at loss %v, the saved model has %v: not its weights", before, was)
	}
	res2, err := tr2.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !(res2.ValLoss < before) {
		t.Errorf("validation loss %v → %v: continued pretraining did not lower it", before, res2.ValLoss)
	}
	second := filepath.Join(t.TempDir(), "second")
	if err := tr2.Save(second, safetensors.F32, res2); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(second, "pretrain.json"))
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil || rec["from"] != first || rec["continued_from"] == nil || rec["corpus"] != SyntheticTools {
		t.Errorf("pretrain.json: %s", b)
	}
}
