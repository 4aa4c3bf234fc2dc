// Package help is the overlay listing every key of the workstation, grouped as the key map's
// FullHelp groups them.
package help

import (
	"strings"

	bhelp "charm.land/bubbles/v2/help"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
)

// Model is the help overlay.
type Model struct {
	component.Base
}

// New returns the overlay.
func New(ctx *context.Context) Model { return Model{Base: component.New(ctx)} }

// View renders the framed key list, sized to its content.
func (m Model) View() string {
	st := m.Ctx.Styles
	h := bhelp.New()
	h.Styles = st.Help
	h.FullSeparator = "    "
	body := h.FullHelpView(m.Ctx.Keys.FullHelp())
	notes := []string{
		"",
		st.Muted.Render("q asks before stopping a live run (it saves a checkpoint first);"),
		st.Muted.Render("in a replay, space and s do nothing: the run is not live."),
		st.Muted.Render("esc or ? closes this help."),
		"",
		st.Muted.Render("reward title: stability = mean/std of the latest rewards (higher: steadier);"),
		st.Muted.Render("consistency = share of them within mean ± 2σ (lower: outliers)."),
		st.Muted.Render("perplexity: improvement over the baseline, + and ↑ are better."),
	}
	body += "\n" + strings.Join(notes, "\n")
	w := min(lipgloss.Width(body)+4, m.Width)
	return st.Box("keys", lipgloss.NewStyle().Padding(0, 1).Render(body), w, min(lipgloss.Height(body)+2, m.Height), true)
}
