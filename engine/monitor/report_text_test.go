package monitor

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// A module table's header is no wider than its widest row, so that a pane sized to the rows
// (the TUI's inspector: 70 columns at 120) does not wrap the header alone (issue 26): the
// issues column is there only when a row has one.
func TestReportTableHeaderFitsItsRows(t *testing.T) {
	mod := func(name string, issues ...string) Module {
		return Module{Name: "model." + name, Kind: name[strings.LastIndex(name, ".")+1:], Rank: 16, NormA: 1.652, NormB: 0.08483, NormBA: 0.1403, Issues: issues}
	}
	for _, c := range []struct {
		name   string
		rows   []Module
		issues bool
	}{
		{"healthy", []Module{mod("layers.1.self_attn.v_proj"), mod("layers.0.self_attn.q_proj")}, false},
		{"an issue", []Module{mod("layers.1.self_attn.v_proj", "frozen"), mod("layers.0.self_attn.q_proj")}, true},
	} {
		r := &Report{Path: "ckpt", Groups: []Group{{Name: "attention", Modules: c.rows}}}
		var sb strings.Builder
		if err := r.WriteText(&sb, 0, ""); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(sb.String(), "\n")
		head, widest := -1, 0
		for i, l := range lines {
			if strings.Contains(l, "×median") {
				head = i
			} else if head >= 0 && strings.Contains(l, "layers.") {
				widest = max(widest, utf8.RuneCountInString(l))
			}
		}
		if head < 0 {
			t.Fatalf("%s: no table:\n%s", c.name, sb.String())
		}
		if w := utf8.RuneCountInString(lines[head]); w > widest {
			t.Errorf("%s: header %d columns wide, rows at most %d:\n%s", c.name, w, widest, sb.String())
		}
		if strings.Contains(lines[head], "issues") != c.issues {
			t.Errorf("%s: header %q", c.name, lines[head])
		}
	}
}

// WriteTextFit keeps every line within the width, every number whole (a line breaks only
// between words) and, at the inspector's widths (70 and 78), every module's drift on its row.
func TestWriteTextFitKeepsNumbersWhole(t *testing.T) {
	change := -0.239
	var mods []Module
	for l := 10; l < 14; l++ {
		mods = append(mods, Module{Name: fmt.Sprintf("model.layers.%d.self_attn.q_proj", l), Kind: "q_proj", Layer: l, Rank: 16,
			NormA: 1.5 + float64(l)/100, NormB: 0.0818, NormBA: 0.1403 + float64(l)/1000,
			Drift: &ModuleDrift{DeltaBA: 0.1745 + float64(l)/1000, RelChange: &change}, Issues: []string{"frozen"}})
	}
	r := &Report{Path: "/home/someone/runs/20261127-101010-story/checkpoints/step-000060", Reference: "/home/someone/runs/20261127-101010-story/checkpoints/step-000020",
		Adapter: AdapterInfo{Modules: 4, R: 16, Alpha: 32, ScaleRule: "alpha/r", Scale: 2}, Drift: &DriftSummary{Compared: 4, Frozen: 4},
		Issues: []Issue{{Severity: "warning", Code: "frozen", Message: "4 module(s) identical to the reference: model.layers.10.self_attn.q_proj, model.layers.11.self_attn.q_proj",
			Recommendation: "no gradient reaches these modules: check that they are trainable and used in the forward pass"}},
		Groups: []Group{{Name: "attention", Modules: mods}}}
	var full strings.Builder
	if err := r.WriteText(&full, 0, ""); err != nil {
		t.Fatal(err)
	}
	number := regexp.MustCompile(`[-+]?[0-9]+\.[0-9]+%?`)
	for _, width := range []int{60, 70, 78} {
		var sb strings.Builder
		if err := r.WriteTextFit(&sb, 0, "", width); err != nil {
			t.Fatal(err)
		}
		text := sb.String()
		for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if n := utf8.RuneCountInString(l); n > width {
				t.Errorf("width %d: a line of %d: %q", width, n, l)
			}
		}
		whole := map[string]bool{}
		for _, n := range number.FindAllString(full.String(), -1) {
			whole[n] = true
		}
		for _, n := range number.FindAllString(text, -1) {
			if !whole[n] {
				t.Errorf("width %d: %s is not a number of the full report (one cut?):\n%s", width, n, text)
			}
		}
		if width < 70 {
			continue // narrower than the inspector's panes: rows may break between their cells
		}
		for _, m := range mods {
			row := fmt.Sprintf("%d  q_proj", m.Layer)
			found := false
			for _, l := range strings.Split(text, "\n") {
				found = found || strings.Contains(l, row) && strings.Contains(l, fmt.Sprintf("%.4g", m.Drift.DeltaBA)) && strings.Contains(l, "-23.9%") && strings.Contains(l, "frozen")
			}
			if !found {
				t.Errorf("width %d: %s's row is not whole:\n%s", width, m.Name, text)
			}
		}
	}
}
