// Package alerts is the anomaly pane: the monitor's alerts newest first, coloured by severity,
// one selectable with the keyboard to read its full message.
package alerts

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
	"rlhfstation/tui/styles"
)

// Model is the alerts pane.
type Model struct {
	component.Base
	sel  int // position in the newest-first list
	top  int // first visible position
	seen int // anomalies known at the last Sync
}

// New returns the pane.
func New(ctx *context.Context) Model { return Model{Base: component.New(ctx)} }

// SetSize sets the pane's outer size, keeping the selection in view.
func (m *Model) SetSize(w, h int) { m.Base.SetSize(w, h); m.scroll() }

// Sync follows new anomalies: the newest stays selected unless the user moved away from it,
// in which case the selection stays on the same alert.
func (m *Model) Sync() {
	n := len(m.Ctx.Run.Anomalies)
	if added := n - m.seen; added > 0 && m.sel > 0 {
		m.sel += added
		m.top += added
	}
	m.seen = n
	m.scroll()
}

// Selected returns the selected anomaly.
func (m Model) Selected() (events.Event, bool) {
	a := m.Ctx.Run.Anomalies
	if len(a) == 0 {
		return events.Event{}, false
	}
	return a[len(a)-1-m.sel], true
}

// Update handles the pane's keys: up/down select. (enter is the app's: it opens the
// selected alert in an overlay.)
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := m.Ctx.Keys
	n := len(m.Ctx.Run.Anomalies)
	switch {
	case key.Matches(k, keys.Up):
		if m.sel > 0 {
			m.sel--
		}
	case key.Matches(k, keys.Down):
		if m.sel < n-1 {
			m.sel++
		}
	}
	m.scroll()
	return nil
}

func (m *Model) scroll() {
	rows := max(m.Height-2, 1)
	n := len(m.Ctx.Run.Anomalies)
	m.sel = max(0, min(m.sel, n-1))
	if m.sel < m.top {
		m.top = m.sel
	}
	if m.sel >= m.top+rows {
		m.top = m.sel - rows + 1
	}
	m.top = max(0, min(m.top, n-rows))
}

// Title counts the alerts by severity, with short severity names when the full title would
// not fit in w cells.
func (m Model) Title(w int) string {
	c := map[string]int{}
	for _, a := range m.Ctx.Run.Anomalies {
		c[a.Severity]++
	}
	if len(m.Ctx.Run.Anomalies) == 0 {
		return "alerts"
	}
	title := func(short bool) string {
		var parts []string
		for _, s := range []string{events.Critical, events.Warning, events.Info} {
			name := s
			if short {
				name = strings.ToLower(Tag(s))
			}
			if c[s] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", c[s], name))
			}
		}
		return "alerts · " + strings.Join(parts, " · ")
	}
	if t := title(false); lipgloss.Width(t) <= w {
		return t
	}
	return title(true)
}

// View renders the framed list.
func (m Model) View() string {
	return m.Frame(m.Title(m.Width-5), func(w, rows int) string {
		a := m.Ctx.Run.Anomalies
		var lines []string
		if len(a) == 0 {
			lines = append(lines, m.Ctx.Styles.Muted.Render("no anomalies"))
		}
		for i := m.top; i < len(a) && i < m.top+rows; i++ {
			lines = append(lines, m.line(a[len(a)-1-i], w, m.Focused() && i == m.sel))
		}
		return strings.Join(lines, "\n")
	})
}

// Tag is the four-letter severity tag, readable without colour.
func Tag(sev string) string {
	switch sev {
	case events.Critical:
		return "CRIT"
	case events.Warning:
		return "WARN"
	case events.Info:
		return "INFO"
	}
	return strings.ToUpper(fmt.Sprintf("%-4.4s", sev))
}

func (m Model) line(e events.Event, w int, sel bool) string {
	st := m.Ctx.Styles
	what := e.Rule
	if e.Metric != "" {
		what += " " + e.Metric
		if format.AlertHasValue(e.Rule) {
			what += "=" + format.Value(e.Value)
		}
	}
	rest := fmt.Sprintf(" s%-4d %s · %s", e.Step, what, oneLine(e.Message))
	if sel {
		rest = styles.Ellipsis(rest, w-2-4)
		body := "▸ " + Tag(e.Severity) + rest
		pad := w - lipgloss.Width(body)
		return st.Selected.Render(body + strings.Repeat(" ", max(pad, 0)))
	}
	return "  " + st.SeverityStyle(e.Severity).Render(Tag(e.Severity)) + styles.Ellipsis(rest, w-2-4)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Detail is the full text of an alert for the overlay, wrapped to w.
func Detail(st styles.Styles, e events.Event, w int) string {
	var b strings.Builder
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s %s\n", st.Muted.Render(fmt.Sprintf("%-9s", k)), v)
		}
	}
	row("severity", st.SeverityStyle(e.Severity).Render(e.Severity))
	row("step", fmt.Sprint(e.Step))
	if !e.Time.IsZero() {
		row("time", e.Time.UTC().Format("2006-01-02 15:04:05Z"))
	}
	row("rule", e.Rule)
	if e.Metric != "" {
		row("metric", e.Metric)
		if format.AlertHasValue(e.Rule) {
			row("value", format.Value(e.Value))
		}
	}
	b.WriteString("\n")
	b.WriteString(lipgloss.Wrap(e.Message, w, " "))
	return b.String()
}
