package tui

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
	"rlhfstation/tui/state"
)

// fixedNow is the injected clock: three minutes after the fixture's run_start.
var fixedNow = time.Date(2025, 3, 1, 12, 3, 0, 0, time.UTC)

// feed returns a channel holding evs; closed unless open is set (a live run keeps it open).
func feed(evs []events.Event, open bool) chan events.Event {
	ch := make(chan events.Event, len(evs)+16)
	for _, e := range evs {
		ch <- e
	}
	if !open {
		close(ch)
	}
	return ch
}

// baseOptions are deterministic options: fixed clock, dark theme, no colour.
func baseOptions(s Session) Options {
	return Options{Session: s, Now: func() time.Time { return fixedNow }, Theme: ThemeDark, NoColor: true}
}

// stopTestMsg ends the program at the end of a test, whatever state it is in.
type stopTestMsg struct{}

// probeMsg runs f on the program's goroutine, between two messages, so that a test reads the
// model without racing the program.
type probeMsg struct {
	f    func(Model)
	done chan struct{}
}

// snap is what a test may read of the model: copied on the program's goroutine.
type snap struct {
	view, raw        string // plain text, and with its escape sequences
	screen           screen
	overlay          overlay
	focus            int
	alert            events.Event
	closed, quitting bool
	paused, stopping bool
	ended            bool
	step             int
	status           string
	samples          int
	checkpoints      int
	selected         state.Checkpoint
	ref              string
	editing, busy    bool
	footer           string
	dark, noColor    bool
}

func snapshot(m Model) snap {
	sel, _ := m.checkpoints.Selected()
	raw := m.View().Content
	r := m.ctx.Run
	return snap{
		view: ansiSeq.ReplaceAllString(raw, ""), raw: raw,
		screen: m.screen, overlay: m.overlay, focus: m.focus, alert: m.alert,
		closed: m.closed, quitting: m.quitting, paused: m.ctx.Paused, stopping: m.ctx.Stopping,
		ended: r.Ended, step: r.Step, status: r.Status, samples: len(r.Samples), checkpoints: len(r.Checkpoints),
		selected: sel, ref: m.checkpoints.Ref(), editing: m.checkpoints.Editing(), busy: m.checkpoints.Busy(),
		footer: m.footer.Message(), dark: m.ctx.Styles.Dark, noColor: m.ctx.Styles.NoColor,
	}
}

// harness runs the real model in a teatest program.
type harness struct {
	t  *testing.T
	tm *teatest.TestModel
}

func start(t *testing.T, opts Options, w, h int) *harness {
	t.Helper()
	hs := &harness{t: t}
	filter := func(tm tea.Model, msg tea.Msg) tea.Msg {
		switch p := msg.(type) {
		case stopTestMsg:
			return tea.QuitMsg{}
		case probeMsg:
			p.f(tm.(Model))
			close(p.done)
			return nil
		}
		return signalFilter(tm, msg)
	}
	hs.tm = teatest.NewTestModel(t, New(opts), teatest.WithInitialTermSize(w, h),
		teatest.WithProgramOptions(tea.WithFilter(filter)))
	t.Cleanup(func() {
		hs.tm.Send(stopTestMsg{})
		hs.tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	})
	return hs
}

// model returns a snapshot of the program's model after every message sent so far.
func (hs *harness) model() snap {
	hs.t.Helper()
	var s snap
	done := make(chan struct{})
	hs.tm.Send(probeMsg{f: func(m Model) { s = snapshot(m) }, done: done})
	select {
	case <-done:
		return s
	case <-time.After(5 * time.Second):
		hs.t.Fatal("the program did not answer a probe within 5s")
	}
	return s
}

// waitFor polls the model until cond holds.
func (hs *harness) waitFor(what string, cond func(snap) bool) snap {
	hs.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := hs.model()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			hs.t.Fatalf("timed out waiting for %s; screen:\n%s", what, s.view)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loaded waits until every event of a closed feed is on screen.
func (hs *harness) loaded() snap {
	return hs.waitFor("all events", func(s snap) bool { return s.closed })
}

func (hs *harness) key(keys ...string) {
	for _, k := range keys {
		hs.tm.Send(keyMsg(k))
	}
}

// keyMsg builds the key press bubbletea sends for a key name.
func keyMsg(k string) tea.KeyPressMsg {
	switch k {
	case "space":
		return tea.KeyPressMsg{Code: tea.KeySpace, Text: " "}
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "left":
		return tea.KeyPressMsg{Code: tea.KeyLeft}
	case "right":
		return tea.KeyPressMsg{Code: tea.KeyRight}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	r := []rune(k)
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

var ansiSeq = regexp.MustCompile(`\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)`)

// finishedRun is the recorded run of the tests: 60 steps of the math preset, completed.
func finishedRun() []events.Event { return fixture.Events(fixture.Options{}) }

func contains(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("screen lacks %q:\n%s", w, s)
		}
	}
}

var teatestTimeout = teatest.WithFinalTimeout(5 * time.Second)

func windowSize(w, h int) tea.WindowSizeMsg { return tea.WindowSizeMsg{Width: w, Height: h} }

func itoa(n int) string { return strconv.Itoa(n) }

// colourSGR matches an SGR sequence that sets a foreground or background colour.
var colourSGR = regexp.MustCompile(`\x1b\[(?:[0-9;]*;)?(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])(?:;[0-9;]*)?m`)

// fixedText is an inspector report that is the same at every width.
func fixedText(s string) func(int) string { return func(int) string { return s } }
