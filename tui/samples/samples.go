// Package samples is the pane of sample completions: the latest prompt and completion (a
// multi-turn episode's turns) with each reward and the advantage, in a scrollable viewport; left and right step through the
// batch and back through earlier steps.
package samples

import (
	"fmt"
	"sort"
	"strings"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
)

// Model is the samples pane.
type Model struct {
	component.Base
	vp       viewport.Model
	abs, idx int  // shown samples event (its number among all samples events) and sample within it
	pinned   bool // the user picked a sample: new batches do not replace it
}

// New returns the pane.
func New(ctx *context.Context) Model {
	return Model{Base: component.New(ctx), vp: viewport.New(), abs: -1}
}

// SetSize sets the pane's outer size.
func (m *Model) SetSize(w, h int) {
	m.Base.SetSize(w, h)
	m.vp.SetWidth(max(w-2, 1))
	m.vp.SetHeight(max(h-2-headerLines, 1))
	m.refresh(false)
}

// headerLines are the fixed lines above the viewport: step and rewards.
const headerLines = 2

// Sync follows the newest batch unless the user pinned a sample.
func (m *Model) Sync() {
	r := m.Ctx.Run
	if len(r.Samples) == 0 {
		return
	}
	if !m.pinned && m.abs != r.SamplesSeen-1 {
		m.abs, m.idx = r.SamplesSeen-1, 0
		m.refresh(true)
		return
	}
	if m.ev() < 0 { // the pinned batch was dropped from memory: show the oldest kept
		m.abs, m.idx = r.SamplesSeen-len(r.Samples), 0
	}
	m.refresh(false)
}

// ev is the index of the shown batch in Run.Samples (negative once dropped).
func (m Model) ev() int { return m.abs - (m.Ctx.Run.SamplesSeen - len(m.Ctx.Run.Samples)) }

// Current returns the shown sample and its step.
func (m Model) Current() (events.Sample, int, bool) {
	ss, ev := m.Ctx.Run.Samples, m.ev()
	if ev < 0 || ev >= len(ss) || len(ss[ev].Samples) == 0 {
		return events.Sample{}, 0, false
	}
	e := ss[ev]
	return e.Samples[min(m.idx, len(e.Samples)-1)], e.Step, true
}

// Update handles the pane's keys: up/down scroll, left/right (and enter) change sample.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	k, ok := msg.(tea.KeyPressMsg)
	if !ok {
		return nil
	}
	keys := m.Ctx.Keys
	ss, ev := m.Ctx.Run.Samples, m.ev()
	switch {
	case key.Matches(k, keys.Up):
		m.vp.ScrollUp(1)
	case key.Matches(k, keys.Down):
		m.vp.ScrollDown(1)
	case key.Matches(k, keys.Right, keys.Enter):
		if ev >= 0 && ev < len(ss) {
			switch {
			case m.idx+1 < len(ss[ev].Samples):
				m.idx++
				m.pinned = true
			case ev+1 < len(ss):
				m.abs, m.idx = m.abs+1, 0
				m.pinned = true
			default: // past the newest sample: follow new batches again
				m.pinned = false
			}
			m.refresh(true)
		}
	case key.Matches(k, keys.Left):
		if m.idx > 0 {
			m.idx--
		} else if ev > 0 {
			m.abs--
			m.idx = max(len(ss[ev-1].Samples)-1, 0)
		}
		m.pinned = true
		m.refresh(true)
	}
	return nil
}

// refresh rebuilds the viewport's text; top scrolls it back to the start.
func (m *Model) refresh(top bool) {
	s, _, ok := m.Current()
	if !ok {
		m.vp.SetContent("")
		return
	}
	st := m.Ctx.Styles
	w := max(m.Width-2, 1)
	var b strings.Builder
	section := func(label, text string) {
		if text == "" {
			return
		}
		b.WriteString(st.Title.Render(label))
		b.WriteString("\n")
		b.WriteString(lipgloss.Wrap(text, w, " "))
		b.WriteString("\n")
	}
	if len(s.Turns) > 0 {
		writeTurns(&b, st, w, s)
	} else {
		section("prompt", s.Prompt)
		section("completion", s.Completion)
	}
	if s.Answer != "" {
		section("answer", s.Answer)
	}
	m.vp.SetContent(strings.TrimRight(b.String(), "\n"))
	if top {
		m.vp.GotoTop()
	}
}

// Title names the pane with the shown step and sample.
func (m Model) Title() string {
	if _, step, ok := m.Current(); ok {
		t := fmt.Sprintf("samples · step %d · %d/%d", step, m.idx+1, len(m.Ctx.Run.Samples[m.ev()].Samples))
		if m.pinned {
			t += " · pinned"
		}
		return t
	}
	return "samples"
}

// number prints v with format, or "—" when it is unknown (NaN).
func number(v float64, format string) string {
	if v != v {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// View renders the framed pane.
func (m Model) View() string {
	return m.Frame(m.Title(), func(w, _ int) string {
		st := m.Ctx.Styles
		s, _, ok := m.Current()
		if !ok {
			r := m.Ctx.Run
			if r.Source != "" && r.SamplesFrom == "" {
				// Another tool's run that logged none: say so, and how it could.
				return st.Muted.Render(lipgloss.Wrap("this run logged no completions (TRL: log_completions=True "+
					"writes completions/*.parquet; verl: trainer.rollout_data_dir; OpenRLHF logs one sample a "+
					"step to TensorBoard)", w, " "))
			}
			return st.Muted.Render("no samples yet")
		}
		head := st.Muted.Render("reward ") + st.Bold.Render(number(s.Reward, "%.3f"))
		if s.Advantage == s.Advantage { // other tools' tables may not carry it (NaN)
			head += st.Muted.Render("  advantage ") + number(s.Advantage, "%+.3f")
		}
		names := make([]string, 0, len(s.Rewards))
		for k := range s.Rewards {
			names = append(names, k)
		}
		sort.Strings(names)
		var per []string
		for _, k := range names {
			per = append(per, st.Muted.Render(k+" ")+fmt.Sprintf("%.2f", s.Rewards[k]))
		}
		return head + "\n" + strings.Join(per, st.Muted.Render(" · ")) + "\n" + m.vp.View()
	})
}
