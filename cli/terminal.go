package cli

import (
	"os"

	tea "charm.land/bubbletea/v2"
)

// isTerminal reports whether a command's stream is a terminal (a character device).
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// tuiStreams makes the TUI draw on the command's stdout and read keys from its stdin. When
// stdin is not a terminal (replay with input redirected), bubbletea is left to open the
// controlling terminal itself, as it does by default.
func tuiStreams(s streams) []tea.ProgramOption {
	opts := []tea.ProgramOption{tea.WithOutput(s.stdout)}
	if isTerminal(s.stdin) {
		opts = append(opts, tea.WithInput(s.stdin))
	}
	return opts
}
