// Package keys is the workstation's one key map (DESIGN §13). Components match keys against
// it and the footer and help overlay render it, so a key and its help never disagree.
package keys

import "charm.land/bubbles/v2/key"

// KeyMap lists every binding of the workstation.
type KeyMap struct {
	Pause       key.Binding
	Save        key.Binding
	Checkpoints key.Binding
	Next        key.Binding // focus the next pane
	Prev        key.Binding // focus the previous pane
	Up          key.Binding
	Down        key.Binding
	Left        key.Binding
	Right       key.Binding
	Enter       key.Binding
	Reference   key.Binding
	Generate    key.Binding
	Back        key.Binding
	Help        key.Binding
	Quit        key.Binding
	ForceQuit   key.Binding
	Yes         key.Binding
	No          key.Binding
}

// Default is the key map of DESIGN §13.
func Default() KeyMap {
	return KeyMap{
		Pause:       key.NewBinding(key.WithKeys("space"), key.WithHelp("space", "pause/resume")),
		Save:        key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "save checkpoint")),
		Checkpoints: key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "checkpoints")),
		Next:        key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next pane")),
		Prev:        key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous pane")),
		Up:          key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:        key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		Left:        key.NewBinding(key.WithKeys("left", "h"), key.WithHelp("←/h", "previous sample")),
		Right:       key.NewBinding(key.WithKeys("right", "l"), key.WithHelp("→/l", "next sample")),
		Enter:       key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "open")),
		Reference:   key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "mark reference")),
		Generate:    key.NewBinding(key.WithKeys("g"), key.WithHelp("g", "generate")),
		Back:        key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "back")),
		Help:        key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:        key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
		ForceQuit:   key.NewBinding(key.WithKeys("ctrl+c"), key.WithHelp("ctrl+c", "stop and quit")),
		Yes:         key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", "yes")),
		No:          key.NewBinding(key.WithKeys("n", "N", "esc"), key.WithHelp("n", "no")),
	}
}

// ShortHelp is the footer line of the dashboard.
func (k KeyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Pause, k.Save, k.Checkpoints, k.Next, k.Enter, k.Help, k.Quit}
}

// FullHelp is the help overlay, one column per group.
func (k KeyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Pause, k.Save, k.Checkpoints, k.Help, k.Quit, k.ForceQuit},
		{k.Next, k.Prev, k.Up, k.Down, k.Left, k.Right, k.Enter, k.Back},
		{k.Reference, k.Generate},
	}
}

// CheckpointsHelp is the footer line of the checkpoint inspector.
func (k KeyMap) CheckpointsHelp() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.Enter, k.Reference, k.Generate, k.Back, k.Help, k.Quit}
}

// SetupHelp is the footer line of the setup screen.
func (k KeyMap) SetupHelp() []key.Binding {
	return []key.Binding{
		key.NewBinding(key.WithKeys(k.Next.Keys()...), key.WithHelp("tab", "next field")),
		key.NewBinding(key.WithKeys(k.Up.Keys()...), key.WithHelp("↑/↓", "choose")),
		key.NewBinding(key.WithKeys(k.Left.Keys()...), key.WithHelp("←/→", "device")),
		key.NewBinding(key.WithKeys(k.Enter.Keys()...), key.WithHelp("enter", "next / start")),
		key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "quit")),
	}
}

// Short adapts a list of bindings to help.KeyMap for the footer.
type Short []key.Binding

func (s Short) ShortHelp() []key.Binding  { return s }
func (s Short) FullHelp() [][]key.Binding { return [][]key.Binding{s} }
