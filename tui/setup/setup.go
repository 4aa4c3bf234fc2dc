// Package setup is the first screen of the workstation: pick a reward preset (its weights
// shown), the model and data, an adapter to start from, the number of steps and the device,
// then start. The choices
// come from the caller as plain data and the chosen settings go back as a StartMsg.
package setup

import (
	"fmt"
	"strconv"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/input"
	"rlhfstation/tui/styles"
)

// Preset is one reward preset as the screen lists it.
type Preset struct {
	Name        string
	Description string
	Weights     [3]float64 // perplexity weights: word, phrase, sentence
	Other       string     // other rewards, e.g. "NTL final_answer, correctness"
}

// Choices is what the screen offers and its defaults.
type Choices struct {
	Presets []Preset
	Preset  string // selected first; the first preset when empty or unknown
	Model   string // default model folder ("" = the built-in model)
	Data    string // default prompt file ("" = the built-in corpus)
	Adapter string // default adapter to start from ("" = fresh adapters)
	Steps   int
	Devices []string // e.g. auto, cpu, cuda; auto/cpu/cuda when empty
	Device  string
	// Settings are every other run setting, for the settings page (common ones first).
	Settings []Setting
}

// Settings is what the user chose.
type Settings struct {
	Preset  string
	Model   string
	Data    string
	Adapter string // init_adapter: a PEFT adapter folder to start from, "" for fresh adapters
	Steps   int
	Device  string
	// Changed are the settings page's keys whose value the user changed, key → value as a
	// flag takes it.
	Changed map[string]string
}

// StartMsg carries the chosen settings to the app, which hands them to the caller.
type StartMsg struct{ Settings Settings }

// QuitMsg asks the app to quit from the setup screen.
type QuitMsg struct{}

const (
	fieldPreset = iota
	fieldModel
	fieldData
	fieldAdapter
	fieldSteps
	fieldDevice
	fieldSettings
	fieldStart
	fieldCount
)

// Model is the setup screen.
type Model struct {
	component.Base
	choices Choices
	preset  int
	device  int
	model   input.Model
	data    input.Model
	adapter input.Model
	steps   input.Model
	focus   int
	err     string
	busy    bool
	page    page
}

// New returns the screen for the given choices.
func New(ctx *context.Context, c Choices) Model {
	if len(c.Devices) == 0 {
		c.Devices = []string{"auto", "cpu", "cuda"}
	}
	m := Model{Base: component.New(ctx), choices: c,
		model:   input.New("", "built-in model"),
		data:    input.New("", "built-in synthetic prompts"),
		adapter: input.New("", "fresh LoRA adapters (or a checkpoint folder to start from)"),
		steps:   input.New("", "number of steps"),
	}
	for i, p := range c.Presets {
		if p.Name == c.Preset {
			m.preset = i
		}
	}
	for i, d := range c.Devices {
		if d == c.Device {
			m.device = i
		}
	}
	m.page = newPage(c.Settings)
	m.model.SetValue(c.Model)
	m.data.SetValue(c.Data)
	m.adapter.SetValue(c.Adapter)
	if c.Steps > 0 {
		m.steps.SetValue(strconv.Itoa(c.Steps))
	}
	return m
}

// SetSize sets the screen's size.
func (m *Model) SetSize(w, h int) {
	m.Base.SetSize(w, h)
	fw := m.formWidth() - 2 - labelW
	m.model.SetWidth(fw)
	m.data.SetWidth(fw)
	m.adapter.SetWidth(fw)
	m.steps.SetWidth(min(fw, 12))
}

// SetError shows why starting failed (and clears the busy state).
func (m *Model) SetError(err error) {
	m.busy = false
	m.err = ""
	if err != nil {
		m.err = err.Error()
	}
}

// SetBusy shows that the run is starting.
func (m *Model) SetBusy(b bool) { m.busy = b }

