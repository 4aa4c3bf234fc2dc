package charts

import (
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/tui/context"
	"rlhfstation/tui/state"
	"rlhfstation/tui/styles"
)

// The reward pane's legend shows the latest evaluation (eval_steps) beside the training reward.
func TestRewardPaneShowsEval(t *testing.T) {
	r := state.New()
	for s := 1; s <= 6; s++ {
		m := events.Metrics{"reward": 0.1 * float64(s), "reward_std": 0.2}
		if s%3 == 0 {
			m["eval/reward"], m["eval/correct_greedy"] = 0.05*float64(s), 0.25
		}
		r.Apply(events.Event{Type: events.Step, Step: s, Metrics: m})
	}
	ctx := &context.Context{Run: r, Styles: styles.New(true, true)}
	p := Reward(ctx)
	p.SetSize(100, 12)
	if v := p.View(); !strings.Contains(v, "eval 0.3000 · greedy correct 25.0%") {
		t.Errorf("no eval line:\n%s", v)
	}
}
