package cli

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
	"rlhfstation/safetensors"
)

// shrink is a published config.json at a test's size: the same keys and forms (scalar or
// list eos, layer_types, rope tables, null values), smaller numbers, the test tokenizer's
// vocabulary.
func shrink(published map[string]any, vocab int) map[string]any {
	c := maps.Clone(published)
	c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"] = 32, 48, 2, vocab
	c["num_attention_heads"], c["num_key_value_heads"] = 4, 2
	if c["model_type"] == "gemma3_text" {
		c["num_key_value_heads"] = 1
	}
	if _, ok := c["head_dim"]; ok {
		c["head_dim"] = 8
	}
	if lt, ok := c["layer_types"].([]any); ok {
		c["layer_types"] = []any{lt[0], "full_attention"}
	}
	if _, ok := c["eos_token_id"].([]any); ok {
		c["eos_token_id"] = []any{0, 1}
	} else {
		c["eos_token_id"] = 0
	}
	c["bos_token_id"] = 0
	if c["pad_token_id"] != nil {
		c["pad_token_id"] = 0
	}
	return c
}

// publishedDir writes a random-weight folder of a published layout at a test's size: config.json
// as published (shrunk), bf16 weights under the published names, the test tokenizer.
func publishedDir(t *testing.T, published map[string]any) string {
	t.Helper()
	src := filepath.Join(testmodel.Dir(t), "tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.MarshalIndent(shrink(published, tok.VocabSize()), "", "  ")
	c, err := model.ParseConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewRandom(*c, 9)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveAs(dir, safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	copyFile(t, src, filepath.Join(dir, "tokenizer.json"))
	return dir
}

// TestPublishedLayoutsEndToEnd: random-weight folders of SmolLM2-135M-Instruct,
// Qwen2.5-0.5B-Instruct (transformers 4 and 5 forms), gemma-3-270m-it and Llama-3.2-1B-Instruct
// (their published config.json keys and tensor names, at a test's size: the full sizes are
// checked from headers in engine/check) load, score, generate and run two GRPO steps with
// --batch on the CPU; and a prequantized bitsandbytes 4-bit folder (what `quantize` writes,
// bitsandbytes' layout) runs as it is: the 4-bit bytes the model computes with are the file's.
// With -short only the transformers 5 Qwen2.5 folder and the 4-bit one run --batch.
func TestPublishedLayoutsEndToEnd(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	layouts := testmodel.PublishedLayouts()
	// a two-line prompt file: the baselines are scored on it, not on the built-in corpus
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\nThe river ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := func(t *testing.T, dir string) {
		runs := t.TempDir()
		code, out, errOut := runCaptured(t, "--batch", "--model", dir, "--data", data, "--out", runs, "--steps", "2", "--batch-size", "1",
			"--num-generations", "2", "--max-completion-length", "4", "--run-name", "r", "--device", "cpu")
		if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
			t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(layouts)) {
		t.Run(name, func(t *testing.T) {
			dir := publishedDir(t, layouts[name])
			if code, _, errOut := runCaptured(t, "check", "--model", dir); code != 0 {
				t.Fatalf("check: exit %d: %s", code, errOut)
			}
			code, out, errOut := runCaptured(t, "score", "--model", dir, "--json", "Two plus two is four.")
			if code != 0 || !strings.Contains(out, `"logprobs"`) {
				t.Fatalf("score: exit %d: %s", code, errOut)
			}
			if code, _, errOut = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "4", "Once upon a time"); code != 0 {
				t.Fatalf("generate: exit %d: %s", code, errOut)
			}
			if !testing.Short() || name == "Qwen2.5-0.5B-Instruct-transformers5" {
				batch(t, dir)
			}
			if name != "SmolLM2-135M-Instruct" {
				return
			}
			q := filepath.Join(t.TempDir(), "bnb-4bit")
			if code, _, errOut = runCaptured(t, "quantize", "--model", dir, "--out", q); code != 0 {
				t.Fatalf("quantize: exit %d: %s", code, errOut)
			}
			m, err := model.Load(q)
			if err != nil {
				t.Fatal(err)
			}
			set, err := safetensors.OpenSet(q)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			n := 0
			for _, l := range m.Linears() {
				w, ok := l.W.(*model.Quantized)
				if !ok {
					continue
				}
				file, err := set.Bytes(l.Name + ".weight")
				if err != nil || !bytes.Equal(file, w.W.Packed) {
					t.Fatalf("%s: the 4-bit codes differ from the file's (%v)", l.Name, err)
				}
				n++
			}
			if n != 2*7 {
				t.Fatalf("%d linears 4-bit, want 14", n)
			}
			batch(t, q)
		})
	}
}

// TestPublishedLayoutsFullShape: random-weight folders of the published layouts at their full
// shapes, written by the project's safetensors writer and removed after: bf16 folders (every
// published tensor name, shape and dtype, config.json as published) and bitsandbytes NF4
// folders as unsloth's *-bnb-4bit ones are on disk (testmodel.WriteBnb4bitFolder). Each passes
// check with the published parameter count, scores (the log-probabilities cover all
// vocab_size rows of the head: a random model's mean NLL is near ln(vocab_size)), generates,
// and runs two GRPO steps with --batch on the CPU (1 prompt, 2 generations, 4 tokens); a 4-bit
// folder's codes are used as stored. gemma-3-270m-it runs with Gemma 3's real tokenizer
// (262,145 tokens over 262,144 rows) when ../shared/data has it; the others with the test
// tokenizer (fewer tokens than rows, as Qwen2.5's and Phi-3's). SmolLM2-135M (bf16 and 4-bit)
// and gemma-3-270m always run; Qwen2.5-0.5B (both config forms, which must score alike),
// Llama-3.2-1B and its 4-bit folder only with RLHFSTATION_FULL_SHAPES=1 (.ci/run sets it),
// as they add over a minute on two cores. Each step's seconds are logged.
func TestPublishedLayoutsFullShape(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and runs folders of 0.1 to 2.5 GB")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	params := map[string]int64{"SmolLM2-135M-Instruct": 134515008, "Qwen2.5-0.5B-Instruct": 494032768,
		"Qwen2.5-0.5B-Instruct-transformers5": 494032768, "gemma-3-270m-it": 268098176, "Llama-3.2-1B-Instruct": 1235814400}
	type shape struct {
		layout string
		bnb    bool // a bitsandbytes 4-bit folder
		large  bool // only with RLHFSTATION_FULL_SHAPES=1
	}
	shapes := []shape{{"SmolLM2-135M-Instruct", false, false}, {"SmolLM2-135M-Instruct", true, false}, {"gemma-3-270m-it", false, false},
		{"Qwen2.5-0.5B-Instruct", false, true}, {"Qwen2.5-0.5B-Instruct-transformers5", false, true},
		{"Llama-3.2-1B-Instruct", false, true}, {"Llama-3.2-1B-Instruct", true, true}}
	full := os.Getenv("RLHFSTATION_FULL_SHAPES") == "1"
	if !full {
		t.Log("Qwen2.5-0.5B-Instruct and Llama-3.2-1B-Instruct at full shape run with RLHFSTATION_FULL_SHAPES=1")
	}
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scores := map[string][]*float64{}
	for _, sh := range shapes {
		name := sh.layout
		if sh.bnb {
			name += "-bnb-4bit"
		}
		if sh.large && !full {
			continue
		}
		t.Run(name, func(t *testing.T) {
			cfg := testmodel.PublishedLayouts()[sh.layout]
			dir := t.TempDir()
			step := func(what string, t0 time.Time) {
				debug.FreeOSMemory() // each command's model is garbage now: give it back before the next
				t.Logf("%s: %.1f s", what, time.Since(t0).Seconds())
			}
			t0 := time.Now()
			var fourBit []string
			var err error
			if sh.bnb {
				fourBit, err = testmodel.WriteBnb4bitFolder(dir, cfg, nil, 5)
			} else {
				err = testmodel.WriteRandomFolder(dir, cfg, 0, 5)
			}
			if err != nil {
				t.Fatal(err)
			}
			tokSrc := filepath.Join(testmodel.Dir(t), "tokenizer.json")
			if sh.layout == "gemma-3-270m-it" {
				tokSrc = testref.SharedData(t, "tokenizers/gemma3/tokenizer.json")
			}
			copyFile(t, tokSrc, filepath.Join(dir, "tokenizer.json"))
			step("write", t0)

			t0 = time.Now()
			code, out, errOut := runCaptured(t, "check", "--model", dir, "--json")
			var rep struct {
				Weights struct {
					Params    int64    `json:"parameters"`
					Quantized int      `json:"quantized"`
					DTypes    []string `json:"dtypes"`
				} `json:"weights"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
				t.Fatalf("check: exit %d: %s%s", code, out, errOut)
			}
			dtypes := []string{"BF16"}
			if sh.bnb {
				dtypes = []string{"BF16", "F32", "U8"}
			}
			if w := rep.Weights; w.Params != params[sh.layout] || w.Quantized != len(fourBit) || !slices.Equal(w.DTypes, dtypes) {
				t.Fatalf("check: %d parameters, %d linears 4-bit, in %v; want %d, %d, in %v", w.Params, w.Quantized, w.DTypes,
					params[sh.layout], len(fourBit), dtypes)
			}
			step("check", t0)

			if sh.bnb { // the run's load uses the stored codes: no dequantize and requantize
				t0 = time.Now()
				sameCodes(t, dir, fourBit)
				step("4-bit codes against the file", t0)
			}

			t0 = time.Now()
			code, out, errOut = runCaptured(t, "score", "--model", dir, "--json", "Two plus two is four, and three plus three is six.")
			var doc struct {
				Texts []struct {
					LogProbs []*float64 `json:"logprobs"`
					MeanNLL  *float64   `json:"mean_nll"`
				} `json:"texts"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Texts) != 1 || doc.Texts[0].MeanNLL == nil {
				t.Fatalf("score: exit %d: %s%s", code, out, errOut)
			}
			vocab := float64(cfg["vocab_size"].(int))
			if nll := *doc.Texts[0].MeanNLL; math.Abs(nll-math.Log(vocab)) > 2 {
				t.Errorf("score: mean NLL %.3f, want near ln(%g) = %.3f (a random model's logits over every row)", nll, vocab, math.Log(vocab))
			}
			scores[name] = doc.Texts[0].LogProbs
			step("score", t0)

			t0 = time.Now()
			if code, _, errOut = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "4", "--json", "Once upon a time"); code != 0 {
				t.Fatalf("generate: exit %d: %s", code, errOut)
			}
			step("generate", t0)

			t0 = time.Now()
			code, out, errOut = runCaptured(t, "--batch", "--model", dir, "--data", data, "--out", t.TempDir(), "--steps", "2", "--batch-size", "1",
				"--num-generations", "2", "--max-completion-length", "4", "--run-name", "r", "--device", "cpu")
			if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
				t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
			}
			step("--batch, 2 steps", t0)
		})
	}
	if a, b := scores["Qwen2.5-0.5B-Instruct"], scores["Qwen2.5-0.5B-Instruct-transformers5"]; a != nil && b != nil {
		for i := range a {
			if a[i] == nil != (b[i] == nil) || a[i] != nil && *a[i] != *b[i] {
				t.Fatalf("Qwen2.5-0.5B: the transformers 4 and 5 forms score token %d differently", i)
			}
		}
	}
}

// sameCodes loads dir as a run does (its [quant] default asking for NF4) and checks that each
// weight of fourBit computes with the file's 4-bit codes and scales, byte for byte.
func sameCodes(t *testing.T, dir string, fourBit []string) {
	t.Helper()
	m, _, err := engine.LoadModelQuantized(dir, config.Default().Quant)
	if err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	linears := map[string]*model.Linear{}
	for _, l := range m.Linears() {
		linears[l.Name+".weight"] = l
	}
	for _, name := range fourBit {
		var q *model.Quantized
		if name == "lm_head.weight" {
			q = m.HeadQ
		} else if l := linears[name]; l != nil {
			q, _ = l.W.(*model.Quantized)
		} else {
			t.Fatalf("%s: no such linear", name)
		}
		if q == nil {
			t.Fatalf("%s: not loaded as the stored 4-bit weight", name)
		}
		for suffix, got := range map[string][]byte{"": q.W.Packed, ".absmax": q.W.QAbsmax} {
			file, err := set.Bytes(name + suffix)
			if err != nil || !bytes.Equal(file, got) {
				t.Fatalf("%s%s: the bytes differ from the file's (%v)", name, suffix, err)
			}
		}
	}
}
