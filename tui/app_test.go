package tui

import (
	"errors"
	"fmt"
	"image/color"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/exp/golden"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
	"rlhfstation/tui/setup"
)

// fakeCtl is a Controller that records calls and answers like an engine would: a save emits a
// checkpoint event, a stop emits a checkpoint and run_end and closes the stream.
type fakeCtl struct {
	mu    sync.Mutex
	calls []string
	ch    chan events.Event
	step  int
	run   string
}

func (f *fakeCtl) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeCtl) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCtl) checkpoint() events.Event {
	return events.Event{Type: events.Checkpoint, Step: f.step, Time: fixedNow,
		Path: "runs/" + f.run + "/checkpoints/step-000030", Health: &events.Health{Score: 0.91}}
}

func (f *fakeCtl) Pause() error  { f.record("pause"); return nil }
func (f *fakeCtl) Resume() error { f.record("resume"); return nil }
func (f *fakeCtl) SaveNow() error {
	f.record("save")
	f.ch <- f.checkpoint()
	return nil
}
func (f *fakeCtl) Stop() error {
	f.record("stop")
	f.ch <- f.checkpoint()
	f.ch <- events.Event{Type: events.RunEnd, Time: fixedNow, Step: f.step, Status: "stopped", Reason: "stopped by the user"}
	close(f.ch)
	return nil
}

// liveRun is a run at step 30 of 60, still going, driven by a fake controller.
func liveRun() (Session, *fakeCtl) {
	o := fixture.Options{Steps: 30, TotalSteps: 60, Live: true}
	ch := feed(fixture.Events(o), true)
	ctl := &fakeCtl{ch: ch, step: 30, run: fixture.RunName(o)}
	return Session{Events: ch, Control: ctl}, ctl
}

func waitCalls(t *testing.T, ctl *fakeCtl, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Join(ctl.Calls(), ",") == strings.Join(want, ",") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("controller calls = %v, want %v", ctl.Calls(), want)
}

func TestGoldenViews(t *testing.T) {
	cases := []struct {
		name string
		w, h int
		live bool
		keys []string
	}{
		{"dashboard_80x24", 80, 24, false, nil},
		{"dashboard_160x48", 160, 48, false, nil},
		{"live_dashboard_120x36", 120, 36, true, nil},
		{"inspector_80x24", 80, 24, false, []string{"c"}},
		{"inspector_160x48", 160, 48, false, []string{"c", "up"}},
		{"help_80x24", 80, 24, false, []string{"?"}},
		{"alert_100x30", 100, 30, false, []string{"down", "enter"}},
		{"too_small_79x24", 79, 24, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var hs *harness
			var m snap
			if c.live {
				s, _ := liveRun()
				hs = start(t, baseOptions(s), c.w, c.h)
				m = hs.waitFor("step 30", func(m snap) bool { return m.step == 30 && m.samples == 3 })
			} else {
				hs = start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), c.w, c.h)
				m = hs.loaded()
			}
			if len(c.keys) > 0 {
				hs.key(c.keys...)
				m = hs.model()
			}
			v := m.view
			checkFrame(t, v, c.w, c.h)
			golden.RequireEqual(t, []byte(v))
		})
	}
}

// checkFrame asserts the view is exactly w×h cells.
func checkFrame(t *testing.T, v string, w, h int) {
	t.Helper()
	lines := strings.Split(v, "\n")
	if len(lines) != h {
		t.Errorf("view has %d lines, want %d", len(lines), h)
	}
	for i, l := range lines {
		if lw := lipgloss.Width(l); lw != w {
			t.Errorf("line %d is %d cells wide, want %d: %q", i, lw, w, l)
		}
	}
}

func TestDashboardContent(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 160, 48)
	v := hs.loaded().view
	contains(t, v,
		"run 20250301-120000-math", "model models/qwen2-0.5b", "cuda:0", "step 60/60", "100%",
		"elapsed 2m33s", "1,508 tok/s", "gpu 20.1 GiB", "✓ completed",
		"word         39.60    42.00   +5.7%", "aggregate    52.38    55.27   +5.2%", "+4.6%: better than baseline",
		"digit accuracy    77.3% ↑", "digits seen       5,880 (3,901 right)",
		"KL divergence", "max 0.3300", "alert > 0.30", "── mean", "std",
		"alerts · 1 critical · 2 warning · 1 info",
		"samples · step 60 · 1/4", "reward 0.820", "#### 48",
		"run completed: reached the last step")
	// Alerts newest first: critical (step 50) above the warnings and the info (step 12).
	if strings.Index(v, "CRIT s50") > strings.Index(v, "WARN s45") || strings.Index(v, "WARN s36") > strings.Index(v, "INFO s12") {
		t.Errorf("alerts are not newest first:\n%s", v)
	}
}

