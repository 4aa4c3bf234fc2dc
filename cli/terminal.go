package cli

import (
	"os"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
)

// isTerminal reports whether a command's stream is a terminal: one that answers the terminal
// ioctl, not any character device (/dev/null is one, and `replay RUN > /dev/null` must not
// start the TUI).
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(f.Fd())
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
