package tui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/exp/golden"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
)

// rewardPane is the reward chart's box in a screen: the lines from its title down to its
// bottom edge, its columns only.
func rewardPane(t *testing.T, view string) []string {
	t.Helper()
	lines := strings.Split(view, "\n")
	for i, l := range lines {
		at := strings.Index(l, "╭─ reward")
		if at < 0 {
			continue
		}
		col := len([]rune(l[:at]))
		width := strings.IndexRune(string([]rune(l)[col:]), '╮')
		width = len([]rune(string([]rune(l)[col:])[:width])) + 1
		var out []string
		for _, pl := range lines[i:] {
			r := []rune(pl)
			if col+width > len(r) {
				break
			}
			out = append(out, string(r[col:col+width]))
			if r[col] == '╰' {
				break
			}
		}
		return out
	}
	t.Fatalf("no reward pane:\n%s", view)
	return nil
}

// Evaluation during training has its own curve in the reward chart, at the sizes the
// dashboard is used at, live and replayed alike (replay is this dashboard over a run's
// events): eval/reward, held between evaluations, with its own marker in the legend. A run
// without evaluation shows no such line (issue 26).
func TestEvalCurveInRewardChart(t *testing.T) {
	for _, sz := range [][2]int{{120, 40}, {80, 24}} {
		opts := baseOptions(Session{Events: feed(fixture.Events(fixture.Options{EvalSteps: 10}), false)})
		hs := start(t, opts, sz[0], sz[1])
		m := hs.loaded()
		checkFrame(t, m.view, sz[0], sz[1])
		pane := strings.Join(rewardPane(t, m.view), "\n")
		// Without colour, series 3 is drawn with "+" and marked "++" in the legend.
		if !strings.Contains(pane, "++ eval") || strings.Count(pane, "+") < 10 {
			t.Errorf("%dx%d: the reward chart has no eval curve:\n%s", sz[0], sz[1], pane)
		}
		if sz[0] == 120 {
			t.Run("golden", func(t *testing.T) { golden.RequireEqual(t, []byte(m.view)) })
		}
	}
	hs := start(t, baseOptions(Session{Events: feed(finishedRun(), false)}), 120, 40)
	m := hs.loaded()
	if pane := strings.Join(rewardPane(t, m.view), "\n"); strings.Contains(pane, "eval") || strings.Contains(pane, "+") {
		t.Errorf("a run without evaluation shows an eval curve:\n%s", pane)
	}
}

// A run whose steps log no perplexity (a math run on bare-number answers: the term does not
// apply) says so in the perplexity pane instead of waiting for it.
func TestPerplexityPaneWithoutPerplexity(t *testing.T) {
	var evs []events.Event
	for _, e := range finishedRun() {
		if e.Type == events.Step {
			m := events.Metrics{}
			for k, v := range e.Metrics {
				if !strings.HasPrefix(k, "ppl/") && !strings.HasPrefix(k, "rewards/ppl/") {
					m[k] = v
				}
			}
			e.Metrics = m
		}
		evs = append(evs, e)
	}
	hs := start(t, baseOptions(Session{Events: feed(evs, false)}), 120, 40)
	m := hs.loaded()
	if !strings.Contains(m.view, "no perplexity in this run's steps") || strings.Contains(m.view, "waiting for perplexity") {
		t.Errorf("the perplexity pane of a run without perplexity:\n%s", m.view)
	}
}