// Editing reports whether a text field has the keyboard.
func (m Model) Editing() bool {
	return m.page.open || m.focus == fieldModel || m.focus == fieldData || m.focus == fieldAdapter || m.focus == fieldSteps
}

// Settings returns what the form holds now.
func (m Model) Settings() (Settings, error) {
	s := Settings{Model: strings.TrimSpace(m.model.Value()), Data: strings.TrimSpace(m.data.Value()),
		Adapter: strings.TrimSpace(m.adapter.Value()), Changed: m.page.changed()}
	if len(m.choices.Presets) > 0 {
		s.Preset = m.choices.Presets[m.preset].Name
	}
	s.Device = m.choices.Devices[m.device]
	n, err := strconv.Atoi(strings.TrimSpace(m.steps.Value()))
	if err != nil || n <= 0 {
		return s, fmt.Errorf("steps: %q is not a positive whole number", m.steps.Value())
	}
	s.Steps = n
	return s, nil
}

func (m *Model) setFocus(f int) {
	if f%fieldCount == fieldSettings && len(m.page.items) == 0 { // no settings page: skip its row
		f += f - m.focus
	}
	m.focus = (f + fieldCount) % fieldCount
	for i, in := range []*input.Model{&m.model, &m.data, &m.adapter, &m.steps} {
		if m.focus == fieldModel+i {
			in.Focus()
		} else {
			in.Blur()
		}
	}
}

// Update handles the form's keys.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		if p, ok := msg.(tea.PasteMsg); ok && m.Editing() {
			*m.field(), _ = m.field().Update(p)
		}
		return nil
	}
	if m.busy {
		return nil
	}
	if m.page.open {
		m.page.update(k)
		return nil
	}
	keys := m.Ctx.Keys
	switch {
	case key.Matches(k, keys.Next):
		m.setFocus(m.focus + 1)
		return nil
	case key.Matches(k, keys.Prev):
		m.setFocus(m.focus - 1)
		return nil
	case (k.Keystroke() == "space" || k.Keystroke() == "right") && m.focus == fieldSettings && len(m.page.items) > 0:
		// Space opens the page; enter moves on to start, as on every other row.
		m.page.open = true
		m.page.setFocus(0)
		return nil
	case k.Keystroke() == "enter":
		if m.focus != fieldStart {
			m.setFocus(m.focus + 1)
			return nil
		}
		s, err := m.Settings()
		if err != nil {
			m.err = err.Error()
			m.setFocus(fieldSteps)
			return nil
		}
		m.err = ""
		return func() tea.Msg { return StartMsg{s} }
	}
	if m.Editing() {
		switch k.Keystroke() {
		case "up":
			m.setFocus(m.focus - 1)
		case "down":
			m.setFocus(m.focus + 1)
		default:
			*m.field(), _ = m.field().Update(k)
		}
		return nil
	}
	switch {
	case key.Matches(k, keys.Quit), k.Keystroke() == "esc":
		return func() tea.Msg { return QuitMsg{} }
	case key.Matches(k, keys.Up):
		if m.focus == fieldPreset && m.preset > 0 {
			m.preset--
		} else if m.focus != fieldPreset {
			m.setFocus(m.focus - 1)
		}
	case key.Matches(k, keys.Down):
		if m.focus == fieldPreset && m.preset < len(m.choices.Presets)-1 {
			m.preset++
		} else {
			m.setFocus(m.focus + 1)
		}
	case key.Matches(k, keys.Left):
		if m.focus == fieldDevice {
			m.device = (m.device + len(m.choices.Devices) - 1) % len(m.choices.Devices)
		}
	case key.Matches(k, keys.Right), k.Keystroke() == "space":
		if m.focus == fieldDevice {
			m.device = (m.device + 1) % len(m.choices.Devices)
		}
	}
	return nil
}

func (m *Model) field() *input.Model {
	switch m.focus {
	case fieldModel:
		return &m.model
	case fieldData:
		return &m.data
	case fieldAdapter:
		return &m.adapter
	}
	return &m.steps
}

const labelW = 10

