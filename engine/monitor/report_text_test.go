package monitor

import (
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
