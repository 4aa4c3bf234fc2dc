package monitor

import (
	"bufio"
	"fmt"
	"io"
	"rlhfstation/internal/human"
	"strings"
	"text/tabwriter"

	"rlhfstation/engine/events"
)

// WriteText writes the report for people: a summary line with the score, the issues with their
// recommendations, then a table per module group with the worst modules first (top rows per
// group; 0 for all). more tells the reader how to see the rows left out: the inspect command
// names its --top flag, the TUI's inspector the command to run.
func (r *Report) WriteText(w io.Writer, top int, more string) error {
	bw := bufio.NewWriter(w)
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
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
		rows := g.Modules
		if top > 0 && len(rows) > top {
			rows = rows[:top]
		}
		width := len("module")
		for _, m := range rows {
			width = max(width, len([]rune(shortModule(m.Name))))
		}
		head := fmt.Sprintf("%-*s\tr\t‖A‖\t‖B‖\t‖s·B·A‖\t×median", width, "module")
		if r.Drift != nil {
			head += "\t‖Δ(s·B·A)‖\tchange"
		}
		// The issues column only when a row fills it: a header wider than every row would
		// wrap on its own in a pane sized to the rows (the TUI's inspector at 120 columns).
		head += "\t"
		for _, m := range rows {
			if len(m.Issues) > 0 {
				head += "  issues"
				break
			}
		}
		fmt.Fprintln(tw, head)
		med := kindMedians(g.Modules, func(m *Module) (float64, bool) { return m.NormBA, true })
		for _, m := range rows {
			x := "-"
			if md := med[m.Kind]; md > 0 {
				x = fmt.Sprintf("%.2f", m.NormBA/md)
			}
			line := fmt.Sprintf("%-*s\t%d\t%.4g\t%.4g\t%.4g\t%s", width, shortModule(m.Name), m.Rank, m.NormA, m.NormB, m.NormBA, x)
			if r.Drift != nil {
				switch {
				case m.Drift == nil:
					line += "\t-\t-"
				case m.Drift.RelChange == nil:
					line += fmt.Sprintf("\t%.4g\t-", m.Drift.DeltaBA)
				default:
					line += fmt.Sprintf("\t%.4g\t%+.1f%%", m.Drift.DeltaBA, 100**m.Drift.RelChange)
				}
			}
			fmt.Fprintln(tw, strings.TrimRight(line+"\t  "+strings.Join(m.Issues, ","), " "))
		}
		tw.Flush()
		if len(rows) < len(g.Modules) {
			p("  … %d more (%s)\n", len(g.Modules)-len(rows), more)
		}
		for _, k := range g.Kinds {
			p("  %-10s %3d modules  ‖s·B·A‖ %s\n", k.Kind, k.Modules, aggText(k.BA))
		}
	}
	return bw.Flush()
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