func TestNTLAbsent(t *testing.T) {
	evs := fixture.Events(fixture.Options{Preset: "story"})
	hs := start(t, baseOptions(Session{Events: feed(evs, false)}), 80, 24)
	v := hs.loaded().view
	contains(t, v, "not used by this preset (story)", "preset story")
	if strings.Contains(v, "digit accuracy") {
		t.Errorf("NTL values shown for a preset without NTL:\n%s", v)
	}
}

func TestLiveHeader(t *testing.T) {
	s, _ := liveRun()
	hs := start(t, baseOptions(s), 120, 36)
	m := hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })
	// 30 steps of 2.5 s: the clock says 3 minutes since run_start; 30 steps remain at the
	// recent mean step time (about 2.5 s).
	contains(t, m.view, "step 30/60", " 50%", "elapsed 3m00s", "ETA 1m1", "● running")
}

func TestPauseResumeSave(t *testing.T) {
	s, ctl := liveRun()
	hs := start(t, baseOptions(s), 100, 30)
	hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })

	hs.key("space")
	waitCalls(t, ctl, "pause")
	m := hs.waitFor("paused", func(m snap) bool { return m.paused })
	contains(t, m.view, "❚❚ paused")

	hs.key("space")
	waitCalls(t, ctl, "pause", "resume")
	m = hs.waitFor("resumed", func(m snap) bool { return !m.paused })
	contains(t, m.view, "● running")

	hs.key("s")
	waitCalls(t, ctl, "pause", "resume", "save")
	m = hs.waitFor("the saved checkpoint", func(m snap) bool { return m.checkpoints == 2 })
	contains(t, m.view, "checkpoint saved at step 30: checkpoints/step-000030")

	hs.key("c")
	m = hs.model()
	contains(t, m.view, "checkpoints · 2", "step-000030", "0.91")
}

func TestInspector(t *testing.T) {
	var mu sync.Mutex
	var inspected, generated [][2]string
	opts := baseOptions(Session{Events: feed(finishedRun(), false)})
	opts.Inspect = func(ckpt, ref string) (func(int) string, float64, error) {
		mu.Lock()
		inspected = append(inspected, [2]string{ckpt, ref})
		mu.Unlock()
		return fixedText("lora norms: q_proj 1.2 · v_proj 0.9\nno non-finite values"), 0.88, nil
	}
	opts.Generate = func(ckpt, prompt string) (string, error) {
		mu.Lock()
		generated = append(generated, [2]string{ckpt, prompt})
		mu.Unlock()
		return "Twelve times three is 36.\n#### 36", nil
	}
	hs := start(t, opts, 160, 48)
	hs.loaded()
	hs.key("c")
	m := hs.model()
	if m.screen != screenCheckpoints {
		t.Fatalf("c did not open the inspector")
	}
	if c, _ := m.selected, true; c.Step != 60 {
		t.Errorf("selected step %d first, want the newest (60)", c.Step)
	}
	hs.key("up", "up")
	m = hs.model()
	if c, _ := m.selected, true; c.Step != 20 {
		t.Errorf("after up, up: step %d, want 20", c.Step)
	}
	hs.key("r", "down")
	m = hs.model()
	ref := "runs/20250301-120000-math/checkpoints/step-000020"
	if m.ref != ref {
		t.Errorf("reference %q, want %q", m.ref, ref)
	}
	contains(t, m.view, "★")

	hs.key("enter")
	m = hs.waitFor("the report", func(m snap) bool { return !m.busy && strings.Contains(m.view, "lora norms") })
	mu.Lock()
	if len(inspected) != 1 || !strings.HasSuffix(inspected[0][0], "step-000040") || !strings.HasSuffix(inspected[0][1], "step-000020") {
		t.Errorf("Inspect called with %v, want (step-000040, step-000020)", inspected)
	}
	mu.Unlock()
	contains(t, m.view, "score 0.88", "no non-finite values")

	hs.key("g")
	hs.tm.Type("3 × 12?")
	m = hs.model()
	if !m.editing {
		t.Fatal("g did not open the prompt field")
	}
	contains(t, m.view, "prompt> 3 × 12?")
	hs.key("q") // typed into the prompt, not a quit
	hs.key("backspace", "enter")
	m = hs.waitFor("the completion", func(m snap) bool { return strings.Contains(m.view, "#### 36") })
	mu.Lock()
	if len(generated) != 1 || generated[0][1] != "3 × 12?" || !strings.HasSuffix(generated[0][0], "step-000040") {
		t.Errorf("Generate called with %v", generated)
	}
	mu.Unlock()

	hs.key("esc")
	if m = hs.model(); m.screen != screenDashboard {
		t.Error("esc did not return to the dashboard")
	}
}

