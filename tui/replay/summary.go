package replay

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/tui/format"
	"rlhfstation/tui/state"
)

// summaryMetrics are the metrics the plain summary tabulates, in order, when present.
var summaryMetrics = []string{
	"reward", "reward_std", "kl", "entropy", "loss", "grad_norm", "frac_reward_zero_std",
	"completions/mean_length", "ppl/word", "ppl/phrase", "ppl/sentence", "ppl/aggregate", "ppl/improvement",
	"ntl/digit_accuracy", "ntl/loss", "ntl/reward", "perf/step_seconds", "perf/tokens_per_second",
	"mem/rss_bytes", "mem/gpu_bytes",
}

// Summary writes a plain-text account of a run (no colour, no cursor movement): what ran, how
// it ended, the main metrics (first, last, min, max, trend), perplexity against baselines,
// anomalies newest first, checkpoints and the latest sample. now is used for a run still in
// progress.
func Summary(w io.Writer, r *state.Run, now time.Time) error {
	var b strings.Builder
	name := r.Name
	if name == "" {
		name = "(no run_start event)"
	}
	fmt.Fprintf(&b, "run %s", name)
	for _, kv := range [][2]string{{"preset", r.Preset}, {"model", r.Model}, {"device", r.Device}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " · %s %s", kv[0], kv[1])
		}
	}
	b.WriteString("\n")
	status := "in progress"
	if r.Ended {
		status = r.Status
		if r.Reason != "" {
			status += " (" + r.Reason + ")"
		}
	}
	steps := fmt.Sprint(r.Step)
	if r.TotalSteps > 0 {
		steps += fmt.Sprintf("/%d", r.TotalSteps)
	}
	fmt.Fprintf(&b, "status %s · step %s · elapsed %s\n", status, steps, format.Duration(r.Elapsed(now)))
	if p := r.Params; p != nil && p.Total > 0 {
		fmt.Fprintf(&b, "params %s (%s trainable)\n", format.Count(float64(p.Total)), format.Count(float64(p.Trainable)))
	}

	b.WriteString("\n")
	fmt.Fprintf(&b, "%-26s %10s %10s %10s %10s  %s\n", "metric", "first", "last", "min", "max", "trend")
	for _, name := range summaryMetrics {
		s := r.Series(name)
		if len(s) == 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range s {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		f := format.Value
		if strings.HasPrefix(name, "mem/") {
			f = format.Bytes
		}
		fmt.Fprintf(&b, "%-26s %10s %10s %10s %10s  %s\n", name, f(s[0]), f(s[len(s)-1]),
			f(lo), f(hi), trendWord(r.TrendOf(name)))
	}

	var ppl []string
	for _, l := range []string{"word", "phrase", "sentence", "aggregate"} {
		v, ok := r.Last("ppl/" + l)
		if !ok {
			continue
		}
		if base := r.Baselines.Get(l); base > 0 {
			ppl = append(ppl, fmt.Sprintf("%s %s (baseline %s, %s)", l, format.Value(v), format.Value(base), format.SignedPercent((v-base)/base)))
		} else {
			ppl = append(ppl, fmt.Sprintf("%s %s", l, format.Value(v)))
		}
	}
	if len(ppl) > 0 {
		b.WriteString("\nperplexity: " + strings.Join(ppl, " · ") + "\n")
	}
	if r.Has("ntl/digit_accuracy") {
		v, _ := r.Last("ntl/digit_accuracy")
		fmt.Fprintf(&b, "number tokens: digit accuracy %s · digits seen %s\n", format.Percent(v), format.Count(r.Sum("ntl/total_digits")))
	}

	fmt.Fprintf(&b, "\nanomalies (%d), newest first:\n", len(r.Anomalies))
	for i := len(r.Anomalies) - 1; i >= 0; i-- {
		a := r.Anomalies[i]
		what := a.Rule
		if a.Metric != "" {
			what += " " + a.Metric + "=" + format.Value(a.Value)
		}
		fmt.Fprintf(&b, "  %-8s step %-5d %s: %s\n", a.Severity, a.Step, what, a.Message)
	}
	fmt.Fprintf(&b, "\ncheckpoints (%d):\n", len(r.Checkpoints))
	for _, c := range r.Checkpoints {
		h := "health —"
		if c.Health != nil {
			h = fmt.Sprintf("health %.2f", c.Health.Score)
		}
		fmt.Fprintf(&b, "  step %-6d %s  %s\n", c.Step, h, c.Path)
		if c.Health != nil {
			for _, is := range c.Health.Issues {
				fmt.Fprintf(&b, "      · %s\n", is)
			}
		}
	}
	if e, ok := r.LatestSamples(); ok && len(e.Samples) > 0 {
		s := e.Samples[0]
		fmt.Fprintf(&b, "\nlatest sample (step %d, 1 of %d): reward %s · advantage %+.3f\n", e.Step, len(e.Samples), format.Value(s.Reward), s.Advantage)
		fmt.Fprintf(&b, "  prompt: %s\n  completion: %s\n", oneLine(s.Prompt), oneLine(s.Completion))
	}
	for _, l := range r.Logs {
		if l.Level == "error" {
			fmt.Fprintf(&b, "\nerror: %s\n", l.Message)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func trendWord(t state.Trend) string {
	switch t {
	case state.Rising:
		return "rising"
	case state.Falling:
		return "falling"
	case state.Stable:
		return "stable"
	}
	return "—"
}

// Load reads every complete event of runDir into a run state, with the checkpoints found on
// disk added.
func Load(runDir string) (*state.Run, error) {
	evs, err := events.ReadFile(EventsFile(runDir))
	if err != nil {
		return nil, err
	}
	r := state.New()
	for _, e := range evs {
		r.Apply(e)
	}
	cps, err := Checkpoints(runDir)
	if err != nil {
		return nil, err
	}
	for _, c := range cps {
		r.AddFolderCheckpoint(c.Path, c.Step)
	}
	return r, nil
}
