package tui

import (
	"errors"
	"fmt"

	tea "charm.land/bubbletea/v2"
)

// Run shows the workstation on the terminal until the user quits, and returns the final
// model. The terminal is restored on every exit path: bubbletea restores it when Update, View
// or a command panics (Run then returns an error wrapping tea.ErrProgramPanic), and a panic
// anywhere else in the program's goroutine is caught here, the terminal restored by killing
// the program, and returned as an error. SIGINT and SIGTERM stop a live run cleanly (save,
// then quit) instead of dropping it. opts are passed to tea.NewProgram after the defaults
// (tests add input, output and size).
func Run(m Model, opts ...tea.ProgramOption) (final Model, err error) {
	p := tea.NewProgram(m, append([]tea.ProgramOption{tea.WithFilter(signalFilter)}, opts...)...)
	defer func() {
		if r := recover(); r != nil {
			p.Kill()
			final, err = m, fmt.Errorf("workstation: %v", r)
		}
	}()
	out, err := p.Run()
	if fm, ok := out.(Model); ok {
		final = fm
	} else {
		final = m
	}
	return final, err
}

// signalFilter turns SIGINT (tea.InterruptMsg: ctrl+c when input is not a terminal, or
// kill -INT) and SIGTERM (a tea.QuitMsg the model did not ask for) into a clean stop while a
// live run is active. Once stopping, a second signal goes through and quits at once.
func signalFilter(tm tea.Model, msg tea.Msg) tea.Msg {
	m, ok := tm.(Model)
	if !ok || !m.Active() || m.ctx.Stopping {
		return msg
	}
	switch msg.(type) {
	case tea.InterruptMsg:
		return signalMsg{}
	case tea.QuitMsg:
		if !m.quitting {
			return signalMsg{}
		}
	}
	return msg
}

// Interrupted reports whether err says the program ended on SIGINT (exit status 130).
func Interrupted(err error) bool { return errors.Is(err, tea.ErrInterrupted) }