func TestInspectorWithoutFunctions(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 100, 30)
	hs.loaded()
	hs.key("c", "enter")
	contains(t, hs.model().view, "inspection is not available in this session")
}

func TestReplayKeys(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 80, 24)
	hs.loaded()
	for _, k := range []string{"space", "s"} {
		hs.key(k)
		m := hs.model()
		if got := m.footer; got != "replay: not a live run" {
			t.Errorf("%s in a replay: footer %q", k, got)
		}
	}
	hs.key("q")
	hs.tm.WaitFinished(t, teatestTimeout)
	m := hs.tm.FinalModel(t).(Model)
	if !m.quitting || m.overlay == overlayQuit {
		t.Error("q on a finished replay did not quit at once")
	}
}

func TestFocusAndSelection(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 100, 30)
	hs.loaded()
	hs.key("tab", "right")
	m := hs.model()
	if m.focus != focusSamples {
		t.Fatalf("tab: focus %d, want samples", m.focus)
	}
	contains(t, m.view, "samples · step 60 · 2/4 · pinned")
	hs.key("left", "left")
	contains(t, hs.model().view, "samples · step 50 · 4/4")

	hs.key("shift+tab", "down", "down", "enter")
	m = hs.model()
	if m.overlay != overlayAlert || m.alert.Rule != "kl_high" {
		t.Fatalf("enter on the third alert: overlay %d, alert %q", m.overlay, m.alert.Rule)
	}
	contains(t, m.view, "the policy is drifting from the reference", "severity  warning", "value     0.3300")
	hs.key("esc")
	if m = hs.model(); m.overlay != overlayNone {
		t.Error("esc did not close the alert")
	}
}

func TestQuitAsksWhileLive(t *testing.T) {
	s, ctl := liveRun()
	hs := start(t, baseOptions(s), 100, 30)
	hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })
	hs.key("q")
	m := hs.model()
	if m.overlay != overlayQuit {
		t.Fatal("q on a live run did not ask")
	}
	contains(t, m.view, "Stop the run?")
	hs.key("n")
	if m = hs.model(); m.overlay != overlayNone || len(ctl.Calls()) != 0 {
		t.Fatalf("n: overlay %d, calls %v", m.overlay, ctl.Calls())
	}
	hs.key("q", "y")
	waitCalls(t, ctl, "stop")
	hs.tm.WaitFinished(t, teatestTimeout)
	fm := hs.tm.FinalModel(t).(Model)
	if fm.Interrupted() {
		t.Error("a run stopped by q is reported as interrupted")
	}
	if !fm.ctx.Run.Ended || fm.ctx.Run.Status != "stopped" || len(fm.ctx.Run.Checkpoints) != 2 {
		t.Errorf("after stop: ended %v status %q checkpoints %d", fm.ctx.Run.Ended, fm.ctx.Run.Status, len(fm.ctx.Run.Checkpoints))
	}
}

func TestCtrlCStopsLiveRun(t *testing.T) {
	s, ctl := liveRun()
	hs := start(t, baseOptions(s), 100, 30)
	hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })
	hs.key("ctrl+c")
	waitCalls(t, ctl, "stop")
	hs.tm.WaitFinished(t, teatestTimeout)
	if !hs.tm.FinalModel(t).(Model).Interrupted() {
		t.Error("a run stopped by ctrl+c is not reported as interrupted (exit status 130)")
	}
}

// slowCtl never finishes stopping: a second ctrl+c must still quit.
type slowCtl struct{ fakeCtl }

func (s *slowCtl) Stop() error { s.record("stop"); return nil }

