package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
)

func TestBatchProgressPlainLines(t *testing.T) {
	var out bytes.Buffer
	p := newBatchProgress(&out, false)
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	p.Handle(events.Event{Type: events.RunStart, Run: "r1", Model: "builtin", Device: "cpu", Preset: "story", TotalSteps: 4,
		Params: &events.Params{Total: 2_500_000, Trainable: 40_000}})
	for s := 1; s <= 4; s++ {
		clock = clock.Add(10 * time.Second)
		p.Handle(events.Event{Type: events.Step, Step: s, Metrics: events.Metrics{"reward": float64(s) / 10, "kl": 0.01, "perf/tokens_per_second": 500,
			"rewards/correctness/mean": float64(s/3) / 2, "rewards/ppl/std": 1}})
	}
	p.Handle(events.Event{Type: events.Anomaly, Step: 3, Rule: "kl_high", Metric: "kl", Value: 0.4, Severity: "warning", Message: "KL above 0.3"})
	p.Handle(events.Event{Type: events.RunEnd, Step: 4, Status: "completed"})
	s := out.String()
	for _, want := range []string{
		"run r1: model builtin on cpu, preset story, 4 steps, 40.0k trainable of 2.50M parameters",
		"step 2/4 reward=0.2 kl=0.01 tok/s=500 elapsed=20s eta=20s",
		"WARNING step 3: kl_high (kl = 0.4): KL above 0.3",
		"run r1 completed after 4 steps in 40s",
		"reward: first 2 steps 0.1500 ± 0.0500, last 2 steps 0.3500 ± 0.0500 (+2.8 SE)",
		"rewards/correctness/mean: first 2 steps 0.0000 ± 0.0000, last 2 steps 0.5000 ± 0.0000",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	if strings.Contains(s, "rewards/ppl/std:") {
		t.Error("the summary compares only the reward, the reward functions' means and the digit accuracy")
	}
	if strings.Contains(s, "\r") {
		t.Error("plain output must not redraw in place")
	}
}

func TestBatchProgressBarOnTerminal(t *testing.T) {
	var out bytes.Buffer
	p := newBatchProgress(&out, true)
	p.Handle(events.Event{Type: events.RunStart, TotalSteps: 10})
	p.Handle(events.Event{Type: events.Step, Step: 5, Metrics: events.Metrics{"reward": 0.5}})
	if !strings.Contains(out.String(), "\r\x1b[2Kstep 5/10 "+strings.Repeat("█", 15)+strings.Repeat("░", 15)) {
		t.Fatalf("bar: %q", out.String())
	}
}

// Set-up lines, printed while the engine was made, are not printed again when the engine
// repeats them as log events; later log events are.
func TestBatchProgressSkipsSetupLines(t *testing.T) {
	var out bytes.Buffer
	p := newBatchProgress(&out, false)
	p.skipLogs = 2
	for _, m := range []string{"loaded model", "baselines: 8/8 samples", "paused"} {
		p.Handle(events.Event{Type: events.Log, Level: "info", Message: m})
	}
	if got := out.String(); got != "paused\n" {
		t.Fatalf("printed %q, want only the line after the set-up", got)
	}
}
