package tui

import (
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/exp/teatest/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
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

// pingMsg lets a test observe the model after every message sent before it.
type pingMsg struct{ id int }

// harness runs the real model in a teatest program and captures the model the program holds.
type harness struct {
	t  *testing.T
	tm *teatest.TestModel

	mu     sync.Mutex
	latest Model
	seen   int
	next   int
}

func start(t *testing.T, opts Options, w, h int) *harness {
	t.Helper()
	hs := &harness{t: t}
	filter := func(tm tea.Model, msg tea.Msg) tea.Msg {
		if _, ok := msg.(stopTestMsg); ok {
			return tea.QuitMsg{}
		}
		if p, ok := msg.(pingMsg); ok {
			hs.mu.Lock()
			hs.latest, hs.seen = tm.(Model), p.id
			hs.mu.Unlock()
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

// model returns the program's model after every message sent so far has been handled.
func (hs *harness) model() Model {
	hs.t.Helper()
	hs.next++
	id := hs.next
	hs.tm.Send(pingMsg{id})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		hs.mu.Lock()
		m, seen := hs.latest, hs.seen
		hs.mu.Unlock()
		if seen >= id {
			return m
		}
		time.Sleep(2 * time.Millisecond)
	}
	hs.t.Fatal("the program did not answer a ping within 5s")
	return Model{}
}

// waitFor polls the model until cond holds.
func (hs *harness) waitFor(what string, cond func(Model) bool) Model {
	hs.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := hs.model()
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			hs.t.Fatalf("timed out waiting for %s; screen:\n%s", what, plainView(m))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loaded waits until every event of a closed feed is on screen.
func (hs *harness) loaded() Model {
	return hs.waitFor("all events", func(m Model) bool { return m.closed })
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
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	r := []rune(k)
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

var ansiSeq = regexp.MustCompile(`\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)`)

// plainView is the model's view as plain text: escape sequences (bold, reverse) removed.
func plainView(m Model) string {
	return ansiSeq.ReplaceAllString(m.View().Content, "")
}

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