func TestSecondCtrlCQuits(t *testing.T) {
	o := fixture.Options{Steps: 5, TotalSteps: 60, Live: true}
	ctl := &slowCtl{}
	hs := start(t, baseOptions(Session{Events: feed(fixture.Events(o), true), Control: ctl}), 100, 30)
	hs.waitFor("step 5", func(m snap) bool { return m.step == 5 })
	hs.key("ctrl+c")
	hs.waitFor("stopping", func(m snap) bool { return m.stopping })
	hs.key("ctrl+c")
	hs.tm.WaitFinished(t, teatestTimeout)
}

func TestStopErrorKeepsRunning(t *testing.T) {
	o := fixture.Options{Steps: 5, TotalSteps: 60, Live: true}
	ctl := &errCtl{}
	hs := start(t, baseOptions(Session{Events: feed(fixture.Events(o), true), Control: ctl}), 100, 30)
	hs.waitFor("step 5", func(m snap) bool { return m.step == 5 })
	hs.key("q", "y")
	m := hs.waitFor("the error", func(m snap) bool {
		return !m.stopping && m.footer != "" && strings.Contains(m.footer, "failed")
	})
	if got := m.footer; got != "stop failed: engine busy" {
		t.Errorf("footer %q", got)
	}
	if m.quitting {
		t.Error("quit although the stop failed")
	}
}

type errCtl struct{ fakeCtl }

func (e *errCtl) Stop() error { return errors.New("engine busy") }

func TestResizeReflows(t *testing.T) {
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 160, 48)
	hs.loaded()
	for _, sz := range [][2]int{{160, 48}, {80, 24}, {100, 30}, {140, 40}, {139, 40}, {200, 60}, {60, 20}, {80, 23}, {81, 25}} {
		hs.tm.Send(windowSize(sz[0], sz[1]))
		m := hs.model()
		v := m.view
		checkFrame(t, v, sz[0], sz[1])
		small := sz[0] < MinWidth || sz[1] < MinHeight
		if got := strings.Contains(v, "needs a terminal of at least 80×24"); got != small {
			t.Errorf("%dx%d: too-small message shown %v, want %v", sz[0], sz[1], got, small)
		}
		if small {
			contains(t, v, "this one is "+itoa(sz[0])+"×"+itoa(sz[1]))
			continue
		}
		lines := strings.Split(v, "\n")
		// Three columns from 140 wide: the KL pane's title shares the perplexity pane's row.
		wide := strings.Contains(lines[2], "KL divergence")
		if wide != (sz[0] >= wideLayout) {
			t.Errorf("%dx%d: three-column layout %v", sz[0], sz[1], wide)
		}
	}
}

func TestNoColor(t *testing.T) {
	for _, noColor := range []bool{true, false} {
		opts := baseOptions(Session{Events: feed(finishedRun(), false)})
		opts.NoColor = noColor
		hs := start(t, opts, 160, 48)
		v := hs.loaded().raw
		colour := colourSGR.MatchString(v)
		if colour == noColor {
			t.Errorf("NoColor=%v: colour escapes present %v", noColor, colour)
		}
	}
}

func TestSetupStartsRun(t *testing.T) {
	choices := &setup.Choices{
		Presets: []setup.Preset{
			{Name: "story", Weights: [3]float64{0.1, 0.3, 0.6}},
			{Name: "math", Weights: [3]float64{0.2, 0.3, 0.5}, Other: "NTL, correctness"},
		},
		Model: "models/tiny", Steps: 100,
	}
	var got setup.Settings
	opts := baseOptions(Session{})
	opts.Setup = choices
	opts.Start = func(s setup.Settings) (Session, error) {
		got = s
		return Session{Events: feed(finishedRun(), false)}, nil
	}
	hs := start(t, opts, 100, 30)
	v := hs.model().view
	contains(t, v, "new run", "▸ story", "word 0.1 · phrase 0.3 · sentence 0.6", "models/tiny")
	hs.key("down") // math
	contains(t, hs.model().view, "word 0.2 · phrase 0.3 · sentence 0.5", "NTL, correctness")
	hs.key("tab", "tab", "tab") // the adapter to start from
	hs.tm.Type("runs/a/checkpoints/step-000010")
	hs.key("tab") // steps
	hs.key("backspace", "backspace", "backspace")
	hs.tm.Type("20")
	hs.key("tab", "right", "tab", "enter") // device: cpu; start
	m := hs.waitFor("the dashboard", func(m snap) bool { return m.screen == screenDashboard && m.closed })
	want := setup.Settings{Preset: "math", Model: "models/tiny", Adapter: "runs/a/checkpoints/step-000010", Steps: 20, Device: "cpu"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Start got %+v, want %+v", got, want)
	}
	contains(t, m.view, "✓ completed")
}

