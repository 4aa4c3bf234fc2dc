package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
)

// The perplexity pane, a KL chart of values near 1e-6 and the samples pane, replayed in a real
// terminal at 80×24 and at 120×40: one sign convention across the perplexity pane (title,
// rows, arrows: improvement, + and ↑ better), sparklines kept at 80 columns, KL labels that
// tell every row apart, and the sample's answer in sight.
func TestPanesInTmux(t *testing.T) {
	bin := build(t)
	evs := fixture.Events(fixture.Options{})
	for i := range evs {
		if evs[i].Type == events.Step {
			if v, ok := evs[i].Metrics["kl"]; ok {
				evs[i].Metrics["kl"] = v * 1e-5 // a KL near 1e-6: beta 0, the policy barely moved
			}
		}
	}
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, evs); err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(word|phrase|sentence|aggregate)\s+[0-9.]+\s+(?:[0-9.]+\s+)?([+-][0-9.]+%)\s*([▁▂▃▄▅▆▇█]*)\s*([↑↓→·])`)
	label := regexp.MustCompile(`│\s*([-0-9.e+]+) [┤┼]`)
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			tm := newTmux(t, size[0], size[1], fmt.Sprintf("NO_COLOR=1 %s replay %s; sleep 60", bin, dir))
			s := tm.waitFor("KL divergence", "perplexity ·", "samples · step 60")
			t.Logf("screen:\n%s", s)
			// Perplexity: the title's improvement and every row's share a sign; the arrows
			// point up with them (perplexity fell over the run).
			if !strings.Contains(s, "+4.6%") || !strings.Contains(s, "better") {
				t.Errorf("title lacks the improvement +4.6%% better")
			}
			rows := row.FindAllStringSubmatch(s, -1)
			if len(rows) != 4 {
				t.Fatalf("%d perplexity rows", len(rows))
			}
			for _, r := range rows {
				if !strings.HasPrefix(r[2], "+") || r[4] != "↑" {
					t.Errorf("%s: improvement %s with arrow %s: want + and ↑, as the title", r[1], r[2], r[4])
				}
				if len([]rune(r[3])) < 6 {
					t.Errorf("%s: sparkline %q gone", r[1], r[3])
				}
			}
			if strings.Contains(s, "Δ ru") || strings.Contains(s, "-5.7%") {
				t.Errorf("the old Δ column is back")
			}
			// KL: its labels (the KL pane is the first chart with labels below 0.001) differ.
			var kl []string
			for _, line := range strings.Split(s, "\n") {
				if m := label.FindStringSubmatch(line); m != nil && strings.Contains(m[1], "e-") {
					kl = append(kl, m[1])
				}
			}
			if len(kl) < 2 {
				t.Fatalf("no KL axis labels in scientific notation")
			}
			seen := map[string]bool{}
			for _, l := range kl {
				if seen[l] {
					t.Errorf("KL axis label %s twice: %v", l, kl)
				}
				seen[l] = true
			}
			if strings.Contains(s, "· ·") {
				t.Errorf("a doubled separator")
			}
			// Samples: the answer heads the pane.
			if !strings.Contains(s, "answer 48") {
				t.Errorf("the sample's answer is not in sight")
			}
			tm.keys("q")
		})
	}
}
