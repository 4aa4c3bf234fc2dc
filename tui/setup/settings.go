package setup

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/input"
	"rlhfstation/tui/styles"
)

// Setting is one key the settings page edits: its TOML name (TRL's), its value as a flag
// takes it, and its help line. Common ones are listed first; the rest under "advanced".
type Setting struct {
	Key, Value, Help string
	Common           bool
}

// page is the settings page: every run setting the main form does not show, one input each,
// scrolled; up/down move, typing edits, esc or enter on the last line returns to the form.
type page struct {
	open   bool
	items  []Setting
	inputs []input.Model
	focus  int
	top    int
}

func newPage(items []Setting) page {
	p := page{items: items}
	for _, s := range items {
		in := input.New("", "")
		in.SetValue(s.Value)
		p.inputs = append(p.inputs, in)
	}
	return p
}

// changed gives the settings whose value differs from the one the page opened with.
func (p page) changed() map[string]string {
	var out map[string]string
	for i, s := range p.items {
		if v := strings.TrimSpace(p.inputs[i].Value()); v != s.Value {
			if out == nil {
				out = map[string]string{}
			}
			out[s.Key] = v
		}
	}
	return out
}

// summary is the main form's line for the page: the changed settings, or how to open it.
func (p page) summary() string {
	ch := p.changed()
	if len(ch) == 0 {
		return fmt.Sprintf("%d settings at their defaults (space: batch, generations, lengths, loss… and advanced)", len(p.items))
	}
	var parts []string
	for _, s := range p.items {
		if v, ok := ch[s.Key]; ok {
			parts = append(parts, s.Key+" = "+v)
		}
	}
	return strings.Join(parts, " · ")
}

func (p *page) setFocus(i int) {
	p.focus = max(0, min(i, len(p.items)))
	for j := range p.inputs {
		if j == p.focus {
			p.inputs[j].Focus()
		} else {
			p.inputs[j].Blur()
		}
	}
}

// update handles a key while the page is open; it reports whether the page closed.
func (p *page) update(k tea.KeyPressMsg) bool {
	switch k.Keystroke() {
	case "esc":
		p.open = false
	case "up", "shift+tab":
		p.setFocus(p.focus - 1)
	case "down", "tab":
		p.setFocus(p.focus + 1)
	case "enter":
		if p.focus == len(p.items) {
			p.open = false
		} else {
			p.setFocus(p.focus + 1)
		}
	default:
		if p.focus < len(p.items) {
			p.inputs[p.focus], _ = p.inputs[p.focus].Update(k)
		}
	}
	return !p.open
}

// view renders rows lines of the page, inner cells wide, scrolled to keep the focus in sight.
func (p *page) view(st styles.Styles, inner, rows int) string {
	keyW := 10
	for _, s := range p.items {
		keyW = max(keyW, lipgloss.Width(s.Key)+1)
	}
	keyW = min(keyW, inner/2)
	var lines []string
	focusLine := 0
	advanced := false
	for i, s := range p.items {
		if !s.Common && !advanced {
			advanced = true
			lines = append(lines, "", st.Title.Render("advanced"))
		}
		if i == p.focus {
			focusLine = len(lines)
		}
		name := fmt.Sprintf("%-*s", keyW, s.Key)
		if i == p.focus {
			name = st.Title.Render(name)
		} else {
			name = st.Muted.Render(name)
		}
		p.inputs[i].SetWidth(max(inner-keyW-2, 8))
		lines = append(lines, name+" "+p.inputs[i].View(st))
		if i == p.focus && s.Help != "" {
			lines = append(lines, strings.Repeat(" ", keyW+1)+st.Muted.Render(styles.Clip(s.Help, max(inner-keyW-1, 8))))
		}
	}
	done := "[ done ]"
	if p.focus == len(p.items) {
		done = st.Selected.Render(done)
		focusLine = len(lines) + 1
	}
	lines = append(lines, "", done)
	rows = max(rows, 3)
	if focusLine < p.top {
		p.top = focusLine
	}
	if focusLine >= p.top+rows {
		p.top = focusLine - rows + 1
	}
	end := min(p.top+rows, len(lines))
	return strings.Join(lines[p.top:end], "\n")
}
