package tui

import (
	"strings"
	"testing"

	"rlhfstation/engine/monitor"
)

// The inspector at 120×40 shows the real report's module table (monitor.WriteText) without
// wrapping: the header and every row on one line each, the "issues" header not on a line of
// its own (issue 26).
func TestInspectorTableDoesNotWrap(t *testing.T) {
	var mods []monitor.Module
	for _, n := range []string{"layers.1.self_attn.v_proj", "layers.0.self_attn.q_proj", "layers.2.self_attn.o_proj"} {
		mods = append(mods, monitor.Module{Name: "model." + n, Kind: n[strings.LastIndex(n, ".")+1:], Rank: 16, NormA: 1.652, NormB: 0.08483, NormBA: 0.1403})
	}
	rep := &monitor.Report{Path: "runs/r/checkpoints/step-000040", Score: 1, Groups: []monitor.Group{{Name: "attention", Modules: mods}}}
	var sb strings.Builder
	if err := rep.WriteText(&sb, 8, "all of them: rlhfstation inspect CKPT --top 0"); err != nil {
		t.Fatal(err)
	}
	opts := baseOptions(Session{Events: feed(finishedRun(), false)})
	opts.Inspect = func(ckpt, ref string) (string, float64, error) { return sb.String(), 1, nil }
	hs := start(t, opts, 120, 40)
	hs.loaded()
	hs.key("c", "enter")
	m := hs.waitFor("the report", func(m snap) bool { return strings.Contains(m.view, "worst first") })
	checkFrame(t, m.view, 120, 40)
	lines := strings.Split(m.view, "\n")
	head := -1
	for i, l := range lines {
		if strings.Contains(l, "×median") {
			head = i
		}
	}
	if head < 0 || !strings.Contains(lines[head], "module") {
		t.Fatalf("no table header on one line:\n%s", m.view)
	}
	for k, n := range []string{"layers.1.self_attn.v_proj", "layers.0.self_attn.q_proj", "layers.2.self_attn.o_proj"} {
		if l := lines[head+1+k]; !strings.Contains(l, n) || !strings.Contains(l, "1.00") {
			t.Errorf("row %d wraps: %q\n%s", k, l, m.view)
		}
	}
	for _, l := range lines {
		if strings.Trim(l, " │") == "issues" {
			t.Errorf("the issues header wraps onto its own line:\n%s", m.view)
		}
	}
}
