// Package tui is the rlhfstation workstation (DESIGN §13): the setup screen, the live
// dashboard, the checkpoint inspector and the help overlay, composed from one component per
// sub-package. It never calls into the engine directly: it reads run events from a channel
// and drives the run through the small Controller interface, always from commands, so that a
// slow engine never blocks the screen.
package tui

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"rlhfstation/engine/events"
	"rlhfstation/engine/runs"
	"rlhfstation/tui/alerts"
	"rlhfstation/tui/charts"
	"rlhfstation/tui/checkpoints"
	"rlhfstation/tui/context"
	"rlhfstation/tui/footer"
	"rlhfstation/tui/header"
	"rlhfstation/tui/help"
	"rlhfstation/tui/ntl"
	"rlhfstation/tui/perplexity"
	"rlhfstation/tui/samples"
	"rlhfstation/tui/setup"
	"rlhfstation/tui/styles"
)

// Controller drives a live run. Each call may block for a while (a save writes files); the
// dashboard calls them from commands. Stop asks the engine to save a checkpoint and end the
// run; the engine then emits run_end (or closes the events channel).
type Controller interface {
	Pause() error
	Resume() error
	SaveNow() error
	Stop() error
}

// Session is a run to show: its events, and a controller when it is live.
type Session struct {
	Events  <-chan events.Event
	Control Controller // nil for a replay: pause and save then say "replay: not a live run"
	RunDir  string     // the run folder; the inspector adds the checkpoints found in it
	// Detached: the run is another process's, steered through its control file (watch):
	// quitting the dashboard leaves it running, and only q then y stops it.
	Detached bool
}

// Theme picks the palette.
type Theme int

const (
	ThemeAuto  Theme = iota // ask the terminal for its background colour
	ThemeDark               // light text on a dark background
	ThemeLight              // dark text on a light background
)

// Options configure the workstation.
type Options struct {
	Session // the run to show; leave Events nil and set Setup to start on the setup screen

	// Setup lists the choices of the setup screen. When the user starts, Start is called (in a
	// command) with the settings; with Start nil the app quits and Chosen reports them.
	Setup *setup.Choices
	Start func(setup.Settings) (Session, error)

	Inspect  checkpoints.InspectFunc  // health report of a checkpoint against a reference
	Generate checkpoints.GenerateFunc // a completion from a checkpoint

	Now     func() time.Time // the clock for elapsed and ETA; time.Now when nil
	Theme   Theme
	NoColor bool // no colour escapes (set it from styles.NoColorEnv() to honour NO_COLOR)
}

// MinWidth and MinHeight are the smallest terminal the dashboard lays out in.
const (
	MinWidth  = 80
	MinHeight = 24
)

type screen int

const (
	screenSetup screen = iota
	screenDashboard
	screenCheckpoints
)

type overlay int

const (
	overlayNone overlay = iota
	overlayHelp
	overlayAlert
	overlayQuit
)

// pane focus order on the dashboard: only these take keys.
const (
	focusAlerts = iota
	focusSamples
	focusCount
)

// Messages.
type (
	eventsMsg struct {
		events []events.Event
		closed bool
	}
	controlMsg struct {
		action string // pause, resume, save, stop
		err    error
	}
	sessionMsg struct {
		session Session
		err     error
	}
	tickMsg   time.Time
	signalMsg struct{} // SIGINT/SIGTERM, turned into a clean stop by the program filter
)

// eventBatch bounds how many queued events one message carries, so a replay of a long run
// reaches the screen in a few hundred updates instead of one per event.
const eventBatch = 512

// Model is the workstation's bubbletea model.
type Model struct {
	ctx  *context.Context
	opts Options

	screen  screen
	overlay overlay
	alert   events.Event
	focus   int

	header      header.Model
	footer      footer.Model
	ppl         perplexity.Model
	ntl         ntl.Model
	kl          charts.Model
	reward      charts.Model
	entropy     charts.Model // in place of perplexity for other tools' runs
	length      charts.Model // in place of NTL for other tools' runs
	alerts      alerts.Model
	samples     samples.Model
	checkpoints checkpoints.Model
	setup       setup.Model
	help        help.Model

	session  Session
	closed   bool // the events channel closed
	quitting bool // tea.Quit was returned by us
	// interrupted: the session ended on ctrl+c or a signal (exit status 130), not on q.
	interrupted bool
	chosen      *setup.Settings
	dark        bool
}

