package tui

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"rlhfstation/engine/monitor"
)

// driftReport is a report against a reference as inspect makes it for a 24-block model: rows
// of two-digit layers whose full table (module, r, ‖A‖, ‖B‖, ‖s·B·A‖, ×median, drift, change,
// flags) is 84 to 92 columns wide.
func driftReport() *monitor.Report {
	var groups []monitor.Group
	for g, kinds := range [][]string{{"self_attn.q_proj", "self_attn.v_proj"}, {"mlp.down_proj", "mlp.up_proj"}} {
		var mods []monitor.Module
		for l := 10; l < 13; l++ {
			for k, kind := range kinds {
				i := float64(len(mods) + 1)
				change := 0.013 * i * float64(1-2*(k%2))
				m := monitor.Module{Name: fmt.Sprintf("model.layers.%d.%s", l, kind), Kind: kind[strings.LastIndex(kind, ".")+1:],
					Layer: l, Rank: 16, NormA: 1.6 + 0.0137*i, NormB: 0.08 + 0.00131*i, NormBA: 0.14 + 0.00173*i,
					Drift: &monitor.ModuleDrift{DeltaBA: 0.17 + 0.00219*i, RelChange: &change}}
				if len(mods) == 0 {
					m.Issues = []string{"frozen"}
				}
				mods = append(mods, m)
			}
		}
		groups = append(groups, monitor.Group{Name: []string{"attention", "mlp"}[g], Modules: mods})
	}
	return &monitor.Report{Path: "runs/r/checkpoints/step-000060", Reference: "runs/r/checkpoints/step-000020", Score: 0.85,
		Adapter: monitor.AdapterInfo{Modules: 12, Params: 1 << 20, R: 16, Alpha: 32, ScaleRule: "alpha/r", Scale: 2},
		Drift:   &monitor.DriftSummary{Compared: 12, Frozen: 1, RefStep: 20},
		Issues: []monitor.Issue{{Severity: "warning", Code: "frozen", Message: "1 module(s) identical to the reference: model.layers.10.self_attn.q_proj",
			Recommendation: "no gradient reaches these modules: check that they are trainable and used in the forward pass, and that the two checkpoints are different steps"}},
		Groups: groups}
}

// The inspector with a reference at 80×24 and 120×40 (issue 26): the report is laid out for the
// pane, so the pane wraps none of its lines (each line on screen is a whole line of the report
// at the pane's width, no number cut), and every module's row holds its layer, name, ‖s·B·A‖,
// drift, change and flags on one line. At 80×24 the pane scrolls (→) through the whole report.
func TestInspectorWithReferenceFits(t *testing.T) {
	rep := driftReport()
	for _, size := range [][2]int{{80, 24}, {120, 40}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			var width atomic.Int64
			opts := baseOptions(Session{Events: feed(finishedRun(), false)})
			opts.Inspect = func(ckpt, ref string) (func(int) string, float64, error) {
				if ref == "" {
					t.Errorf("inspected without the reference")
				}
				return func(w int) string {
					width.Store(int64(w))
					var sb strings.Builder
					if err := rep.WriteTextFit(&sb, 8, "all of them: rlhfstation inspect CKPT --top 0", w); err != nil {
						t.Error(err)
					}
					return sb.String()
				}, rep.Score, nil
			}
			hs := start(t, opts, size[0], size[1])
			hs.loaded()
			hs.key("c", "up", "up", "r", "down", "down", "enter")
			m := hs.waitFor("the report", func(m snap) bool { return m.ref != "" && strings.Contains(m.view, "reference  runs/r") })
			checkFrame(t, m.view, size[0], size[1])
			w := int(width.Load())
			var full strings.Builder
			rep.WriteTextFit(&full, 8, "all of them: rlhfstation inspect CKPT --top 0", w)
			lines := map[string]bool{}
			for _, l := range strings.Split(full.String(), "\n") {
				lines[strings.TrimRight(l, " ")] = true
			}
			// Every line of the detail pane (the last box of each row), scrolled to the end.
			seen := map[string]bool{}
			for range len(lines) + 8 {
				for _, l := range strings.Split(m.view, "\n") {
					if parts := strings.Split(l, "│"); len(parts) >= 3 {
						seen[strings.TrimRight(parts[len(parts)-2], " ")] = true
					}
				}
				hs.key("right")
				m = hs.model()
			}
			inReport := false
			for l := range seen {
				if strings.HasPrefix(l, "checkpoint "+rep.Path[:10]) {
					inReport = true
				}
			}
			if !inReport {
				t.Fatalf("the report's first line not seen (width %d)", w)
			}
			for l := range seen {
				if t := strings.TrimSpace(l); t == "" || !strings.ContainsAny(t, "0123456789‖") {
					continue
				}
				if strings.HasPrefix(l, "  · ") {
					continue // the pane's own rows above the report: the health issues of the events
				}
				if !lines[l] && (strings.Contains(l, "‖") || strings.Contains(l, "%") || strings.Contains(l, "proj")) {
					t.Errorf("a line the pane wrapped or cut (not a line of the report at width %d): %q", w, l)
				}
			}
			for _, g := range rep.Groups {
				for _, mod := range g.Modules {
					want := []string{fmt.Sprint(mod.Layer), mod.Kind, fmt.Sprintf("%.4g", mod.NormBA), fmt.Sprintf("%.4g", mod.Drift.DeltaBA),
						fmt.Sprintf("%+.1f%%", 100**mod.Drift.RelChange)}
					want = append(want, mod.Issues...)
					found := false
					for l := range seen {
						ok := true
						for _, s := range want {
							ok = ok && strings.Contains(l, s)
						}
						found = found || ok
					}
					if !found {
						t.Errorf("no line holds %s's row %v (width %d)", mod.Name, want, w)
					}
				}
			}
			if w > 80 || w < 60 {
				t.Errorf("the pane is %d columns wide", w)
			}
		})
	}
}
