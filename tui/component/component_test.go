package component_test

import (
	"strings"
	"testing"

	"charm.land/lipgloss/v2"

	"rlhfstation/tui/alerts"
	"rlhfstation/tui/charts"
	"rlhfstation/tui/checkpoints"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/footer"
	"rlhfstation/tui/header"
	"rlhfstation/tui/help"
	"rlhfstation/tui/ntl"
	"rlhfstation/tui/perplexity"
	"rlhfstation/tui/samples"
	"rlhfstation/tui/setup"
	"rlhfstation/tui/styles"
)

// Every piece of the screen is a Component; the ones that take keys are Interactive.
var (
	_ component.Component   = (*header.Model)(nil)
	_ component.Component   = (*footer.Model)(nil)
	_ component.Component   = (*help.Model)(nil)
	_ component.Component   = (*perplexity.Model)(nil)
	_ component.Component   = (*ntl.Model)(nil)
	_ component.Component   = (*charts.Model)(nil)
	_ component.Interactive = (*alerts.Model)(nil)
	_ component.Interactive = (*samples.Model)(nil)
	_ component.Interactive = (*checkpoints.Model)(nil)
	_ component.Interactive = (*setup.Model)(nil)
)

func TestBaseFrame(t *testing.T) {
	b := component.New(context.New(styles.New(true, false)))
	var asked [2]int
	body := func(w, h int) string { asked = [2]int{w, h}; return "body" }
	b.SetSize(3, 5)
	if got := b.Frame("t", body); got != "" || asked != [2]int{} {
		t.Fatalf("a pane too narrow to frame drew %q (body asked for %v)", got, asked)
	}
	b.SetSize(20, 6)
	got := b.Frame("title", body)
	if w, h := lipgloss.Size(got); w != 20 || h != 6 || asked != [2]int{18, 4} || !strings.Contains(got, "title") || !strings.Contains(got, "body") {
		t.Fatalf("frame %d×%d, body asked for %v:\n%s", w, h, asked, got)
	}
	if b.Focused() {
		t.Fatal("a new component has the focus")
	}
	b.Focus()
	focused := b.Frame("title", body)
	if !b.Focused() || focused == got {
		t.Fatal("a focused pane is drawn as an unfocused one")
	}
	if b.Blur(); b.Focused() || b.Frame("title", body) != got {
		t.Fatal("Blur did not give the focus back")
	}
}
