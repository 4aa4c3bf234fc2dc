package monitor

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"rlhfstation/internal/human"

	"rlhfstation/engine/events"
)

// WriteText writes the report for people: a summary line with the score, the issues with their
// recommendations, then a table per module group with the worst modules first (top rows per
// group; 0 for all). more tells the reader how to see the rows left out: the inspect command
// names its --top flag, the TUI's inspector the command to run.
func (r *Report) WriteText(w io.Writer, top int, more string) error {
	return r.WriteTextFit(w, top, more, 0)
}

// WriteTextFit is WriteText laid out for a pane width columns wide (0: no limit), as the TUI's
// inspector shows it: the module tables give up what a narrow pane cannot hold (the layer
// becomes a column of its own, then r when every module has the adapter's, then ‖A‖ and ‖B‖,
// which the norms line sums up), keeping each module's name, ‖s·B·A‖, drift and flags on its
// row; the other lines break between their " · " parts, or between words, onto indented lines.
// No number is cut.
func (r *Report) WriteTextFit(w io.Writer, top int, more string, width int) error {
	var out strings.Builder
	if err := r.writeText(&out, top, more, width); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	text := strings.TrimSuffix(out.String(), "\n")
	for _, line := range strings.Split(text, "\n") {
		for _, l := range breakLine(line, width) {
			bw.WriteString(l + "\n")
		}
	}
	return bw.Flush()
}

func (r *Report) writeText(bw *strings.Builder, top int, more string, width int) error {
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }

	counts := map[string]int{}
	for _, is := range r.Issues {
		counts[is.Severity]++
	}
	step := "step unknown"
	if r.StepFrom != "" {
		step = fmt.Sprintf("step %d", r.Step)
	}
	p("checkpoint %s · %s · health %.2f (%s)\n", r.Path, step, r.Score, issueCount(counts))
	if r.Reference != "" {
		ref := r.Reference
		if r.Drift != nil && r.Drift.RefStep > 0 {
			ref += fmt.Sprintf(" (step %d)", r.Drift.RefStep)
		}
		p("reference  %s\n", ref)
	}
	ad := r.Adapter
	p("adapter    %d modules, %s params", ad.Modules, human.Count(ad.Params))
	if ad.R > 0 {
		p(" · r %d · alpha %g · s = %s = %.4g", ad.R, ad.Alpha, ad.ScaleRule, ad.Scale)
	} else {
		p(" · s = %s", ad.ScaleRule)
	}
	if len(ad.TargetModules) > 0 {
		p(" · targets %s", strings.Join(ad.TargetModules, ", "))
	}
	p("\n")
	n := r.Norms
	p("norms      ‖A‖ %s  ‖B‖ %s  ‖s·B·A‖ %s\n", aggText(n.A), aggText(n.B), aggText(n.BA))
	if n.NonFinite > 0 || n.ZeroB > 0 {
		p("           %d non-finite values, %d modules with B all zero\n", n.NonFinite, n.ZeroB)
	}
	if d := r.Drift; d != nil {
		p("drift      %d modules compared, %d frozen · ‖Δ(s·B·A)‖ %s", d.Compared, d.Frozen, aggText(d.DeltaBA))
		if d.RelChange != nil {
			p(" · ‖s·B·A‖ change %+.1f%% on average", 100*d.RelChange.Mean)
		}
		p("\n")
	}
	if o := r.Optimizer; o != nil {
		p("optimizer  step %d · lr %.3g · betas %g/%g · eps %.3g · weight_decay %g · %d moment tensors",
			o.Step, o.LearningRate, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Tensors)
		if o.NonFinite == 0 && o.Negative == 0 {
			p(", all finite")
		}
		p("\n")
	}
	if t := r.Trainer; t != nil && t.Own() {
		p("trainer    global_step %d · learning_rate %.3g · data_cursor %d", t.GlobalStep, t.LearningRate, t.DataCursor)
		if h := t.ConfigHash; h != "" {
			p(" · config %s", h[:min(len(h), 12)]) // enough to tell configurations apart
		}
		p("\n")
	} else if t != nil {
		p("trainer    Hugging Face Trainer state: global_step %d", t.GlobalStep)
		if t.MaxSteps > 0 {
			p(" of %d", t.MaxSteps)
		}
		p(" · epoch %.4g · %d log entries", t.Epoch, t.LogEntries)
		if _, ok := t.Metrics["learning_rate"]; ok {
			p(" · learning_rate %.3g", t.LearningRate)
		}
		p("\n")
		if len(t.Metrics) > 0 {
			var kv []string
			for _, k := range []string{"reward", "reward_std", "kl", "entropy", "loss", "grad_norm"} {
				if v, ok := t.Metrics[k]; ok {
					kv = append(kv, fmt.Sprintf("%s %.4g", k, v))
				}
			}
			if len(kv) > 0 {
				p("           last log: %s\n", strings.Join(kv, " · "))
			}
		}
	}
	if len(r.Skipped) > 0 {
		p("skipped    %s (PyTorch pickles are not read: loading one runs code)\n", strings.Join(r.Skipped, ", "))
	}

	if len(r.Issues) == 0 {
		p("\nno issues found\n")
	} else {
		p("\nissues\n")
		for _, is := range r.Issues {
			p("  %-8s  %s: %s\n", strings.ToUpper(is.Severity), is.Code, is.Message)
			p("  %-8s  → %s\n", "", is.Recommendation)
		}
	}

	for _, g := range r.Groups {
		p("\n%s · %d modules, worst first\n", g.Name, len(g.Modules))
		rows := g.Modules
		if top > 0 && len(rows) > top {
			rows = rows[:top]
		}
		r.writeTable(bw, rows, width)
		if len(rows) < len(g.Modules) {
			p("  … %d more (%s)\n", len(g.Modules)-len(rows), more)
		}
		for _, k := range g.Kinds {
			p("  %-10s %3d modules  ‖s·B·A‖ %s\n", k.Kind, k.Modules, aggText(k.BA))
		}
	}
	return nil
}

