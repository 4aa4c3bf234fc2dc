// Package perplexity is the pane of the multi-level perplexity reward (DESIGN §6.1): each
// level now, against its baseline, with its trend, and a chart of the levels when there is
// room.
package perplexity

import (
	"fmt"
	"strings"

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

// View renders the framed pane.
func (m Model) View() string {
	title := "perplexity"
	if v, ok := m.Ctx.Run.Last("ppl/improvement"); ok {
		title += " · improvement " + format.SignedPercent(v)
	}
	return m.Frame(title, m.body)
}

func (m Model) body(w, h int) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	any := false
	for _, l := range Levels {
		any = any || r.Has("ppl/"+l)
	}
	if !any {
		return st.Muted.Render("waiting for perplexity metrics…")
	}
	var lines []string
	if h >= 5 {
		lines = append(lines, st.Muted.Render(fmt.Sprintf("%-9s %8s %8s %7s", "level", "now", "baseline", "Δ")))
	}
	for _, l := range Levels {
		lines = append(lines, m.row(l))
	}
	if rest := h - len(lines); rest >= 4 {
		levels := []string{"word", "phrase", "sentence"}
		data := make([][]float64, len(levels))
		for i, l := range levels {
			data[i] = m.relative(l)
		}
		lines = append(lines, charts.Plot(st, data, levels, []string{"% against baseline"}, w, rest))
	}
	return strings.Join(lines, "\n")
}

// row is one level: name, now, baseline, relative change and the trend arrow. Lower is
// better, so a fall is drawn as good.
func (m Model) row(level string) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	name := "ppl/" + level
	v, ok := r.Last(name)
	if !ok {
		return fmt.Sprintf("%-9s %8s", level, "—")
	}
	base := r.Baselines.Get(level)
	bs, ds := "—", ""
	if base > 0 {
		bs = format.Value(base)
		d := (v - base) / base
		ds = fmt.Sprintf("%7s", format.SignedPercent(d))
		switch {
		case d < 0:
			ds = st.Good.Render(ds)
		case d > 0:
			ds = st.Bad.Render(ds)
		}
	} else {
		ds = fmt.Sprintf("%7s", "")
	}
	t := r.TrendOf(name)
	arrow := format.Arrow(t)
	switch t {
	case state.Falling:
		arrow = st.Good.Render(arrow)
	case state.Rising:
		arrow = st.Bad.Render(arrow)
	}
	return fmt.Sprintf("%-9s %8s %8s %s %s", level, format.Value(v), bs, ds, arrow)
}

// relative is a level's series as a percentage change against its baseline (against its
// first value when the baseline is unknown), so the three levels share one axis.
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
