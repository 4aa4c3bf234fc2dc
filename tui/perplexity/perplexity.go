// Package perplexity is the pane of the multi-level perplexity reward (DESIGN §6.1): each
// level now, against its baseline, with a sparkline of its run and its trend arrow, one level a
// row so that no two lines cross; and, when there is room, a chart of the improvement over the
// baselines. One convention holds across the title, the rows and the chart: improvement over
// the baseline, (B − P)/B as DESIGN §6.1 defines it, positive and rising when perplexity
// falls; only the "now" column is perplexity itself.
package perplexity

import (
	"fmt"
	"strings"

	"charm.land/lipgloss/v2"

	"rlhfstation/tui/charts"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
	"rlhfstation/tui/state"
)

// Levels are the perplexity levels shown, in order.
var Levels = []string{"word", "phrase", "sentence", "aggregate"}

// Model is the perplexity pane.
type Model struct {
	component.Base
}

// New returns the pane.
func New(ctx *context.Context) Model { return Model{Base: component.New(ctx)} }

// Title is the pane's title for an inner width w: that lower is better, and the run's
// improvement over the baselines (DESIGN §6.1: positive when the perplexity fell) with the word
// for it, as much as fits.
func (m Model) Title(w int) string {
	st := m.Ctx.Styles
	v, ok := m.Ctx.Run.Last("ppl/improvement")
	if !ok {
		return "perplexity · improvement over baseline, + is better"
	}
	verdict, style := "better", st.Good
	switch {
	case v < 0:
		verdict, style = "worse", st.Bad
	case v == 0 || v != v:
		verdict, style = "no change", st.Muted
	}
	p := format.SignedPercent(v)
	for _, t := range [][2]string{
		{"perplexity · improvement over baseline (+ is better) ", p + ", " + verdict},
		{"perplexity · improvement ", p + ": " + verdict + " than baseline"},
		{"perplexity · ", p + ": " + verdict + " than baseline"},
		{"perplexity · ", p + " " + verdict},
	} {
		if len([]rune(t[0]+t[1])) <= w-3 {
			return t[0] + style.Render(t[1])
		}
	}
	return "perplexity " + style.Render(p)
}

// View renders the framed pane.
func (m Model) View() string { return m.Frame(m.Title(m.Width-2), m.body) }

// Used reports whether the run logs perplexity.
func Used(r *state.Run) bool {
	for _, l := range Levels {
		if r.Has("ppl/" + l) {
			return true
		}
	}
	return false
}

// columns of a row: level, now, baseline, improvement, then the sparkline and the arrow.
const rowFixed = 9 + 1 + 8 + 1 + 8 + 1 + 7 + 1

func (m Model) body(w, h int) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	if !Used(r) {
		if r.Has("reward") {
			// Steps without perplexity: the term does not apply (a math run on bare-number
			// answers says so in its log) or the preset gives it no weight.
			return st.Muted.Render(lipgloss.Wrap("no perplexity in this run's steps: not applicable to its data or not in its preset (the log says which)", w, " "))
		}
		return st.Muted.Render("waiting for perplexity metrics…")
	}
	// A narrow pane (80 columns) drops the baseline column before the sparkline: the
	// improvement already says where the baseline is.
	narrow := w-rowFixed-2 < 6
	spark := w - rowFixed - 2 // the arrow and its space
	if narrow {
		spark += 9
	}
	if spark < 6 {
		spark = 0
	}
	var lines []string
	if h >= 5 {
		// The sparkline and the arrow both tell the whole run.
		head := fmt.Sprintf("%-9s %8s %8s %7s %s", "level", "ppl now", "baseline", "improv", "run")
		if narrow {
			head = fmt.Sprintf("%-9s %8s %7s %s", "level", "ppl now", "improv", "run")
		}
		lines = append(lines, st.Muted.Render(head))
	}
	for _, l := range Levels {
		lines = append(lines, m.row(l, spark, narrow))
	}
	if rest := h - len(lines); rest >= 4 {
		lines = append(lines, m.chart(w, rest))
	}
	return strings.Join(lines, "\n")
}

// row is one level: name, perplexity now, baseline, improvement over the baseline, the
// level's improvement over the run as a sparkline and its trend arrow: up is better, as in
// the title and the chart.
func (m Model) row(level string, spark int, narrow bool) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	name := "ppl/" + level
	v, ok := r.Last(name)
	if !ok {
		return fmt.Sprintf("%-9s %8s", level, "—")
	}
	base := r.Baselines.Get(level)
	bs, ds := "—", fmt.Sprintf("%7s", "")
	if base > 0 {
		bs = format.Value(base)
		d := (base - v) / base
		ds = fmt.Sprintf("%7s", format.SignedPercent(d))
		switch {
		case d > 0:
			ds = st.Good.Render(ds)
		case d < 0:
			ds = st.Bad.Render(ds)
		}
	}
	// Perplexity falling is improvement rising.
	t := r.TrendOver(name, 0)
	arrow := format.Arrow(t)
	switch t {
	case state.Falling:
		arrow = st.Good.Render(format.Arrow(state.Rising))
	case state.Rising:
		arrow = st.Bad.Render(format.Arrow(state.Falling))
	}
	line := fmt.Sprintf("%-9s %8s %8s %s", level, format.Value(v), bs, ds)
	if narrow {
		line = fmt.Sprintf("%-9s %8s %s", level, format.Value(v), ds)
	}
	if spark > 0 {
		style := st.Text
		if len(st.SeriesTag) > 0 {
			style = st.SeriesTag[0]
		}
		imp := m.relative(level)
		for i := range imp {
			imp[i] = -imp[i]
		}
		line += " " + style.Render(charts.Sparkline(imp, spark))
	}
	return line + " " + arrow
}

// chart plots the improvement over the baselines (DESIGN §6.1, the reward's own measure: above
// 0 is better), or without it the aggregate's change against its baseline.
func (m Model) chart(w, h int) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	if r.Has("ppl/improvement") {
		s := r.Series("ppl/improvement")
		pct := make([]float64, len(s))
		for i, v := range s {
			pct[i] = 100 * v
		}
		return charts.Plot(st, [][]float64{pct}, []string{"improvement"},
			[]string{"improvement % over baselines", "above 0 is better"}, w, h)
	}
	level := "aggregate"
	if !r.Has("ppl/aggregate") {
		level = "word"
	}
	what := "% over baseline"
	if r.Baselines.Get(level) <= 0 {
		what = "% over its first value"
	}
	imp := m.relative(level)
	for i := range imp {
		imp[i] = -imp[i]
	}
	return charts.Plot(st, [][]float64{imp}, []string{level},
		[]string{level + " improvement " + what, "above 0 is better"}, w, h)
}

// relative is a level's series as a percentage change against its baseline (against its
// first value when the baseline is unknown).
func (m Model) relative(level string) []float64 {
	s := m.Ctx.Run.Series("ppl/" + level)
	base := m.Ctx.Run.Baselines.Get(level)
	if base <= 0 && len(s) > 0 {
		base = s[0]
	}
	out := make([]float64, len(s))
	for i, v := range s {
		out[i] = 100 * (v - base) / base
	}
	return out
}
