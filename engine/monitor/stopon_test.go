package monitor

import (
	"strings"
	"testing"

	"rlhfstation/engine/events"
)

func TestStopOn(t *testing.T) {
	if err := CheckStopOn([]string{"nan", "kl_spike", "critical", RuleRewardStall}); err != nil {
		t.Fatal(err)
	}
	th := DefaultThresholds()
	th.StopOn = []string{"kl_sipke"}
	if err := th.Validate(); err == nil || !strings.Contains(err.Error(), `stop_on: "kl_sipke" is not an alert`) {
		t.Fatalf("a misspelt stop_on: %v", err)
	}
	a := func(rule, metric, sev string, v float64, z float64) events.Event {
		msg := ""
		if rule == RuleZScore {
			msg = zMessage(metric, v, z, &th)
		}
		return events.Event{Type: events.Anomaly, Step: 7, Rule: rule, Metric: metric, Severity: sev, Value: v, Message: msg}
	}
	cases := []struct {
		names []string
		e     events.Event
		want  string
	}{
		{[]string{"nan"}, a(RuleNonFinite, "loss", events.Critical, 0, 0), "nan"},
		{[]string{"kl_spike"}, a(RuleKL, "kl", events.Warning, 0.8, 0), "kl_spike"},
		{[]string{"kl_spike"}, a(RuleZScore, "kl", events.Info, 0.8, 7.5), "kl_spike"},
		{[]string{"kl_spike"}, a(RuleZScore, "kl", events.Info, 0.0, -7.5), ""}, // a drop is no spike
		{[]string{"kl_spike"}, a(RuleZScore, "reward", events.Info, 0.8, 7.5), ""},
		{[]string{"critical", "nan"}, a(RuleNonFinite, "loss", events.Critical, 0, 0), "critical"},
		{[]string{"grad_norm"}, a(RuleGradNorm, "grad_norm", events.Warning, 9, 0), "grad_norm"},
		{[]string{"nan"}, events.Event{Type: events.Log, Rule: RuleNonFinite}, ""},
	}
	for i, c := range cases {
		if got := StopOn(c.names, c.e); got != c.want {
			t.Errorf("case %d: StopOn(%v, %s on %s) = %q, want %q", i, c.names, c.e.Rule, c.e.Metric, got, c.want)
		}
	}
	if got := StopReason("kl_spike", a(RuleKL, "kl", events.Warning, 0.8, 0)); got != "stop_on kl_spike: kl_high on kl at step 7" {
		t.Errorf("reason %q", got)
	}
}
