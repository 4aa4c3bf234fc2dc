// Package ntl is the number-token-loss pane (DESIGN §6.2): digit accuracy and loss with
// their trends, digits seen so far, and a chart of the accuracy when there is room. Presets
// without NTL get a one-line note instead.
package ntl

import (
	"fmt"
	"strings"

	"rlhfstation/tui/charts"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
	"rlhfstation/tui/state"
)

// Model is the NTL pane.
type Model struct {
	component.Base
}

// New returns the pane.
func New(ctx *context.Context) Model { return Model{Base: component.New(ctx)} }

// Used reports whether the run logs NTL metrics.
func Used(r *state.Run) bool {
	return r.Has("ntl/digit_accuracy") || r.Has("ntl/loss")
}

// View renders the framed pane.
func (m Model) View() string { return m.Frame("number token loss", m.body) }

func (m Model) body(w, h int) string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	if !Used(r) {
		if r.Step == 0 {
			return st.Muted.Render("waiting for metrics…")
		}
		p := r.Preset
		if p == "" {
			p = "this run"
		}
		return st.Muted.Render(fmt.Sprintf("not used by this preset (%s)", p))
	}
	// up is good for accuracy and reward, bad for loss.
	line := func(label, metric string, val func(float64) string, upGood bool) string {
		v, ok := r.Last(metric)
		if !ok {
			return fmt.Sprintf("%-14s %8s", label, "—")
		}
		// The whole run's trend, as the chart and the sparklines show it: the latest few
		// points of a falling loss may tick up, and the arrow must not contradict the chart.
		t := r.TrendOver(metric, 0)
		a := format.Arrow(t)
		if (t == state.Rising) == upGood && t != state.Stable && t != state.Unknown {
			a = st.Good.Render(a)
		} else if t == state.Rising || t == state.Falling {
			a = st.Bad.Render(a)
		}
		return fmt.Sprintf("%-14s %8s %s", label, val(v), a)
	}
	lines := []string{
		line("digit accuracy", "ntl/digit_accuracy", format.Percent, true),
		line("ntl loss", "ntl/loss", format.Value, false),
	}
	if r.Has("ntl/reward") {
		lines = append(lines, line("ntl reward", "ntl/reward", format.Value, true))
	}
	if r.Has("ntl/total_digits") {
		s := fmt.Sprintf("%-14s %8s", "digits seen", format.Count(r.Sum("ntl/total_digits")))
		if r.Has("ntl/correct_digits") {
			s += st.Muted.Render(" (" + format.Count(r.Sum("ntl/correct_digits")) + " right)")
		}
		lines = append(lines, s)
	}
	if len(lines) > h {
		lines = lines[:h]
	}
	if rest := h - len(lines); rest >= 4 {
		lines = append(lines, charts.Plot(st, [][]float64{r.Series("ntl/digit_accuracy")},
			[]string{"digit accuracy"}, nil, w, rest))
	}
	return strings.Join(lines, "\n")
}
