package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
	"rlhfstation/tui/format"
	"rlhfstation/tui/state"
)

// summaryMetrics are the metrics the summary tabulates first, in order, when present; each
// reward function's mean follows the reward.
var summaryMetrics = []string{
	"reward", "reward_std", "kl", "entropy", "loss", "grad_norm", "frac_reward_zero_std",
	"completions/mean_length", "ppl/word", "ppl/phrase", "ppl/sentence", "ppl/aggregate", "ppl/improvement",
	"ntl/digit_accuracy", "ntl/loss", "ntl/reward", "perf/step_seconds", "perf/tokens_per_second",
	"mem/rss_bytes", "mem/gpu_bytes",
}

// Found says where a run was read from, for runs of other tools.
type Found struct {
	Description string   // what was read, in words
	Notes       []string // what else was found
	Unmapped    []string // metrics kept under the tool's own names
	Foreign     bool     // another tool's run
}

// Summary writes a plain-text account of a run (no colour, no cursor movement): what ran, how
// it ended, the main metrics (first, last, min, max, and the trend over the whole run and over
// the recent window, each named), perplexity against baselines, anomalies newest first,
// checkpoints and the latest sample. now is used for a run still in progress.
func Summary(w io.Writer, rep monitor.RunReport, found Found, now time.Time) error {
	var b strings.Builder
	r := rep.Run
	name := r.Name
	if name == "" {
		name = "(no run_start event)"
	}
	fmt.Fprintf(&b, "run %s", name)
	for _, kv := range [][2]string{{"written by", r.Source}, {"preset", r.Preset}, {"model", r.Model}, {"device", r.Device}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " · %s %s", kv[0], kv[1])
		}
	}
	b.WriteString("\n")
	if found.Foreign {
		b.WriteString("found " + found.Description + "\n")
		for _, n := range found.Notes {
			b.WriteString("  " + n + "\n")
		}
	}
	status := r.Status
	if r.Reason != "" {
		status += " (" + r.Reason + ")"
	}
	steps := fmt.Sprint(r.LastStep)
	if r.TotalSteps > 0 {
		steps += fmt.Sprintf("/%d", r.TotalSteps)
	}
	fmt.Fprintf(&b, "status %s · step %s", status, steps)
	if r.Started != nil {
		end := now
		switch {
		case r.Ended != nil:
			end = *r.Ended
		case r.Status != "in progress" && r.Last != nil:
			end = *r.Last
		}
		if r.Last != nil && end.Before(*r.Last) {
			end = *r.Last
		}
		fmt.Fprintf(&b, " · elapsed %s", format.Duration(end.Sub(*r.Started)))
	}
	b.WriteString("\n\n")

	names := tableMetrics(rep)
	win := window(rep)
	fmt.Fprintf(&b, "%-26s %10s %10s %10s %10s  %-10s %s\n", "metric", "first", "last", "min", "max", "run", fmt.Sprintf("last %d", win))
	for _, n := range names {
		m := rep.Metrics[n]
		f := format.Value
		if strings.HasPrefix(n, "mem/") {
			f = format.Bytes
		}
		lo, hi := "—", "—"
		if m.N > 0 {
			lo, hi = f(m.Min), f(m.Max)
		}
		recent := "—"
		if m.Recent != nil {
			recent = word(m.Recent.Direction)
		}
		fmt.Fprintf(&b, "%-26s %10s %10s %10s %10s  %-10s %s\n", n, f(float64(m.First)), f(float64(m.Last)), lo, hi,
			word(m.Trend.Direction), recent)
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, "(run: the mean of the last %d steps against the first %d, ±3 standard errors; last %d: the slope over the last %d steps)\n",
			win, win, win, win)
	}

	base := state.BaselinesFrom(r.Config, rep.Final)
	var ppl []string
	for _, l := range []string{"word", "phrase", "sentence", "aggregate"} {
		v, ok := rep.Final["ppl/"+l]
		if !ok {
			continue
		}
		if bl := base.Get(l); bl > 0 {
			ppl = append(ppl, fmt.Sprintf("%s %s (baseline %s, %s)", l, format.Value(v), format.Value(bl), format.SignedPercent((v-bl)/bl)))
		} else {
			ppl = append(ppl, fmt.Sprintf("%s %s", l, format.Value(v)))
		}
	}
	if len(ppl) > 0 {
		b.WriteString("\nperplexity (lower is better): " + strings.Join(ppl, " · ") + "\n")
	}
	if v, ok := rep.Final["ntl/digit_accuracy"]; ok {
		digits := rep.Metrics["ntl/total_digits"]
		fmt.Fprintf(&b, "number tokens: digit accuracy %s · digits seen %s\n", format.Percent(v), format.Count(digits.Mean*float64(digits.N)))
	}
	if len(found.Unmapped) > 0 {
		fmt.Fprintf(&b, "\nmetrics under the tool's own names (%d): %s\n", len(found.Unmapped), strings.Join(found.Unmapped, ", "))
	}

	fmt.Fprintf(&b, "\nanomalies (%d), newest first:\n", len(rep.Anomalies)+rep.AnomaliesDropped)
	for i := len(rep.Anomalies) - 1; i >= 0; i-- {
		a := rep.Anomalies[i]
		what := a.Rule
		if a.Metric != "" {
			what += " " + a.Metric
			if format.AlertHasValue(a.Rule) {
				what += "=" + format.Value(a.Value)
			}
		}
		fmt.Fprintf(&b, "  %-8s step %-5d %s: %s\n", a.Severity, a.Step, what, a.Message)
	}
	if rep.AnomaliesDropped > 0 {
		fmt.Fprintf(&b, "  … and %d more after the first %d\n", rep.AnomaliesDropped, len(rep.Anomalies))
	}
	fmt.Fprintf(&b, "\ncheckpoints (%d):\n", len(rep.Checkpoints))
	for _, c := range rep.Checkpoints {
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
	if s := rep.LatestSample; s != nil {
		fmt.Fprintf(&b, "\nlatest sample (step %d, 1 of %d): reward %s · advantage %s\n", s.Step, s.Of,
			format.Value(float64(s.Reward)), signed(float64(s.Advantage)))
		if s.Prompt != "" {
			fmt.Fprintf(&b, "  prompt: %s\n", oneLine(s.Prompt))
		}
		if len(s.Turns) == 0 {
			fmt.Fprintf(&b, "  completion: %s\n", oneLine(s.Completion))
		}
		writeTurns(&b, s.Turns, s.Failed)
	} else if found.Foreign {
		b.WriteString("\nno completions logged (TRL: log_completions=True; verl: trainer.rollout_data_dir)\n")
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "\n%s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tableMetrics orders the summary's rows: the known metrics first (each reward function's
// mean after the reward), then, for another tool's run, the rest of its metrics by name.
func tableMetrics(rep monitor.RunReport) []string {
	var out []string
	seen := map[string]bool{}
	add := func(n string) {
		if _, ok := rep.Metrics[n]; ok && !seen[n] {
			out = append(out, n)
			seen[n] = true
		}
	}
	var funcs []string
	for n := range rep.Metrics {
		if strings.HasPrefix(n, "rewards/") && strings.HasSuffix(n, "/mean") {
			funcs = append(funcs, n)
		}
	}
	sort.Strings(funcs)
	for _, n := range summaryMetrics {
		add(n)
		if n == "reward" {
			for _, f := range funcs {
				add(f)
			}
		}
	}
	return out
}

// window is the recent trends' window (the monitor's trend_window).
func window(monitor.RunReport) int { return monitor.DefaultThresholds().TrendWindow }

func word(dir string) string {
	switch dir {
	case monitor.Increasing:
		return "rising"
	case monitor.Decreasing:
		return "falling"
	case monitor.Stable:
		return "stable"
	}
	return "—"
}

func signed(v float64) string {
	if v != v {
		return "—"
	}
	return fmt.Sprintf("%+.3f", v)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeTurns writes a multi-turn episode's turns, one a line; "·" marks the messages the model
// did not write (masked from the loss).
func writeTurns(b *strings.Builder, turns []events.Turn, failed string) {
	if failed != "" {
		fmt.Fprintf(b, "  environment failed: %s (scored as not applicable)\n", oneLine(failed))
	}
	if len(turns) == 0 {
		return
	}
	b.WriteString("  turns (· not written by the model, masked from the loss):\n")
	for _, t := range turns {
		mark := " "
		if t.Masked {
			mark = "·"
		}
		role := t.Role
		if role == "tool" {
			role = "tool result"
		}
		if t.Content != "" || len(t.Calls) == 0 {
			fmt.Fprintf(b, "  %s %s: %s\n", mark, role, oneLine(t.Content))
		}
		for _, c := range t.Calls {
			args, _ := json.Marshal(c.Arguments)
			fmt.Fprintf(b, "  %s tool call: %s %s\n", mark, c.Name, args)
		}
	}
}
