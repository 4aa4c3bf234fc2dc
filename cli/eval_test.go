package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine"
)

// The built-in model, before any run, answers about half of its small problems at once with
// "#### N" and is right on about half of its sampled answers (README, "Does it learn?").
func TestEvalBuiltin(t *testing.T) {
	code, out, errs := runCaptured(t, "eval", "--prompts", "24", "--samples", "4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r engine.EvalResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Prompts != 24 || r.Samples != 4 || r.Temperature != 1 {
		t.Fatalf("report %+v", r)
	}
	if r.SampledCorrect < 0.2 || r.SampledCorrect > 0.85 || r.AnsweredAtOnce < 0.2 || r.AnsweredAtOnce > 0.8 ||
		r.SampledSE <= 0 || r.MeanTokens < 5 || r.MeanTokens > 48 {
		t.Errorf("the built-in model's figures are out of the documented range: %+v", r)
	}
}

func TestEvalDataFile(t *testing.T) {
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.jsonl")
	os.WriteFile(wrong, []byte(`{"prompt": "Question: Ava has 3 apples. She buys 2 more apples. How many apples does Ava have now?\nAnswer:", "answer": "-98765"}`+"\n"+
		`{"prompt": "no answer here"}`+"\n"), 0o644)
	code, out, errs := runCaptured(t, "eval", "--data", wrong, "--samples", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r engine.EvalResult
	json.Unmarshal([]byte(out), &r)
	if r.Prompts != 1 || r.SampledCorrect != 0 || r.GreedyCorrect != 0 {
		t.Errorf("an answer no completion can give: %+v", r)
	}
	none := filepath.Join(dir, "none.jsonl")
	os.WriteFile(none, []byte(`{"prompt": "a"}`+"\n"), 0o644)
	if code, _, errs := runCaptured(t, "eval", "--data", none); code != 1 || !strings.Contains(errs, none) || !strings.Contains(errs, "no prompt with an answer") {
		t.Errorf("a file without answers: exit %d, %q", code, errs)
	}
	for _, bad := range [][]string{{"--samples", "0"}, {"--temperature", "0"}, {"--quant", "int8"}, {"--extraction", "loose"}, {"extra"}} {
		if code, _, errs := runCaptured(t, append([]string{"eval"}, bad...)...); code != 2 {
			t.Errorf("eval %v: exit %d (%s), want 2", bad, code, errs)
		}
	}
}

// TestEvalGenerationDefaults: generation_config.json's temperature, top_p and top_k are eval's
// sampling defaults, as for generate; flags win; do_sample false keeps temperature 1 for the
// sampled completions (the greedy ones are reported beside them anyway).
func TestEvalGenerationDefaults(t *testing.T) {
	dir, _, _ := llamaTestDir(t)
	data := filepath.Join(t.TempDir(), "p.jsonl")
	os.WriteFile(data, []byte(`{"prompt": "Natalia sold 48 clips", "answer": "72"}`+"\n"), 0o644)
	gen := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	eval := func(args ...string) (engine.EvalResult, string) {
		t.Helper()
		code, out, errs := runCaptured(t, append([]string{"eval", "--model", dir, "--data", data, "--samples", "2", "--max-new-tokens", "3", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var r engine.EvalResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return r, errs
	}
	gen(`{"do_sample": true, "temperature": 0.7, "top_p": 0.9, "top_k": 5}`)
	if r, errs := eval(); r.Temperature != 0.7 || !strings.Contains(errs, "generation_config.json") || !strings.Contains(errs, "top_k 5") {
		t.Errorf("defaults from generation_config.json: temperature %g, stderr %q", r.Temperature, errs)
	}
	if r, _ := eval("--temperature", "1.3"); r.Temperature != 1.3 {
		t.Errorf("--temperature 1.3 gave %g", r.Temperature)
	}
	gen(`{"do_sample": false}`)
	if r, errs := eval(); r.Temperature != 1 || !strings.Contains(errs, "greedily") {
		t.Errorf("do_sample false: temperature %g, stderr %q", r.Temperature, errs)
	}
}
