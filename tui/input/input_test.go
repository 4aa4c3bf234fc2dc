package input

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/styles"
)

func press(m Model, keys ...tea.KeyPressMsg) Model {
	for _, k := range keys {
		m, _ = m.Update(k)
	}
	return m
}

func text(s string) []tea.KeyPressMsg {
	var out []tea.KeyPressMsg
	for _, r := range s {
		out = append(out, tea.KeyPressMsg{Code: r, Text: string(r)})
	}
	return out
}

func TestEditing(t *testing.T) {
	m := New("> ", "")
	if m = press(m, text("ignored")...); m.Value() != "" {
		t.Fatalf("a blurred field took keys: %q", m.Value())
	}
	m.Focus()
	m = press(m, text("héllo wrld")...)
	m = press(m, tea.KeyPressMsg{Code: tea.KeyLeft}, tea.KeyPressMsg{Code: tea.KeyLeft},
		tea.KeyPressMsg{Code: tea.KeyLeft})
	m = press(m, text("o")...)
	if m.Value() != "héllo world" {
		t.Errorf("insert in the middle: %q", m.Value())
	}
	m = press(m, tea.KeyPressMsg{Code: tea.KeyHome}, tea.KeyPressMsg{Code: tea.KeyDelete})
	m = press(m, tea.KeyPressMsg{Code: tea.KeyEnd}, tea.KeyPressMsg{Code: tea.KeyBackspace})
	if m.Value() != "éllo worl" {
		t.Errorf("delete and backspace: %q", m.Value())
	}
	m, _ = m.Update(tea.PasteMsg{Content: "\tpasted\nline"})
	if m.Value() != "éllo worl pasted line" {
		t.Errorf("paste: %q", m.Value())
	}
	m = press(m, tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl})
	if m.Value() != "" {
		t.Errorf("ctrl+u: %q", m.Value())
	}
	m = press(m, tea.KeyPressMsg{Code: 'x', Mod: tea.ModCtrl})
	if m.Value() != "" {
		t.Errorf("ctrl+x typed %q", m.Value())
	}
}

func TestViewScrollsToCursor(t *testing.T) {
	st := styles.New(true, true)
	m := New("p> ", "")
	m.SetWidth(10)
	m.Focus()
	m = press(m, text("abcdefghijklmnop")...)
	v := m.View(st)
	if !strings.HasPrefix(v, "p> ") || !strings.Contains(v, "lmnop") || strings.Contains(v, "abc") || lipgloss.Width(v) > 10 {
		t.Errorf("view %q does not show the end of the text", v)
	}
	m.Blur()
	empty := New("p> ", "type here")
	if got := empty.View(st); !strings.Contains(got, "type here") {
		t.Errorf("placeholder missing: %q", got)
	}
}
