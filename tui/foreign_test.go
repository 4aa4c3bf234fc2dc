package tui

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/exp/golden"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs"
	"rlhfstation/engine/runs/runstest"
)

// foreignEvents reads a TRL output folder (TensorBoard events, two checkpoints, W&B completions
// tables when completions is set) with planted anomalies, as `rlhfstation replay` does.
func foreignEvents(t *testing.T, completions bool) []events.Event {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "qwen-grpo-gsm8k")
	p := runstest.Plan{Steps: 80, Seed: 1, KLSpike: 40, Plateau: 45, NaNGrad: 25}
	if err := runstest.WriteTRL(dir, p, runstest.TRLOptions{TensorBoard: true, Checkpoints: []int{40, 80}, Completions: completions}); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Detect(dir)
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for e := range r.Stream(context.Background(), runs.Options{}) {
		if e.Type == events.Checkpoint { // the folder's path and time change from test to test
			e.Path = filepath.Join("qwen-grpo-gsm8k", filepath.Base(e.Path))
			e.Time = time.Time{}
		}
		if e.Type == events.Log {
			e.Message = strings.ReplaceAll(e.Message, filepath.Dir(dir)+"/", "")
		}
		evs = append(evs, e)
	}
	return evs
}

// TestForeignRunDashboard: another tool's run on the same dashboard: its tool named in the
// header, entropy and completion length where perplexity and NTL would be (it logs neither), KL
// and reward charts, the planted alerts, its completions.
func TestForeignRunDashboard(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(foreignEvents(t, true), false)}), 120, 36)
	m := hs.loaded()
	v := m.view
	checkFrame(t, v, 120, 36)
	contains(t, v, "run qwen-grpo-gsm8k", "from TRL / Hugging Face Trainer", "model Qwen/Qwen2.5-0.5B-Instruct", "step 80/80",
		"✓ completed", "entropy", "completion length", "KL divergence", "reward",
		"alerts · 1 critical · 2 warning", "reward_stall", "kl_high", "non_finite",
		"samples · step 80 · 1/2", "What is 2+3?", "accuracy_reward 1.00")
	if strings.Contains(v, "perplexity") || strings.Contains(v, "number token loss") {
		t.Errorf("panes for metrics the run does not log:\n%s", v)
	}
	golden.RequireEqual(t, []byte(v))
}

func TestForeignRunWithoutCompletions(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(foreignEvents(t, false), false)}), 120, 36)
	contains(t, hs.loaded().view, "this run logged no completions (TRL: log_completions=True")
}