// New builds the workstation.
func New(opts Options) Model {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dark := opts.Theme != ThemeLight
	ctx := context.New(styles.New(dark, opts.NoColor))
	ctx.Now = opts.Now
	m := Model{ctx: ctx, opts: opts, dark: dark}
	m.header = header.New(ctx)
	m.footer = footer.New(ctx)
	m.ppl = perplexity.New(ctx)
	m.ntl = ntl.New(ctx)
	m.kl = charts.KL(ctx)
	m.reward = charts.Reward(ctx)
	m.entropy = charts.Entropy(ctx)
	m.length = charts.Length(ctx)
	m.alerts = alerts.New(ctx)
	m.samples = samples.New(ctx)
	m.checkpoints = checkpoints.New(ctx, opts.Inspect, opts.Generate)
	m.help = help.New(ctx)
	m.alerts.Focus()
	if opts.Setup != nil && opts.Events == nil {
		m.screen = screenSetup
		m.setup = setup.New(ctx, *opts.Setup)
		m.footer.SetKeys(ctx.Keys.SetupHelp())
	} else {
		m.screen = screenDashboard
		m.attach(opts.Session)
	}
	return m
}

// attach starts showing a session.
func (m *Model) attach(s Session) {
	m.session = s
	m.ctx.Live = s.Control != nil
	m.scanFolder()
	m.footer.SetKeys(m.ctx.Keys.ShortHelp())
}

// scanFolder adds the checkpoints found in the run folder to the inspector's list.
func (m *Model) scanFolder() {
	if m.session.RunDir == "" {
		return
	}
	cps, err := runs.Checkpoints(m.session.RunDir)
	if err != nil {
		m.footer.Flash(err.Error(), true)
		return
	}
	for _, c := range cps {
		m.ctx.Run.AddFolderCheckpoint(c.Path, c.Step)
	}
	m.checkpoints.Sync()
}

// Chosen returns the settings picked on the setup screen when no Start function was given.
func (m Model) Chosen() (setup.Settings, bool) {
	if m.chosen == nil {
		return setup.Settings{}, false
	}
	return *m.chosen, true
}

// Active reports whether a live run is attached and has not ended.
func (m Model) Active() bool {
	return m.ctx.Live && !m.ctx.Run.Ended && !m.closed
}

// Init starts reading events, the clock and the background-colour query.
func (m Model) Init() tea.Cmd {
	var cmds []tea.Cmd
	if m.opts.Theme == ThemeAuto {
		cmds = append(cmds, tea.RequestBackgroundColor)
	}
	if m.screen != screenSetup {
		cmds = append(cmds, m.waitEvents(), tick())
	}
	return tea.Batch(cmds...)
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// waitEvents reads the next events: it blocks for one, then takes what else is queued.
func (m Model) waitEvents() tea.Cmd {
	ch := m.session.Events
	if ch == nil {
		return nil
	}
	return func() tea.Msg {
		e, ok := <-ch
		if !ok {
			return eventsMsg{closed: true}
		}
		batch := []events.Event{e}
		for len(batch) < eventBatch {
			select {
			case e, ok := <-ch:
				if !ok {
					return eventsMsg{events: batch, closed: true}
				}
				batch = append(batch, e)
			default:
				return eventsMsg{events: batch}
			}
		}
		return eventsMsg{events: batch}
	}
}

func (m *Model) quit() tea.Cmd {
	m.quitting = true
	return tea.Quit
}

// stop asks the engine to save a checkpoint and end the run; the app quits at run_end.
func (m *Model) stop() tea.Cmd {
	m.overlay = overlayNone
	m.ctx.Stopping = true
	m.footer.Flash("stopping: saving a checkpoint, then quitting (ctrl+c again quits at once)", false)
	return m.control("stop", m.session.Control.Stop)
}

// interrupt is ctrl+c, SIGINT and SIGTERM: a live run is stopped (it saves a checkpoint
// first), anything else quits at once.
func (m *Model) interrupt() tea.Cmd {
	m.interrupted = true
	if m.Active() && !m.ctx.Stopping && !m.session.Detached {
		return m.stop()
	}
	return m.quit()
}

// Interrupted reports whether the user ended the session with ctrl+c (or a signal), which a
// shell expects to see as exit status 130, rather than with q.
func (m Model) Interrupted() bool { return m.interrupted }

// Update handles a message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.ctx.Width, m.ctx.Height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tea.BackgroundColorMsg:
		if m.opts.Theme == ThemeAuto {
			m.dark = msg.IsDark()
			m.ctx.Styles = styles.New(m.dark, m.opts.NoColor)
			m.checkpoints.Restyle()
		}
		return m, nil
	case eventsMsg:
		return m.onEvents(msg)
	case tickMsg:
		if m.ctx.Run.Ended || m.quitting || m.session.Events == nil {
			return m, nil
		}
		return m, tick()
	case controlMsg:
		return m.onControl(msg)
	case signalMsg:
		cmd := m.interrupt()
		return m, cmd
	case setup.StartMsg:
		if m.opts.Start == nil {
			s := msg.Settings
			m.chosen = &s
			cmd := m.quit()
			return m, cmd
		}
		m.setup.SetBusy(true)
		start := m.opts.Start
		return m, func() tea.Msg {
			s, err := start(msg.Settings)
			return sessionMsg{s, err}
		}
	case setup.QuitMsg:
		cmd := m.quit()
		return m, cmd
	case sessionMsg:
		if msg.err != nil {
			m.setup.SetError(msg.err)
			return m, nil
		}
		m.attach(msg.session)
		m.screen = screenDashboard
		m.layout()
		return m, tea.Batch(m.waitEvents(), tick())
	case tea.KeyPressMsg:
		return m.onKey(msg)
	}
	// Anything else (command results, spinner ticks, paste) belongs to the inspector or setup.
	var cmd tea.Cmd
	switch m.screen {
	case screenSetup:
		cmd = m.setup.Update(msg)
	default:
		cmd = m.checkpoints.Update(msg)
	}
	return m, cmd
}