func (m Model) formWidth() int { return max(min(m.Width-4, 100), 40) }

// View renders the form centred on the screen.
func (m Model) View() string {
	st := m.Ctx.Styles
	fw := m.formWidth()
	inner := fw - 2
	label := func(f int, s string) string {
		t := fmt.Sprintf("%-*s", labelW, s)
		if m.focus == f {
			return st.Title.Render(t)
		}
		return st.Muted.Render(t)
	}
	var b strings.Builder
	b.WriteString(st.Muted.Render("Pick a reward preset and what to train; tab moves, enter starts.") + "\n\n")

	// Presets: the list on the left, the selected one's details on the right.
	listW := 14
	for _, p := range m.choices.Presets {
		listW = max(listW, lipgloss.Width(p.Name)+4)
	}
	var list []string
	for i, p := range m.choices.Presets {
		mark := "  "
		if i == m.preset {
			mark = "▸ "
		}
		line := fmt.Sprintf("%-*s", listW, mark+p.Name)
		if i == m.preset && m.focus == fieldPreset {
			line = st.Selected.Render(line)
		}
		list = append(list, line)
	}
	if len(list) == 0 {
		list = append(list, st.Muted.Render("(no presets)"))
	}
	detW := max(inner-labelW-listW-2, 10)
	var det []string
	if len(m.choices.Presets) > 0 {
		p := m.choices.Presets[m.preset]
		w := p.Weights
		other := p.Other
		if other == "" {
			other = "—"
		}
		for _, l := range []string{
			st.Muted.Render("perplexity weights ") + fmt.Sprintf("word %.1f · phrase %.1f · sentence %.1f", w[0], w[1], w[2]),
			st.Muted.Render("other rewards ") + other,
			p.Description,
		} {
			if l != "" {
				det = append(det, strings.Split(lipgloss.Wrap(l, detW, " "), "\n")...)
			}
		}
	}
	presetBlock := lipgloss.JoinHorizontal(lipgloss.Top, label(fieldPreset, "preset"), strings.Join(list, "\n"), "  ",
		strings.Join(styles.Fit(strings.Join(det, "\n"), detW, max(len(list), len(det))), "\n"))
	b.WriteString(presetBlock + "\n\n")

	b.WriteString(label(fieldModel, "model") + m.model.View(st) + "\n")
	b.WriteString(label(fieldData, "data") + m.data.View(st) + "\n")
	b.WriteString(label(fieldAdapter, "adapter") + m.adapter.View(st) + "\n")
	b.WriteString(label(fieldSteps, "steps") + m.steps.View(st) + "\n")
	dev := "◂ " + m.choices.Devices[m.device] + " ▸"
	if m.focus == fieldDevice {
		dev = st.Selected.Render(dev)
	}
	b.WriteString(label(fieldDevice, "device") + dev + "\n")
	if len(m.page.items) > 0 {
		sum := styles.Clip(m.page.summary(), inner-labelW)
		if m.focus == fieldSettings {
			sum = st.Selected.Render(sum)
		}
		b.WriteString(label(fieldSettings, "settings") + sum + "\n")
	}
	b.WriteString("\n")
	start := "[ start ]"
	switch {
	case m.busy:
		start = "starting…"
	case m.focus == fieldStart:
		start = st.Selected.Render(start)
	}
	b.WriteString(strings.Repeat(" ", labelW) + start)
	if m.err != "" {
		b.WriteString("\n\n" + st.FlashErr.Render(lipgloss.Wrap(m.err, inner, " ")))
	}
	body := b.String()
	title := "rlhfstation · new run"
	if m.page.open {
		title = "rlhfstation · new run · settings (TRL names; esc returns)"
		body = m.page.view(st, inner, max(m.Height-4, 3))
	}
	h := min(lipgloss.Height(body)+2, m.Height)
	box := st.Box(title, body, fw, h, true)
	return lipgloss.Place(m.Width, m.Height, lipgloss.Center, lipgloss.Center, box)
}
