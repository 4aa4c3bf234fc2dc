package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"rlhfstation/tui/fixture"
)

// The samples pane of a multi-turn run shows the newest episode turn by turn in a real
// terminal: the tool calls the model made, the tool results, its answer; the tool results
// (masked from the loss) drawn in another colour than the model's turns.
func TestSamplesPaneShowsTurnsInTmux(t *testing.T) {
	bin := build(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, fixture.WithEpisodes(fixture.Events(fixture.Options{}))); err != nil {
		t.Fatal(err)
	}
	tm := newTmux(t, 160, 48, fmt.Sprintf("env -u NO_COLOR %s replay --theme dark %s; echo EXIT=$?; sleep 60", bin, dir))
	s := tm.waitFor("samples · step 60 · 1/4", "tool call", `calc {"expression":"2+3"}`, `calc {"expression":"5*4"}`,
		"tool result", "The answer is 20.")
	if !strings.Contains(s, "dimmed: not the model's, masked from the loss") {
		t.Errorf("no legend for the dimmed turns:\n%s", s)
	}
	// The colour in force where the model's answer starts differs from the tool result's.
	esc := tm.screen(true)
	if a, r := colourBefore(esc, "The answer is 20."), colourBefore(esc, "tool result"); a == "" || r == "" || a == r {
		t.Errorf("the model's answer (%q) and the tool result (%q) are drawn alike", a, r)
	}
	// The next sample: an episode its environment failed.
	tm.keys("Tab") // focus the samples pane
	tm.keys("Right")
	tm.waitFor("samples · step 60 · 2/4", "environment failed: RuntimeError", "scored as not applicable")
	tm.keys("q")
	tm.waitFor("EXIT=0")
}

var lastSGR = regexp.MustCompile(`\x1b\[[0-9;:]*m`)

// colourBefore is the last SGR escape before text's first occurrence on its line.
func colourBefore(screen, text string) string {
	for _, line := range strings.Split(screen, "\n") {
		if i := strings.Index(line, text); i >= 0 {
			ms := lastSGR.FindAllString(line[:i], -1)
			if len(ms) == 0 {
				return ""
			}
			return ms[len(ms)-1]
		}
	}
	return ""
}