func (m Model) onEvents(msg eventsMsg) (tea.Model, tea.Cmd) {
	for _, e := range msg.events {
		m.ctx.Run.Apply(e)
		switch e.Type {
		case events.Checkpoint:
			if m.ctx.Run.Source == "" { // another tool's checkpoints are found on disk, not saved now
				m.footer.Flash(fmt.Sprintf("checkpoint saved at step %d: %s", e.Step, filepath.Join(filepath.Base(filepath.Dir(e.Path)), filepath.Base(e.Path))), false)
			}
		case events.RunEnd:
			s := "run " + e.Status
			if e.Reason != "" {
				s += ": " + e.Reason
			}
			m.footer.Flash(s, e.Status == "failed")
		case events.Log:
			// A steering request took effect: the trainer said so.
			switch e.Control {
			case "pause":
				m.ctx.Paused = true
			case "resume":
				m.ctx.Paused = false
			}
			if e.Control != "" {
				m.footer.Flash(e.Time.Local().Format("15:04:05")+" "+e.Message, false)
				break
			}
			// Another tool's run also says what was read and which metrics kept their names.
			if e.Level == "error" || e.Level == "warning" || e.Level == "warn" || m.ctx.Run.Source != "" {
				m.footer.Flash(e.Message, e.Level == "error")
			}
		}
	}
	if msg.closed {
		m.closed = true
	}
	m.alerts.Sync()
	m.samples.Sync()
	m.checkpoints.Sync()
	if m.ctx.Stopping && (m.ctx.Run.Ended || m.closed) {
		cmd := m.quit()
		return m, cmd
	}
	if m.closed {
		return m, nil
	}
	return m, m.waitEvents()
}

func (m Model) onControl(msg controlMsg) (tea.Model, tea.Cmd) {
	if msg.err != nil {
		if msg.action == "stop" {
			m.ctx.Stopping = false
		}
		m.footer.Flash(msg.action+" failed: "+msg.err.Error(), true)
		return m, nil
	}
	switch msg.action {
	case "pause":
		if m.session.Detached { // paused once the trainer acknowledges it
			m.footer.Flash("pause asked: the trainer holds at its next step boundary…", false)
			break
		}
		m.ctx.Paused = true
		m.footer.Flash("paused: the engine stops after the current step", false)
	case "resume":
		if m.session.Detached {
			m.footer.Flash("resume asked…", false)
			break
		}
		m.ctx.Paused = false
		m.footer.Flash("resumed", false)
	case "save":
		m.footer.Flash("saving a checkpoint…", false)
	case "stop":
		if m.ctx.Run.Ended || m.closed {
			cmd := m.quit()
			return m, cmd
		}
	}
	return m, nil
}

