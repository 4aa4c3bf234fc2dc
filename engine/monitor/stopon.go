package monitor

import (
	"fmt"
	"slices"
	"strings"

	"rlhfstation/engine/events"
)

// stopAliases are the stop_on names that are not rule names, with what they cover.
var stopAliases = map[string]string{
	"nan":      "a non-finite value (" + RuleNonFinite + ")",
	"kl_spike": RuleKL + ", or a z-score jump of kl",
	"critical": "any critical alert",
}

// stopRules are the rules stop_on may name directly.
var stopRules = []string{RuleNonFinite, RuleZScore, RuleKL, RuleEntropyCollapse, RuleRewardStall, RuleZeroStd,
	RuleGradNorm, RuleMemoryLeak, RuleRepetition, RuleDiversityDrop, RuleLengthDrift}

// CheckStopOn refuses names that are neither a rule nor an alias, listing those known.
func CheckStopOn(names []string) error {
	for _, n := range names {
		if _, ok := stopAliases[n]; ok || slices.Contains(stopRules, n) {
			continue
		}
		return fmt.Errorf("%q is not an alert: use nan, kl_spike, critical or a rule (%s)", n, strings.Join(stopRules, ", "))
	}
	return nil
}

// StopOn reports the first of names that anomaly a matches ("" when none does, or a is not an
// anomaly).
func StopOn(names []string, a events.Event) string {
	if a.Type != events.Anomaly {
		return ""
	}
	for _, n := range names {
		var hit bool
		switch n {
		case "nan":
			hit = a.Rule == RuleNonFinite
		case "kl_spike":
			hit = a.Rule == RuleKL || (a.Rule == RuleZScore && a.Metric == "kl" && strings.Contains(a.Message, ", +")) // upwards (zMessage)
		case "critical":
			hit = a.Severity == events.Critical
		default:
			hit = a.Rule == n
		}
		if hit {
			return n
		}
	}
	return ""
}

// StopReason is what a run stopped by stop_on says: the name, the alert and its step.
func StopReason(name string, a events.Event) string {
	what := a.Rule
	if a.Metric != "" {
		what += " on " + a.Metric
	}
	return fmt.Sprintf("stop_on %s: %s at step %d", name, what, a.Step)
}