// column is one column of a module table: its header and a cell per row.
type column struct {
	head  string
	cells []string
	left  bool // aligned left (names, flags), else right (numbers)
}

// writeTable writes the module rows as a table no wider than width (0: no limit), dropping
// columns in the order WriteTextFit gives; a table that is still too wide keeps them all.
func (r *Report) writeTable(b *strings.Builder, rows []Module, width int) {
	med := kindMedians(rows, func(m *Module) (float64, bool) { return m.NormBA, true })
	cells := func(f func(m Module) string) []string {
		out := make([]string, len(rows))
		for i, m := range rows {
			out[i] = f(m)
		}
		return out
	}
	module := column{head: "module", left: true, cells: cells(func(m Module) string { return shortModule(m.Name) })}
	layer := column{head: "layer", cells: cells(func(m Module) string {
		if m.Layer < 0 {
			return "-"
		}
		return fmt.Sprint(m.Layer)
	})}
	inLayer := column{head: "module", left: true, cells: cells(func(m Module) string { return layerModule(shortModule(m.Name)) })}
	rank := column{head: "r", cells: cells(func(m Module) string { return fmt.Sprint(m.Rank) })}
	normA := column{head: "‖A‖", cells: cells(func(m Module) string { return fmt.Sprintf("%.4g", m.NormA) })}
	normB := column{head: "‖B‖", cells: cells(func(m Module) string { return fmt.Sprintf("%.4g", m.NormB) })}
	rest := []column{
		{head: "‖s·B·A‖", cells: cells(func(m Module) string { return fmt.Sprintf("%.4g", m.NormBA) })},
		{head: "×median", cells: cells(func(m Module) string {
			if md := med[m.Kind]; md > 0 {
				return fmt.Sprintf("%.2f", m.NormBA/md)
			}
			return "-"
		})},
	}
	if r.Drift != nil {
		rest = append(rest,
			column{head: "‖Δ(s·B·A)‖", cells: cells(func(m Module) string {
				if m.Drift == nil {
					return "-"
				}
				return fmt.Sprintf("%.4g", m.Drift.DeltaBA)
			})},
			column{head: "change", cells: cells(func(m Module) string {
				if m.Drift == nil || m.Drift.RelChange == nil {
					return "-"
				}
				return fmt.Sprintf("%+.1f%%", 100**m.Drift.RelChange)
			})})
	}
	// The issues column only when a row fills it: a header wider than every row would wrap
	// on its own in a pane sized to the rows.
	for _, m := range rows {
		if len(m.Issues) > 0 {
			rest = append(rest, column{head: "issues", left: true, cells: cells(func(m Module) string { return strings.Join(m.Issues, ",") })})
			break
		}
	}
	uniformRank := true
	for _, m := range rows {
		uniformRank = uniformRank && m.Rank == r.Adapter.R
	}
	layouts := [][]column{append([]column{module, rank, normA, normB}, rest...)}
	if width > 0 {
		layouts = append(layouts, append([]column{layer, inLayer, rank, normA, normB}, rest...))
		if uniformRank {
			layouts = append(layouts, append([]column{layer, inLayer, normA, normB}, rest...))
		}
		layouts = append(layouts, append([]column{layer, inLayer}, rest...))
	}
	chosen := 0
	for chosen < len(layouts)-1 && tableWidth(layouts[chosen]) > width {
		chosen++
	}
	cols := layouts[chosen]
	if chosen > 0 && chosen == len(layouts)-1 { // ‖A‖ and ‖B‖ left out
		defer b.WriteString("  ‖A‖ and ‖B‖ of each module: rlhfstation inspect, or a wider terminal\n")
	}
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = utf8.RuneCountInString(c.head)
		for _, v := range c.cells {
			widths[i] = max(widths[i], utf8.RuneCountInString(v))
		}
	}
	line := func(cell func(c column) string) {
		var l strings.Builder
		l.WriteString(" ")
		for i, c := range cols {
			v := cell(c)
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(v))
			l.WriteString(" ")
			if i > 0 {
				l.WriteString(" ")
			}
			if c.left {
				l.WriteString(v + pad)
			} else {
				l.WriteString(pad + v)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	line(func(c column) string { return c.head })
	for i := range rows {
		line(func(c column) string { return c.cells[i] })
	}
}

// tableWidth is the width writeTable gives a table of these columns.
func tableWidth(cols []column) int {
	w := 2 + 2*(len(cols)-1)
	for _, c := range cols {
		cw := utf8.RuneCountInString(c.head)
		for _, v := range c.cells {
			cw = max(cw, utf8.RuneCountInString(v))
		}
		w += cw
	}
	return w
}

// layerModule is a module's name inside its layer, without the block its group names
// (layers.3.self_attn.q_proj → q_proj; layers.3.mlp.experts.7.down_proj → experts.7.down_proj).
func layerModule(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) >= 3 && parts[0] == "layers" {
		parts = parts[2:]
		if len(parts) >= 2 {
			parts = parts[1:]
		}
	}
	return strings.Join(parts, ".")
}