// control runs one controller call in a command.
func (m Model) control(action string, f func() error) tea.Cmd {
	return func() tea.Msg { return controlMsg{action, f()} }
}

// errNotLive is what pause and save say in a replay.
var errNotLive = errors.New("replay: not a live run")

// liveCheck says why a run cannot be driven now ("" when it can).
func (m Model) liveCheck() string {
	switch {
	case !m.ctx.Live:
		return errNotLive.Error()
	case m.ctx.Run.Ended || m.closed:
		return "the run has ended"
	case m.ctx.Stopping:
		return "the run is stopping"
	}
	return ""
}

// View renders the current screen, with an overlay on top when one is open.
func (m Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "rlhfstation"
	if m.ctx.Run.Name != "" {
		v.WindowTitle += " · " + m.ctx.Run.Name
	}
	return v
}

// tooSmall reports a terminal below MinWidth×MinHeight: only the size message is shown.
func (m *Model) tooSmall() bool { return m.ctx.Width < MinWidth || m.ctx.Height < MinHeight }

// TooSmall is the message shown below MinWidth×MinHeight.
func TooSmall(w, h int) string {
	return fmt.Sprintf("rlhfstation needs a terminal of at least %d×%d;\nthis one is %d×%d. Enlarge the window (q quits).",
		MinWidth, MinHeight, w, h)
}

func (m Model) render() string {
	w, h := m.ctx.Width, m.ctx.Height
	if w == 0 || h == 0 {
		return ""
	}
	if m.tooSmall() {
		s := TooSmall(w, h)
		if m.overlay == overlayQuit {
			s += "\n\nStop the run? It saves a checkpoint first. y / n"
		}
		return lipgloss.Place(w, h, lipgloss.Center, lipgloss.Center, lipgloss.NewStyle().Width(min(w, 60)).Render(s))
	}
	var base string
	switch m.screen {
	case screenSetup:
		base = m.setup.View() + "\n" + m.footer.View()
	case screenCheckpoints:
		base = m.header.View() + "\n" + m.checkpoints.View() + "\n" + m.footer.View()
	default:
		base = m.header.View() + "\n" + m.dashboard() + "\n" + m.footer.View()
	}
	base = fitScreen(base, w, h)
	var box string
	switch m.overlay {
	case overlayHelp:
		box = m.help.View()
	case overlayAlert:
		bw := min(w-8, 90)
		body := alerts.Detail(m.ctx.Styles, m.alert, bw-4)
		box = m.ctx.Styles.Box(alerts.Tag(m.alert.Severity)+" · "+m.alert.Rule+" · esc closes",
			lipgloss.NewStyle().Padding(0, 1).Render(body), bw, min(lipgloss.Height(body)+2, h-2), true)
	case overlayQuit:
		body := "Stop the run? The engine saves a checkpoint, then the\nworkstation quits.\n\n" +
			m.ctx.Styles.Key.Render("y") + " stop and quit   " + m.ctx.Styles.Key.Render("n") + " keep running"
		if m.session.Detached {
			body = "Stop the trainer? It saves a checkpoint and stops;\nthe dashboard quits once it has.\n\n" +
				m.ctx.Styles.Key.Render("y") + " stop it   " + m.ctx.Styles.Key.Render("n") + " quit, leave it running   " +
				m.ctx.Styles.Key.Render("esc") + " back"
		}
		box = m.ctx.Styles.Box("quit", lipgloss.NewStyle().Padding(0, 1).Render(body), 60, 7, true)
	}
	if box == "" {
		return base
	}
	bw, bh := lipgloss.Size(box)
	x, y := max((w-bw)/2, 0), max((h-bh)/2, 0)
	return fitScreen(lipgloss.NewCompositor(lipgloss.NewLayer(base), lipgloss.NewLayer(box).X(x).Y(y).Z(1)).Render(), w, h)
}

// fitScreen makes the view exactly w×h so that overlays and the renderer see a full frame.
func fitScreen(s string, w, h int) string {
	lines := styles.Fit(s, w, h)
	out := lines[0]
	for _, l := range lines[1:] {
		out += "\n" + l
	}
	return out
}
