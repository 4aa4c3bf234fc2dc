package tui

// Key routing: which part of the workstation a key press goes to, in order.

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"rlhfstation/tui/component"
)

// onKey routes a key press: the keys that work everywhere, then an open overlay's, then the
// screen's; on the dashboard what the screen does not use goes to the focused pane.
func (m Model) onKey(k tea.KeyPressMsg) (tea.Model, tea.Cmd) {
	cmd := m.routeKey(k)
	return m, cmd
}

func (m *Model) routeKey(k tea.KeyPressMsg) tea.Cmd {
	if key.Matches(k, m.ctx.Keys.ForceQuit) {
		return m.interrupt()
	}
	if m.tooSmall() && m.overlay != overlayQuit {
		return m.keyTooSmall(k)
	}
	if m.overlay != overlayNone {
		if cmd, done := m.overlayKey(k); done {
			return cmd
		}
	}
	switch m.screen {
	case screenSetup:
		return m.setup.Update(k)
	case screenCheckpoints:
		return m.checkpointsKey(k)
	}
	return m.dashboardKey(k)
}

// keyTooSmall: with only the size message on screen, only quitting works (asking first
// during a live run).
func (m *Model) keyTooSmall(k tea.KeyPressMsg) tea.Cmd {
	switch {
	case !key.Matches(k, m.ctx.Keys.Quit):
	case m.Active() && !m.ctx.Stopping:
		m.overlay = overlayQuit
	default:
		return m.quit()
	}
	return nil
}

// overlayKey handles a key while an overlay is open. done is false when the key closed the
// overlay and still goes to the screen: q closes help or an alert, then quits as it does there.
func (m *Model) overlayKey(k tea.KeyPressMsg) (cmd tea.Cmd, done bool) {
	keys := m.ctx.Keys
	switch m.overlay {
	case overlayQuit:
		switch {
		case key.Matches(k, keys.Yes) && m.Active():
			return m.stop(), true
		case key.Matches(k, keys.Yes):
			return m.quit(), true
		case m.session.Detached && key.Matches(k, keys.Back):
			m.overlay = overlayNone
		case m.session.Detached && key.Matches(k, keys.No):
			return m.quit(), true
		case key.Matches(k, keys.No), key.Matches(k, keys.Quit):
			m.overlay = overlayNone
		}
		return nil, true
	case overlayHelp, overlayAlert:
		closers := []key.Binding{keys.Help, keys.Back}
		if m.overlay == overlayAlert {
			closers = []key.Binding{keys.Back, keys.Enter}
		}
		if key.Matches(k, closers...) {
			m.overlay = overlayNone
			return nil, true
		}
		if !key.Matches(k, keys.Quit) {
			return nil, true
		}
		m.overlay = overlayNone
	}
	return nil, false
}

// runKey handles the keys that act on the run on the dashboard and in the inspector: quit,
// help, pause/resume and save. ok is false for any other key.
func (m *Model) runKey(k tea.KeyPressMsg) (cmd tea.Cmd, ok bool) {
	keys := m.ctx.Keys
	switch {
	case key.Matches(k, keys.Quit):
		m.footer.Clear()
		if m.Active() && !m.ctx.Stopping {
			m.overlay = overlayQuit
			return nil, true
		}
		return m.quit(), true
	case key.Matches(k, keys.Help):
		m.overlay = overlayHelp
		return nil, true
	case key.Matches(k, keys.Pause):
		if why := m.liveCheck(); why != "" {
			m.footer.Flash(why, false)
			return nil, true
		}
		if m.ctx.Paused {
			m.footer.Flash("resuming…", false)
			return m.control("resume", m.session.Control.Resume), true
		}
		m.footer.Flash("pausing…", false)
		return m.control("pause", m.session.Control.Pause), true
	case key.Matches(k, keys.Save):
		if why := m.liveCheck(); why != "" {
			m.footer.Flash(why, false)
			return nil, true
		}
		m.footer.Flash("asking the engine to save a checkpoint…", false)
		return m.control("save", m.session.Control.SaveNow), true
	}
	return nil, false
}

// checkpointsKey: the inspector's prompt takes every key while it is open; esc or c goes back
// to the dashboard; the run's keys work as on the dashboard; the inspector takes the rest.
func (m *Model) checkpointsKey(k tea.KeyPressMsg) tea.Cmd {
	keys := m.ctx.Keys
	if !m.checkpoints.Editing() {
		if key.Matches(k, keys.Back, keys.Checkpoints) {
			m.screen = screenDashboard
			m.footer.SetKeys(keys.ShortHelp())
			return nil
		}
		if cmd, ok := m.runKey(k); ok {
			return cmd
		}
	}
	return m.checkpoints.Update(k)
}

// dashboardKey: the run's keys, the inspector (c), the focus (tab), the alert overlay (enter
// on the alerts); the focused pane takes the rest.
func (m *Model) dashboardKey(k tea.KeyPressMsg) tea.Cmd {
	if cmd, ok := m.runKey(k); ok {
		return cmd
	}
	keys := m.ctx.Keys
	switch {
	case key.Matches(k, keys.Checkpoints):
		m.screen = screenCheckpoints
		m.scanFolder()
		m.footer.SetKeys(keys.CheckpointsHelp())
		m.footer.Clear()
		m.layout()
		return nil
	case key.Matches(k, keys.Next):
		m.setFocus(m.focus + 1)
		return nil
	case key.Matches(k, keys.Prev):
		m.setFocus(m.focus - 1)
		return nil
	case key.Matches(k, keys.Reference, keys.Generate):
		m.footer.Flash("open the checkpoints (c) to mark a reference or generate", false)
		return nil
	case m.focus == focusAlerts && key.Matches(k, keys.Enter):
		if e, ok := m.alerts.Selected(); ok {
			m.alert, m.overlay = e, overlayAlert
		}
		return nil
	}
	return m.focusable()[m.focus].Update(k)
}

// focusable are the dashboard panes that take keys, in focus order.
func (m *Model) focusable() [focusCount]component.Interactive {
	return [focusCount]component.Interactive{focusAlerts: &m.alerts, focusSamples: &m.samples}
}

func (m *Model) setFocus(f int) {
	m.focus = (f + focusCount) % focusCount
	for i, p := range m.focusable() {
		if i == m.focus {
			p.Focus()
		} else {
			p.Blur()
		}
	}
}