// breakLine breaks a line wider than width (0: no limit) between its " · " parts, else between
// words, onto lines indented past its label (continuation), never inside a word: a number is
// never cut. A word wider than a line stays whole.
func breakLine(line string, width int) []string {
	if width <= 0 || utf8.RuneCountInString(line) <= width {
		return []string{line}
	}
	pad := strings.Repeat(" ", min(continuation(line), width/2))
	var out []string
	cur, fresh := "", true // fresh: cur holds nothing yet, or only a continuation's indent
	fits := func(piece string) bool {
		if fresh && cur != "" {
			piece = strings.TrimLeft(piece, " ")
		}
		return utf8.RuneCountInString(cur+piece) <= width
	}
	add := func(piece string) {
		if fresh && cur != "" {
			piece = strings.TrimLeft(piece, " ")
		}
		cur, fresh = cur+piece, false
	}
	next := func() {
		out = append(out, strings.TrimRight(cur, " "))
		cur, fresh = pad, true
	}
	for i, part := range strings.Split(line, " · ") {
		if i > 0 {
			part = " · " + part
		}
		if fits(part) {
			add(part)
			continue
		}
		if !fresh {
			next()
			part = strings.TrimPrefix(part, " · ")
			if fits(part) {
				add(part)
				continue
			}
		}
		for _, word := range spacedWords.FindAllString(strings.TrimPrefix(part, " · "), -1) {
			if !fresh && !fits(word) {
				if room := width - utf8.RuneCountInString(cur) - 1; strings.Contains(word, "/") && room >= 24 {
					word = " " + shortenPath(strings.TrimLeft(word, " "), room)
				} else {
					next()
				}
			}
			if fresh && strings.Contains(word, "/") {
				word = shortenPath(strings.TrimLeft(word, " "), width-utf8.RuneCountInString(cur))
			}
			add(word)
		}
	}
	return append(out, strings.TrimRight(cur, " "))
}

// shortenPath is a path cut to n columns from the left, its end kept after "…" (a path wider
// than a line: its last folders name the checkpoint).
func shortenPath(p string, n int) string {
	r := []rune(p)
	if len(r) <= n || n < 2 {
		return p
	}
	return "…" + string(r[len(r)-n+1:])
}

// spacedWords are a text's words, each with the spaces before it.
var spacedWords = regexp.MustCompile(`\s*\S+`)

// continuation is the indent of a broken line's next lines: past a summary line's label
// ("drift      "), past an issue's severity ("  WARNING   "), else the line's own indent and two.
func continuation(line string) int {
	r := []rune(line)
	switch {
	case len(r) > 11 && r[0] != ' ' && r[10] == ' ' && r[11] != ' ':
		return 11
	case len(r) > 12 && r[0] == ' ' && r[1] == ' ' && r[2] != ' ' && r[10] == ' ' && r[11] == ' ' && r[12] != ' ':
		return 12
	}
	return len(line) - len(strings.TrimLeft(line, " ")) + 2
}

func issueCount(c map[string]int) string {
	total := c[events.Info] + c[events.Warning] + c[events.Critical]
	if total == 0 {
		return "no issues"
	}
	var parts []string
	for _, s := range []string{events.Critical, events.Warning, events.Info} {
		switch {
		case c[s] == 1 || (c[s] > 1 && s != events.Warning):
			parts = append(parts, fmt.Sprintf("%d %s", c[s], s))
		case c[s] > 1:
			parts = append(parts, fmt.Sprintf("%d warnings", c[s]))
		}
	}
	return fmt.Sprintf("%d issue(s): %s", total, strings.Join(parts, ", "))
}

func aggText(a Agg) string {
	return fmt.Sprintf("%.4g ± %.2g (max %.4g)", a.Mean, a.Std, a.Max)
}

// shortModule drops the model's outer prefix for the table.
func shortModule(name string) string {
	for _, p := range []string{"model.model.", "model.", "transformer."} {
		if strings.HasPrefix(name, p) {
			return name[len(p):]
		}
	}
	return name
}
