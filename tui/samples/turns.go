package samples

import (
	"encoding/json"
	"strings"

	"charm.land/lipgloss/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/styles"
)

// writeTurns writes a multi-turn episode: each message under its role, each tool call on its
// own line, and what the model did not write (the prompt's and the environment's messages,
// masked out of the loss) dimmed.
func writeTurns(b *strings.Builder, st styles.Styles, w int, s events.Sample) {
	if s.Failed != "" {
		b.WriteString(st.Bad.Render(lipgloss.Wrap("environment failed: "+s.Failed+" (scored as not applicable)", w, " ")))
		b.WriteString("\n")
	}
	b.WriteString(st.Muted.Render(lipgloss.Wrap("dimmed: not the model's, masked from the loss", w, " ")))
	b.WriteString("\n")
	for _, t := range s.Turns {
		label, body := st.Title, st.Text
		if t.Masked {
			label, body = st.Muted, st.Muted
		}
		name := t.Role
		if t.Role == "tool" {
			name = "tool result"
		}
		if t.Content != "" || len(t.Calls) == 0 {
			b.WriteString(label.Render(name))
			b.WriteString("\n")
			b.WriteString(body.Render(lipgloss.Wrap(t.Content, w, " ")))
			b.WriteString("\n")
		}
		for _, c := range t.Calls {
			args, _ := json.Marshal(c.Arguments)
			b.WriteString(label.Render("tool call"))
			b.WriteString("\n")
			b.WriteString(body.Render(lipgloss.Wrap(c.Name+" "+string(args), w, " ")))
			b.WriteString("\n")
		}
	}
}