// The settings row opens a page of every other setting, common first, then "advanced"; a
// changed value reaches Start by its key.
func TestSetupSettingsPage(t *testing.T) {
	choices := &setup.Choices{Presets: []setup.Preset{{Name: "story"}}, Steps: 10,
		Settings: []setup.Setting{{Key: "num_generations", Value: "8", Help: "completions per prompt (G)", Common: true},
			{Key: "loss_type", Value: "dapo", Common: true}, {Key: "top_p", Value: "1", Help: "nucleus sampling"}}}
	var got setup.Settings
	opts := baseOptions(Session{})
	opts.Setup = choices
	opts.Start = func(s setup.Settings) (Session, error) {
		got = s
		return Session{Events: feed(finishedRun(), false)}, nil
	}
	hs := start(t, opts, 100, 30)
	contains(t, hs.model().view, "3 settings at their defaults")
	hs.key("tab", "tab", "tab", "tab", "tab", "tab", "space") // settings
	contains(t, hs.model().view, "num_generations", "completions per prompt (G)", "advanced", "top_p")
	hs.key("backspace")
	hs.tm.Type("4")
	hs.key("down", "down", "backspace")
	hs.tm.Type("0.9")
	hs.key("esc")
	contains(t, hs.model().view, "num_generations = 4 · top_p = 0.9")
	hs.key("tab", "enter") // start
	hs.waitFor("the dashboard", func(m snap) bool { return m.screen == screenDashboard && m.closed })
	if want := map[string]string{"num_generations": "4", "top_p": "0.9"}; !reflect.DeepEqual(got.Changed, want) {
		t.Errorf("changed %v, want %v", got.Changed, want)
	}
}

func TestSetupRejectsBadSteps(t *testing.T) {
	opts := baseOptions(Session{})
	opts.Setup = &setup.Choices{Presets: []setup.Preset{{Name: "story"}}, Steps: 10}
	started := false
	opts.Start = func(setup.Settings) (Session, error) { started = true; return Session{}, nil }
	hs := start(t, opts, 100, 30)
	hs.key("tab", "tab", "tab", "tab", "backspace", "backspace")
	hs.tm.Type("x")
	hs.key("tab", "tab", "enter")
	contains(t, hs.model().view, `steps: "x" is not a positive whole number`)
	if started {
		t.Error("started with bad steps")
	}
}

func TestSetupWithoutStartReturnsChoice(t *testing.T) {
	opts := baseOptions(Session{})
	opts.Setup = &setup.Choices{Presets: []setup.Preset{{Name: "code"}}, Steps: 5, Devices: []string{"cpu"}}
	hs := start(t, opts, 100, 30)
	hs.key("shift+tab", "enter")
	hs.tm.WaitFinished(t, teatestTimeout)
	s, ok := hs.tm.FinalModel(t).(Model).Chosen()
	if !ok || s.Preset != "code" || s.Steps != 5 || s.Device != "cpu" {
		t.Errorf("Chosen = %+v, %v", s, ok)
	}
}

// blockingCtl holds Pause until released: the screen must keep answering keys meanwhile.
type blockingCtl struct {
	fakeCtl
	release chan struct{}
}

func (b *blockingCtl) Pause() error { b.record("pause"); <-b.release; return nil }

func TestKeysAnsweredWhileEngineBusy(t *testing.T) {
	o := fixture.Options{Steps: 5, TotalSteps: 60, Live: true}
	ctl := &blockingCtl{release: make(chan struct{})}
	hs := start(t, baseOptions(Session{Events: feed(fixture.Events(o), true), Control: ctl}), 100, 30)
	hs.waitFor("step 5", func(m snap) bool { return m.step == 5 })
	hs.key("space")
	waitCalls(t, &ctl.fakeCtl, "pause")
	began := time.Now()
	hs.key("?")
	m := hs.waitFor("the help overlay", func(m snap) bool { return m.overlay == overlayHelp })
	if d := time.Since(began); d > time.Second {
		t.Errorf("help took %v while the engine was busy", d)
	}
	if m.paused {
		t.Error("paused before the engine confirmed")
	}
	close(ctl.release)
	hs.waitFor("the pause", func(m snap) bool { return m.paused })
}

