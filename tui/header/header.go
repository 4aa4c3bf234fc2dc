// Package header is the dashboard's top two lines: which run, on what, how far, how fast.
package header

import (
	"fmt"
	"strings"

	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
)

// Height is the number of lines the header takes.
const Height = 2

// Model is the header component.
type Model struct {
	component.Base
}

// New returns a header drawing from ctx.
func New(ctx *context.Context) Model { return Model{Base: component.New(ctx)} }

// segment is one item of a header line; when a line is too wide the lowest priority goes first.
type segment struct {
	text string
	prio int
}

// View renders the two lines.
func (m Model) View() string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	status := m.status()

	name := r.Name
	if name == "" {
		name = "(waiting for run_start)"
	}
	line1 := []segment{
		{st.Title.Render("rlhfstation"), 9},
		{st.Muted.Render("run ") + name, 8},
	}
	if r.Source != "" {
		line1 = append(line1, segment{st.Muted.Render("from ") + r.Source, 7})
	}
	if r.Preset != "" {
		line1 = append(line1, segment{st.Muted.Render("preset ") + r.Preset, 7})
	}
	if r.Model != "" {
		line1 = append(line1, segment{st.Muted.Render("model ") + r.Model, 6})
	}
	if r.Device != "" {
		line1 = append(line1, segment{st.Muted.Render("device ") + r.Device, 4})
	}
	if p := r.Params; p != nil && p.Total > 0 {
		line1 = append(line1, segment{st.Muted.Render("params ") + format.Count(float64(p.Total)) +
			st.Muted.Render(" (") + format.Count(float64(p.Trainable)) + st.Muted.Render(" trainable)"), 1})
	}
	sw := lipgloss.Width(status)
	left := fit(line1, m.Width-sw-1, st.Muted.Render(" · "))
	gap := m.Width - lipgloss.Width(left) - sw
	if gap < 1 {
		gap = 1
	}
	l1 := left + strings.Repeat(" ", gap) + status

	now := m.Ctx.Now()
	var line2 []segment
	if r.TotalSteps > 0 {
		frac := float64(r.Step) / float64(r.TotalSteps)
		if frac > 1 {
			frac = 1
		}
		barW := m.Width / 6
		barW = max(8, min(barW, 30))
		line2 = append(line2,
			segment{st.Muted.Render("step ") + fmt.Sprintf("%d/%d", r.Step, r.TotalSteps), 9},
			segment{m.bar(frac, barW) + " " + fmt.Sprintf("%3.0f%%", frac*100), 3})
	} else {
		line2 = append(line2, segment{st.Muted.Render("step ") + fmt.Sprint(r.Step), 9})
	}
	if !r.StartTime.IsZero() { // other tools' logs may carry no times
		line2 = append(line2, segment{st.Muted.Render("elapsed ") + format.Duration(r.Elapsed(now)), 8})
	}
	if eta, ok := r.ETA(now); ok {
		line2 = append(line2, segment{st.Muted.Render("ETA ") + format.Duration(eta), 7})
	}
	if v, ok := r.Last("perf/tokens_per_second"); ok {
		line2 = append(line2, segment{format.Count(v) + st.Muted.Render(" tok/s"), 6})
	}
	if v, ok := r.Last("mem/rss_bytes"); ok {
		line2 = append(line2, segment{st.Muted.Render("mem ") + format.Bytes(v), 5})
	}
	if v, ok := r.Last("mem/gpu_bytes"); ok {
		line2 = append(line2, segment{st.Muted.Render("gpu ") + format.Bytes(v), 5})
	}
	if v, ok := r.Last("perf/step_seconds"); ok {
		line2 = append(line2, segment{format.Value(v) + st.Muted.Render(" s/step"), 2})
	}
	l2 := fit(line2, m.Width, st.Muted.Render(" · "))
	return l1 + "\n" + l2
}

// status is the run's state word at the right of the first line.
func (m Model) status() string {
	st, r := m.Ctx.Styles, m.Ctx.Run
	switch {
	case r.Ended:
		switch r.Status {
		case "completed":
			return st.Good.Render("✓ completed")
		case "failed":
			return st.Bad.Render("✗ failed")
		case "":
			return st.Warn.Render("■ ended")
		}
		return st.Warn.Render("■ " + r.Status)
	case m.Ctx.Stopping:
		return st.Warn.Render("■ stopping…")
	case !m.Ctx.Live:
		if !r.Started {
			return st.Muted.Render("◌ replay")
		}
		return st.Muted.Render("◌ replay (run in progress)")
	case m.Ctx.Paused:
		return st.Warn.Render("❚❚ paused")
	case !r.Started:
		return st.Muted.Render("◌ starting…")
	}
	return st.Good.Render("● running")
}

// bar draws the progress bar. (bubbles/progress needs a module this build does not carry,
// github.com/charmbracelet/harmonica, for its animation, which a step counter does not need.)
func (m Model) bar(frac float64, w int) string {
	full := int(frac*float64(w) + 0.5)
	full = max(0, min(full, w))
	st := m.Ctx.Styles
	if st.NoColor {
		return strings.Repeat("█", full) + strings.Repeat("░", w-full)
	}
	return lipgloss.NewStyle().Foreground(st.Bar[0]).Render(strings.Repeat("█", full)) +
		lipgloss.NewStyle().Foreground(st.Bar[1]).Render(strings.Repeat("░", w-full))
}

// fit joins segments with sep, dropping the lowest-priority ones until the line fits w; the
// last resort cuts the line.
func fit(segs []segment, w int, sep string) string {
	for {
		parts := make([]string, len(segs))
		for i, s := range segs {
			parts[i] = s.text
		}
		line := strings.Join(parts, sep)
		if lipgloss.Width(line) <= w || len(segs) <= 1 {
			return clip(line, w)
		}
		low := 0
		for i, s := range segs {
			if s.prio < segs[low].prio {
				low = i
			}
		}
		segs = append(segs[:low:low], segs[low+1:]...)
	}
}

func clip(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if lipgloss.Width(s) <= w {
		return s
	}
	return lipgloss.NewStyle().MaxWidth(w).Render(s)
}
