package header

import (
	"strings"
	"testing"
	"time"

	"charm.land/lipgloss/v2"

	"rlhfstation/engine/events"
	"rlhfstation/tui/context"
	"rlhfstation/tui/styles"
)

func TestHeaderFitsAndDrops(t *testing.T) {
	ctx := context.New(styles.New(true, true))
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ctx.Now = func() time.Time { return t0.Add(90 * time.Second) }
	ctx.Live = true
	ctx.Run.Apply(events.Event{Type: events.RunStart, Time: t0, Run: "20250101-000000-story", Model: "models/tiny",
		Device: "cuda:0 (NVIDIA H100)", Preset: "story", TotalSteps: 100, Params: &events.Params{Total: 1000000, Trainable: 2000}})
	ctx.Run.Apply(events.Event{Type: events.Step, Step: 30, Time: t0.Add(90 * time.Second), Metrics: events.Metrics{
		"perf/tokens_per_second": 1234.4, "mem/rss_bytes": 2 << 30, "perf/step_seconds": 3}})
	h := New(ctx)
	for _, w := range []int{80, 100, 160, 240} {
		h.SetSize(w, Height)
		v := h.View()
		for _, l := range strings.Split(v, "\n") {
			if lipgloss.Width(l) > w {
				t.Errorf("width %d: line %q is %d wide", w, l, lipgloss.Width(l))
			}
		}
		for _, must := range []string{"run 20250101-000000-story", "step 30/100", "elapsed 1m30s", "ETA 3m30s", "● running"} {
			if !strings.Contains(v, must) {
				t.Errorf("width %d lacks %q:\n%s", w, must, v)
			}
		}
		if strings.Contains(v, "gpu") {
			t.Errorf("gpu memory shown without mem/gpu_bytes:\n%s", v)
		}
		if w >= 160 && !strings.Contains(v, "params 1,000,000 (2,000 trainable)") {
			t.Errorf("width %d lacks the parameter count:\n%s", w, v)
		}
	}
	ctx.Run.Apply(events.Event{Type: events.Step, Step: 31, Metrics: events.Metrics{"mem/gpu_bytes": 3 << 30}})
	h.SetSize(160, Height)
	if v := h.View(); !strings.Contains(v, "gpu 3.0 GiB") {
		t.Errorf("gpu memory missing:\n%s", v)
	}
	ctx.Paused = true
	if v := h.View(); !strings.Contains(v, "❚❚ paused") {
		t.Errorf("paused not shown:\n%s", v)
	}
}