func TestBackgroundColourPicksTheme(t *testing.T) {
	opts := baseOptions(Session{Events: feed(finishedRun(), false)})
	opts.Theme, opts.NoColor = ThemeAuto, false
	hs := start(t, opts, 100, 30)
	hs.loaded()
	hs.tm.Send(tea.BackgroundColorMsg{Color: color.White})
	if m := hs.model(); m.dark || m.noColor {
		t.Errorf("white background: dark %v", m.dark)
	}
	light := hs.model().raw
	hs.tm.Send(tea.BackgroundColorMsg{Color: color.Black})
	if m := hs.model(); !m.dark || m.raw == light {
		t.Errorf("black background: dark %v, view changed %v", m.dark, m.raw != light)
	}

	// A theme given by flag ignores the terminal's answer.
	opts.Theme = ThemeLight
	hs2 := start(t, opts, 100, 30)
	hs2.tm.Send(tea.BackgroundColorMsg{Color: color.Black})
	if m := hs2.model(); m.dark {
		t.Error("ThemeLight switched to dark")
	}
}

// The inspector with a report and a generated completion, for the README.
func TestGoldenInspectorReport(t *testing.T) {
	opts := baseOptions(Session{Events: feed(finishedRun(), false)})
	opts.Inspect = func(ckpt, ref string) (func(int) string, float64, error) {
		return fixedText("healthy, with one warning\n\n" +
			"module                     ‖A‖     ‖B‖   ‖s·BA‖   vs ref\n" +
			"layers.0.self_attn.q_proj  3.912   0.412  0.118   ×1.9\n" +
			"layers.0.self_attn.v_proj  3.907   0.377  0.104   ×1.7\n" +
			"layers.1.self_attn.q_proj  3.921   0.455  0.131   ×2.1\n\n" +
			"issues: q_proj lora_B grew 2.1× since the reference\n" +
			"recommendation: lower the learning rate if the growth continues"), 0.87, nil
	}
	opts.Generate = func(ckpt, prompt string) (string, error) {
		return "There are 7 boxes of 12 eggs, so 84 eggs. After 20 are used, 64 are left.\n#### 64", nil
	}
	hs := start(t, opts, 160, 48)
	hs.loaded()
	hs.key("c", "up", "r", "down", "enter")
	hs.waitFor("the report", func(m snap) bool { return strings.Contains(m.view, "recommendation") })
	hs.key("g")
	hs.tm.Type("7 boxes hold 12 eggs each; 20 eggs are used. How many are left?")
	hs.key("enter")
	m := hs.waitFor("the completion", func(m snap) bool { return strings.Contains(m.view, "#### 64") })
	checkFrame(t, m.view, 160, 48)
	golden.RequireEqual(t, []byte(m.view))
}

func TestGoldenSetup(t *testing.T) {
	opts := baseOptions(Session{})
	opts.Setup = &setup.Choices{
		Presets: []setup.Preset{
			{Name: "story", Description: "Stories: sentence-level coherence weighs most.", Weights: [3]float64{0.1, 0.3, 0.6}},
			{Name: "technical", Description: "Technical prose: precise words and phrases.", Weights: [3]float64{0.4, 0.4, 0.2}},
			{Name: "code", Description: "Source code and its comments.", Weights: [3]float64{0.4, 0.5, 0.1}},
			{Name: "math", Description: "Arithmetic word problems answered with #### N.", Weights: [3]float64{0.2, 0.3, 0.5},
				Other: "NTL final_answer (wasserstein, tau 1.0), correctness"},
		},
		Preset: "math", Steps: 200, Devices: []string{"auto", "cpu", "cuda"},
	}
	for _, sz := range [][2]int{{80, 24}, {120, 36}} {
		t.Run(fmt.Sprintf("%dx%d", sz[0], sz[1]), func(t *testing.T) {
			hs := start(t, opts, sz[0], sz[1])
			v := hs.model().view
			checkFrame(t, v, sz[0], sz[1])
			golden.RequireEqual(t, []byte(v))
		})
	}
}

func TestQuitFromTooSmallScreen(t *testing.T) {
	s, ctl := liveRun()
	hs := start(t, baseOptions(s), 60, 20)
	hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })
	hs.key("c", "space") // nothing but quitting works while too small
	if m := hs.model(); m.screen != screenDashboard || len(ctl.Calls()) != 0 {
		t.Fatalf("keys acted while too small: screen %d, calls %v", m.screen, ctl.Calls())
	}
	hs.key("q")
	contains(t, hs.model().view, "Stop the run?")
	hs.key("y")
	waitCalls(t, ctl, "stop")
	hs.tm.WaitFinished(t, teatestTimeout)
}
