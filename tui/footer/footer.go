// Package footer is the bottom line: the latest status message on the left, the keys of the
// current screen on the right.
package footer

import (
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/keys"
	"rlhfstation/tui/styles"
)

// Model is the footer.
type Model struct {
	component.Base
	help     help.Model
	flash    string
	flashErr bool
	bindings []key.Binding
}

// New returns a footer showing the dashboard's keys.
func New(ctx *context.Context) Model {
	return Model{Base: component.New(ctx), help: help.New(), bindings: ctx.Keys.ShortHelp()}
}

// SetKeys sets the bindings shown.
func (m *Model) SetKeys(b []key.Binding) { m.bindings = b }

// Flash shows a status message until the next one or Clear.
func (m *Model) Flash(msg string, isErr bool) { m.flash, m.flashErr = msg, isErr }

// Clear removes the status message.
func (m *Model) Clear() { m.flash = "" }

// Message is the status message shown (for tests and the plain summary).
func (m Model) Message() string { return m.flash }

// View renders the line.
func (m Model) View() string {
	st := m.Ctx.Styles
	left := ""
	if m.flash != "" {
		fs := st.Flash
		if m.flashErr {
			fs = st.FlashErr
		}
		left = fs.Render(styles.Ellipsis(m.flash, max(m.Width*3/5, 20)))
	}
	lw := lipgloss.Width(left)
	m.help.Styles = st.Help
	m.help.SetWidth(max(m.Width-lw-2, 0))
	right := m.help.View(keys.Short(m.bindings))
	gap := m.Width - lw - lipgloss.Width(right)
	if gap < 1 {
		return styles.Clip(left, m.Width)
	}
	return left + strings.Repeat(" ", gap) + right
}
