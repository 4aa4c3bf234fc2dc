package cli

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
	"rlhfstation/rewards"
)

// Data whose answers are bare numbers has no reasoning to make the math preset's perplexity
// baselines of: a run says the term does not apply and logs it as not applicable (no score
// against the perplexity of single numbers), and `baseline --preset math` refuses such data.
// Worked solutions make reasoning baselines, which a run of another preset refuses.
func TestMathPerplexityOfReasoningBaselines(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := testmodel.Dir(t)
	tmp := t.TempDir()
	bare := filepath.Join(tmp, "bare.jsonl")
	os.WriteFile(bare, []byte(`{"prompt": "What is 3 + 4?", "answer": "7"}
{"prompt": "What is 2 + 2?", "answer": "4"}
`), 0o644)
	workedData := filepath.Join(tmp, "worked.jsonl")
	os.WriteFile(workedData, []byte(`{"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "Tom has 3 + 4 = 7 apples.\n#### 7"}
{"question": "Ann has 2 pens and finds 2 more. How many?", "answer": "Ann has 2 + 2 = 4 pens.\n#### 4"}
`), 0o644)

	out := filepath.Join(tmp, "runs")
	code, stdout, stderr := runCaptured(t, "--batch", "--model", dir, "--data", bare, "--out", out, "--steps", "1", "--batch-size", "2",
		"--num-generations", "2", "--max-completion-length", "6", "--run-name", "bare", "--preset", "math")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout+stderr, "perplexity (ppl) not applicable") {
		t.Errorf("the run does not say the perplexity does not apply:\n%s\n%s", stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "bare", "baselines.json")); err == nil {
		t.Error("baselines.json written for a perplexity that does not apply")
	}
	evs, err := events.ReadFile(filepath.Join(out, "bare", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, e := range evs {
		if e.Type == events.Anomaly {
			t.Errorf("step %d: anomaly %s: %s", e.Step, e.Rule, e.Message)
		}
		if e.Type == events.Samples {
			for _, s := range e.Samples {
				if v, ok := s.Rewards["ppl"]; ok && !math.IsNaN(v) {
					t.Errorf("step %d: a sample's ppl is %v, want not applicable", e.Step, v)
				}
			}
		}
		if e.Type != events.Step {
			continue
		}
		steps++
		for _, k := range []string{"rewards/ppl/mean", "ppl/improvement"} {
			if v, ok := e.Metrics[k]; ok {
				t.Errorf("step %d: %s = %v logged for a perplexity that does not apply", e.Step, k, v)
			}
		}
		if _, ok := e.Metrics["rewards/correctness/mean"]; !ok {
			t.Errorf("step %d: no rewards/correctness/mean", e.Step)
		}
	}
	if steps != 1 {
		t.Fatalf("%d steps", steps)
	}

	code, _, stderr = runCaptured(t, "baseline", "--model", dir, "--data", bare, "--preset", "math", "--out", filepath.Join(tmp, "b.json"))
	if code != 1 || !strings.Contains(stderr, "no reference text has reasoning") {
		t.Errorf("baseline --preset math of bare numbers: exit %d: %s", code, stderr)
	}
	reasoning := filepath.Join(tmp, "reasoning.json")
	code, stdout, stderr = runCaptured(t, "baseline", "--model", dir, "--data", workedData, "--preset", "math", "--out", reasoning)
	if code != 0 || !strings.Contains(stdout, "measuring the reasoning") {
		t.Fatalf("baseline --preset math: exit %d\n%s\n%s", code, stdout, stderr)
	}
	b, err := rewards.LoadBaselines(reasoning)
	if err != nil || b.Text != rewards.ReasoningText || b.Samples != 2 {
		t.Fatalf("%+v, %v", b, err)
	}
	// A story run measures whole completions: reasoning baselines are refused.
	code, stdout, stderr = runCaptured(t, "--batch", "--model", dir, "--data", workedData, "--out", out, "--steps", "1", "--batch-size", "2",
		"--num-generations", "2", "--max-completion-length", "6", "--run-name", "story", "--preset", "story", "--baselines", reasoning)
	if code == 0 || !strings.Contains(stderr, "the baselines measured the reasoning") {
		t.Errorf("story run with reasoning baselines: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
