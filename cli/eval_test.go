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
