package cli

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/internal/human"
	"rlhfstation/internal/stats"
)

// batchProgress renders a headless run's events: a progress bar redrawn in place on a
// terminal, or one plain line per logged step when the output is a file or a pipe, and a
// summary at the end.
type batchProgress struct {
	out      io.Writer
	terminal bool
	width    int
	now      func() time.Time

	start      time.Time
	total      int
	run        string
	trends     map[string][]float64 // the summary's metrics per step (trendMetric)
	last       events.Metrics
	lastStep   int
	anomalies  int
	ckpts      []string
	barVisible bool
	skipLogs   int // the first log events not to print: set-up lines already shown
}

func newBatchProgress(out io.Writer, terminal bool) *batchProgress {
	return &batchProgress{out: out, terminal: terminal, width: 30, now: time.Now}
}

// Handle prints what an event calls for.
func (p *batchProgress) Handle(e events.Event) {
	switch e.Type {
	case events.RunStart:
		p.start, p.total, p.run = p.now(), e.TotalSteps, e.Run
		params := ""
		if e.Params != nil {
			params = fmt.Sprintf(", %s trainable of %s parameters", human.Count(e.Params.Trainable), human.Count(e.Params.Total))
		}
		p.line(fmt.Sprintf("run %s: model %s on %s, preset %s, %d steps%s", e.Run, e.Model, e.Device, e.Preset, e.TotalSteps, params))
	case events.Step:
		p.lastStep, p.last = e.Step, e.Metrics
		for k, v := range e.Metrics {
			if trendMetric(k) && !math.IsNaN(v) && !math.IsInf(v, 0) {
				if p.trends == nil {
					p.trends = map[string][]float64{}
				}
				p.trends[k] = append(p.trends[k], v)
			}
		}
		if p.terminal {
			p.drawBar()
		} else {
			p.line(p.stepLine())
		}
	case events.Anomaly:
		p.anomalies++
		what := e.Rule
		if e.Metric != "" {
			what += fmt.Sprintf(" (%s = %.4g)", e.Metric, e.Value)
		}
		p.line(fmt.Sprintf("%s step %d: %s: %s", strings.ToUpper(e.Severity), e.Step, what, e.Message))
	case events.Checkpoint:
		p.ckpts = append(p.ckpts, e.Path)
		health := ""
		if e.Health != nil {
			health = fmt.Sprintf(" (health %.2f)", e.Health.Score)
		}
		p.line(fmt.Sprintf("checkpoint %s%s", e.Path, health))
	case events.Log:
		if p.skipLogs > 0 {
			p.skipLogs--
			return
		}
		if e.Level != "debug" {
			p.line(e.Message)
		}
	case events.RunEnd:
		p.clearBar()
		p.summary(e)
	}
}

func (p *batchProgress) stepLine() string {
	m := p.last
	var b strings.Builder
	fmt.Fprintf(&b, "step %d/%d", p.lastStep, p.total)
	for _, k := range []string{"reward", "reward_std", "kl", "loss", "entropy", "grad_norm", "ppl/aggregate", "ntl/digit_accuracy"} {
		if v, ok := m[k]; ok {
			fmt.Fprintf(&b, " %s=%.4g", k, v)
		}
	}
	if v, ok := m["perf/tokens_per_second"]; ok {
		fmt.Fprintf(&b, " tok/s=%.0f", v)
	}
	fmt.Fprintf(&b, " elapsed=%s eta=%s", p.elapsed(), p.eta())
	return b.String()
}

func (p *batchProgress) drawBar() {
	frac := 0.0
	if p.total > 0 {
		frac = math.Min(1, float64(p.lastStep)/float64(p.total))
	}
	filled := int(frac * float64(p.width))
	bar := strings.Repeat("█", filled) + strings.Repeat("░", p.width-filled)
	m := p.last
	fmt.Fprintf(p.out, "\r\x1b[2Kstep %d/%d %s reward %.3f kl %.4f %.0f tok/s ETA %s",
		p.lastStep, p.total, bar, m["reward"], m["kl"], m["perf/tokens_per_second"], p.eta())
	p.barVisible = true
}

func (p *batchProgress) clearBar() {
	if p.barVisible {
		fmt.Fprint(p.out, "\r\x1b[2K")
		p.barVisible = false
	}
}

// line prints a full line, keeping the bar below it on a terminal.
func (p *batchProgress) line(s string) {
	p.clearBar()
	fmt.Fprintln(p.out, s)
	if p.terminal && p.lastStep > 0 && p.total > 0 {
		p.drawBar()
	}
}

func (p *batchProgress) elapsed() time.Duration {
	if p.start.IsZero() {
		return 0
	}
	return p.now().Sub(p.start).Round(time.Second)
}

func (p *batchProgress) eta() string {
	if p.lastStep == 0 || p.total == 0 {
		return "?"
	}
	per := p.now().Sub(p.start) / time.Duration(p.lastStep)
	return (per * time.Duration(p.total-p.lastStep)).Round(time.Second).String()
}

func (p *batchProgress) summary(e events.Event) {
	fmt.Fprintf(p.out, "run %s %s after %d steps in %s", p.run, e.Status, p.lastStep, p.elapsed())
	if e.Reason != "" {
		fmt.Fprintf(p.out, ": %s", e.Reason)
	}
	fmt.Fprintln(p.out)
	var names []string
	for k := range p.trends {
		if k != "reward" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, name := range append([]string{"reward"}, names...) {
		x := p.trends[name]
		n := len(x)
		if n < 4 {
			continue
		}
		k := min(20, n/2)
		first, firstSE := stats.MeanSE(x[:k])
		last, lastSE := stats.MeanSE(x[n-k:])
		rise := ""
		if se := math.Hypot(firstSE, lastSE); se > 0 {
			rise = fmt.Sprintf(" (%+.1f SE)", (last-first)/se)
		}
		fmt.Fprintf(p.out, "  %s: first %d steps %.4f ± %.4f, last %d steps %.4f ± %.4f%s\n", name, k, first, firstSE, k, last, lastSE, rise)
	}
	keys := make([]string, 0, len(p.last))
	for k := range p.last {
		if !strings.HasPrefix(k, "perf/") && !strings.HasPrefix(k, "mem/") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(p.out, "  %-28s %.6g\n", k, p.last[k])
	}
	if p.anomalies > 0 {
		fmt.Fprintf(p.out, "  anomalies: %d (see events.jsonl)\n", p.anomalies)
	}
	if n := len(p.ckpts); n > 0 {
		fmt.Fprintf(p.out, "  last checkpoint: %s\n", p.ckpts[n-1])
	}
}

// trendMetric says whether the summary compares a metric's first and last steps: the reward,
// each reward function's mean, and the digit accuracy of NTL.
func trendMetric(name string) bool {
	return name == "reward" || name == "ntl/digit_accuracy" ||
		strings.HasPrefix(name, "rewards/") && strings.HasSuffix(name, "/mean")
}
