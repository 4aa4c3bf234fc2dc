// Package component is what the pieces of the workstation's screen have in common, after
// soft-serve's Component and gh-dash's shared context: the interfaces the app lays out and
// routes keys through, and Base, which every component embeds for the shared context, the
// size it was given, whether it has the keyboard, and its frame.
package component

import (
	tea "charm.land/bubbletea/v2"

	"rlhfstation/tui/context"
)

// Component is a piece of the screen: it is told its size and draws itself in it.
type Component interface {
	SetSize(width, height int)
	View() string
}

// Interactive is a component that takes keys (and the results of its own commands): the app
// sends a key to the focused one after the keys of the screen.
type Interactive interface {
	Component
	Focus()
	Blur()
	Focused() bool
	Update(msg tea.Msg) tea.Cmd
}

// Base is embedded by every component.
type Base struct {
	Ctx           *context.Context // shared with the app and every other component
	Width, Height int              // the outer size, frame included
	focused       bool
}

// New returns a base drawing from ctx.
func New(ctx *context.Context) Base { return Base{Ctx: ctx} }

// SetSize sets the component's outer size.
func (b *Base) SetSize(width, height int) { b.Width, b.Height = width, height }

// Focus and Blur give the keyboard to the component and take it back.
func (b *Base) Focus() { b.focused = true }
func (b *Base) Blur()  { b.focused = false }

// Focused reports whether the component has the keyboard.
func (b Base) Focused() bool { return b.focused }

// Frame draws the component's box at its size, titled, around body(inner width, inner height),
// highlighted while it has the focus; "" when it is too small for a frame.
func (b Base) Frame(title string, body func(w, h int) string) string {
	if b.Width < 4 || b.Height < 2 {
		return ""
	}
	return b.Ctx.Styles.Box(title, body(b.Width-2, b.Height-2), b.Width, b.Height, b.focused)
}
