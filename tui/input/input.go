// Package input is a one-line text field (a prompt for generation, a path on the setup
// screen). bubbles/textinput would do, but it pulls in a clipboard module this build does not
// carry (github.com/atotto/clipboard); this field needs only typing, editing and paste.
package input

import (
	"strings"
	"unicode"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/styles"
)

// Model is a one-line text field.
type Model struct {
	Prompt      string
	Placeholder string
	value       []rune
	pos         int // cursor, in runes
	focused     bool
	width       int // cells for prompt and text together; 0 = unlimited
}

// New returns an empty field.
func New(prompt, placeholder string) Model { return Model{Prompt: prompt, Placeholder: placeholder} }

// SetValue replaces the text and puts the cursor at its end.
func (m *Model) SetValue(s string) { m.value = []rune(s); m.pos = len(m.value) }

// Value is the text typed.
func (m Model) Value() string { return string(m.value) }

// SetWidth sets how many cells the field may take.
func (m *Model) SetWidth(w int) { m.width = w }

// Focus, Blur and Focused move the keyboard to and from the field.
func (m *Model) Focus()       { m.focused = true }
func (m *Model) Blur()        { m.focused = false }
func (m Model) Focused() bool { return m.focused }

// Update edits the text: printable keys insert, backspace/delete remove, left/right/home/end
// (ctrl+a, ctrl+e) move, ctrl+u clears to the start, ctrl+k to the end; paste inserts.
func (m Model) Update(msg tea.Msg) (Model, tea.Cmd) {
	if !m.focused {
		return m, nil
	}
	switch msg := msg.(type) {
	case tea.PasteMsg:
		m.insert(strings.Map(func(r rune) rune {
			if r == '\n' || r == '\r' || r == '\t' {
				return ' '
			}
			if unicode.IsControl(r) {
				return -1
			}
			return r
		}, msg.Content))
	case tea.KeyPressMsg:
		switch msg.Keystroke() {
		case "backspace", "ctrl+h":
			if m.pos > 0 {
				m.value = append(m.value[:m.pos-1], m.value[m.pos:]...)
				m.pos--
			}
		case "delete", "ctrl+d":
			if m.pos < len(m.value) {
				m.value = append(m.value[:m.pos], m.value[m.pos+1:]...)
			}
		case "left", "ctrl+b":
			m.pos = max(m.pos-1, 0)
		case "right", "ctrl+f":
			m.pos = min(m.pos+1, len(m.value))
		case "home", "ctrl+a":
			m.pos = 0
		case "end", "ctrl+e":
			m.pos = len(m.value)
		case "ctrl+u":
			m.value, m.pos = append([]rune{}, m.value[m.pos:]...), 0
		case "ctrl+k":
			m.value = m.value[:m.pos]
		default:
			if msg.Text != "" && msg.Mod&^tea.ModShift == 0 {
				m.insert(msg.Text)
			}
		}
	}
	return m, nil
}

func (m *Model) insert(s string) {
	rs := []rune(s)
	v := make([]rune, 0, len(m.value)+len(rs))
	v = append(v, m.value[:m.pos]...)
	v = append(v, rs...)
	v = append(v, m.value[m.pos:]...)
	m.value = v
	m.pos += len(rs)
}

// View draws the prompt and the text, scrolled so that the cursor shows; the cursor is a
// reverse-video cell when focused.
func (m Model) View(st styles.Styles) string {
	prompt := st.Muted.Render(m.Prompt)
	avail := 1 << 30
	if m.width > 0 {
		avail = max(m.width-lipgloss.Width(m.Prompt)-1, 1)
	}
	if len(m.value) == 0 {
		ph := ""
		if m.Placeholder != "" {
			ph = st.Muted.Render(styles.Ellipsis(m.Placeholder, avail))
		}
		if m.focused {
			return prompt + lipgloss.NewStyle().Reverse(true).Render(" ") + ph
		}
		return prompt + ph
	}
	start := 0
	if m.pos >= avail {
		start = m.pos - avail + 1
	}
	end := min(len(m.value), start+avail)
	vis := m.value[start:end]
	if !m.focused {
		return prompt + string(vis)
	}
	c := m.pos - start
	cur := " "
	after := ""
	if c < len(vis) {
		cur = string(vis[c])
		after = string(vis[c+1:])
	}
	return prompt + string(vis[:c]) + lipgloss.NewStyle().Reverse(true).Render(cur) + after
}
