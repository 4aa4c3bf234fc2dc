package tui

import (
	"testing"

	"rlhfstation/engine/events"
)

// TestDetachedRun: a run steered through its control file (watch) shows paused only when the
// trainer's acknowledgement arrives, with the time it took effect; q then n quits and leaves
// the run alone, and ctrl+c quits without stopping it.
func TestDetachedRun(t *testing.T) {
	for _, quit := range []string{"n", "ctrl+c"} {
		s, ctl := liveRun()
		s.Detached = true
		hs := start(t, baseOptions(s), 120, 36)
		hs.waitFor("step 30", func(m snap) bool { return m.step == 30 })
		hs.key("space")
		waitCalls(t, ctl, "pause")
		m := hs.waitFor("the request", func(m snap) bool { return m.footer != "pausing…" && m.footer != "" })
		if m.paused {
			t.Fatal("paused before the trainer said so")
		}
		contains(t, m.footer, "pause asked")
		ctl.ch <- events.Event{Type: events.Log, Time: fixedNow, Step: 30, Level: "info", Control: "pause",
			Message: "paused after step 30 (the trainer holds until resume)"}
		m = hs.waitFor("the acknowledgement", func(m snap) bool { return m.paused })
		contains(t, m.view, "❚❚ paused", fixedNow.Local().Format("15:04:05")+" paused after step 30")
		if quit == "n" {
			hs.key("q")
			m = hs.waitFor("the question", func(m snap) bool { return m.overlay == overlayQuit })
			contains(t, m.view, "Stop the trainer?", "quit, leave it running")
		}
		hs.key(quit)
		if fm := hs.tm.FinalModel(t).(Model); !fm.quitting || fm.ctx.Stopping {
			t.Errorf("%s: quitting %v, stopping %v", quit, fm.quitting, fm.ctx.Stopping)
		}
		waitCalls(t, ctl, "pause") // no stop
	}
}
