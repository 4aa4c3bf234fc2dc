package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/monitor"
	"rlhfstation/tui/fixture"
)

func TestSummary(t *testing.T) {
	d := monitor.NewDigest(monitor.DefaultThresholds())
	for _, e := range fixture.Events(fixture.Options{}) {
		d.Apply(e)
	}
	d.AddCheckpoint(75, "run/checkpoints/step-000075", nil) // saved, event not yet written
	var b bytes.Buffer
	if err := Summary(&b, d.Report(), Found{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"run 20250301-120000-math · preset math · model models/qwen2-0.5b",
		"status completed (reached the last step) · step 60/60 · elapsed 2m33s",
		"run        last 30", "(run: the mean of the last 30 steps against the first 30",
		"kl ", "ppl/word", "mem/gpu_bytes                20.0 GiB",
		"word 39.60 (baseline 42.00, -5.7%)", "digit accuracy 77.3%",
		"anomalies (4), newest first:\n  critical step 50",
		"checkpoints (4):", "step 75     health —", "latest sample (step 60, 1 of 4)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b") || strings.Contains(s, "found ") {
		t.Error("summary has escape sequences, or a foreign-run line for our own run")
	}
}

// The trend columns agree with the first and last values on a steadily moving metric, and say
// which window they cover.
func TestSummaryTrendsAgreeWithFirstAndLast(t *testing.T) {
	d := monitor.NewDigest(monitor.DefaultThresholds())
	for _, e := range fixture.Events(fixture.Options{Steps: 120}) {
		d.Apply(e)
	}
	rep := d.Report()
	var b bytes.Buffer
	Summary(&b, rep, Found{}, time.Time{})
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		m, ok := rep.Metrics[f[0]]
		if !ok {
			continue
		}
		first, last := float64(m.First), float64(m.Last)
		rise := last > first+3*m.Std
		fall := last < first-3*m.Std
		if (rise && f[5] == "falling") || (fall && f[5] == "rising") {
			t.Errorf("%s: first %g last %g but the whole-run trend says %s", f[0], first, last, f[5])
		}
	}
}

func TestSummaryOfAnotherToolsRun(t *testing.T) {
	d := monitor.NewDigest(monitor.DefaultThresholds())
	for _, e := range fixture.Events(fixture.Options{Steps: 10}) {
		d.Apply(e)
	}
	rep := d.Report()
	rep.LatestSample = nil
	var b bytes.Buffer
	Summary(&b, rep, Found{Description: "TRL / Hugging Face Trainer run: metrics from trainer_state.json", Foreign: true,
		Unmapped: []string{"epoch", "num_tokens"}}, time.Time{})
	for _, want := range []string{"found TRL / Hugging Face Trainer run", "own names (2): epoch, num_tokens", "no completions logged"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}

// A multi-turn run's summary shows the latest episode's turns, the masked ones marked.
func TestSummaryShowsTurns(t *testing.T) {
	d := monitor.NewDigest(monitor.DefaultThresholds())
	for _, e := range fixture.WithEpisodes(fixture.Events(fixture.Options{})) {
		d.Apply(e)
	}
	var b bytes.Buffer
	if err := Summary(&b, d.Report(), Found{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	want := `  turns (· not written by the model, masked from the loss):
  · user: What is (2+3)*4?
    tool call: calc {"expression":"2+3"}
  · tool result: 5
    tool call: calc {"expression":"5*4"}
  · tool result: 20
    assistant: The answer is 20.
`
	if s := b.String(); !strings.Contains(s, want) || strings.Contains(s, "  completion:") {
		t.Errorf("summary lacks the turns\n%s\nin:\n%s", want, s)
	}
}
