// Package context is the state every TUI component shares: the terminal size, the styles and
// key map, the run being shown and the clock. The app owns one and hands its pointer to each
// component, so a theme change or a new event is seen by all of them at once.
package context

import (
	"time"

	"rlhfstation/tui/keys"
	"rlhfstation/tui/state"
	"rlhfstation/tui/styles"
)

// Context is shared by pointer between the app and its components.
type Context struct {
	Width, Height int
	Styles        styles.Styles
	Keys          keys.KeyMap
	Run           *state.Run
	Now           func() time.Time // injectable so that elapsed and ETA are testable
	Live          bool             // a controller is attached (not a replay)
	Paused        bool             // the engine confirmed a pause
	Stopping      bool             // a stop was asked for; waiting for run_end
}

// New returns a context with the default key map, an empty run and the wall clock.
func New(st styles.Styles) *Context {
	return &Context{Styles: st, Keys: keys.Default(), Run: state.New(), Now: time.Now}
}
