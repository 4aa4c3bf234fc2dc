// Package charts draws metric trends with asciigraph: the KL and reward panes of the
// dashboard. A chart always fits its pane: the plot, its y labels and the legend line are
// sized from the pane's width and height, and anything left over is cut, never wrapped.
package charts

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"charm.land/lipgloss/v2"
	"github.com/guptarohit/asciigraph"

	"rlhfstation/engine/monitor"
	"rlhfstation/tui/component"
	"rlhfstation/tui/context"
	"rlhfstation/tui/format"
	"rlhfstation/tui/state"
	"rlhfstation/tui/styles"
)

// Series is one line of a chart: a metric and its legend label.
type Series struct {
	Metric string
	Label  string
	// Held marks a metric logged at some steps only (eval/* every eval_steps): it is drawn at
	// the steps of the chart's first series, holding its latest value, and left out until it
	// has one.
	Held bool
}

// Model is a chart pane.
type Model struct {
	component.Base
	title   string
	series  []Series
	caption func(r *state.Run) []string
	// titled, when set, makes the title from the run for an inner width.
	titled func(r *state.Run, w int) string
}

// New returns a chart of the given series; caption, when set, adds run-specific items after
// the legend (current value, threshold), as many as fit.
func New(ctx *context.Context, title string, series []Series, caption func(*state.Run) []string) Model {
	return Model{Base: component.New(ctx), title: title, series: series, caption: caption}
}

// KL is the KL-divergence chart: kl per step, with the latest and largest values and the
// alert threshold of the monitor's rule (DESIGN §15).
func KL(ctx *context.Context) Model {
	return New(ctx, "KL divergence", []Series{{Metric: "kl", Label: "kl"}}, func(r *state.Run) []string {
		v, ok := r.Last("kl")
		if !ok {
			return nil
		}
		c := []string{"now " + format.Value(v), "max " + format.Value(maxOf(r.Series("kl")))}
		if b, ok := r.ConfigNumber("beta"); ok {
			c = append(c, "β "+format.Value(b))
		}
		return append(c, "alert > 0.30")
	})
}

// Reward is the reward chart: mean reward and its spread per step, and in its title the
// reward's reliability over the monitor's window (DESIGN §15: stability = mean/std,
// consistency = the share within mean ± 2σ).
func Reward(ctx *context.Context) Model {
	m := New(ctx, "reward", []Series{{Metric: "reward", Label: "mean"}, {Metric: "reward_std", Label: "std"},
		{Metric: "eval/reward", Label: "eval", Held: true}}, func(r *state.Run) []string {
		v, ok := r.Last("reward")
		if !ok {
			return nil
		}
		now := "now " + format.Value(v)
		if t := r.TrendOf("reward"); t != state.Unknown { // Unknown's "·" would double the separator
			now += " " + format.Arrow(t)
		}
		c := []string{now}
		// Evaluation during training (eval_steps): its latest reward and correctness.
		if e, ok := r.Last("eval/reward"); ok {
			ev := "eval " + format.Value(e)
			if g, ok := r.Last("eval/correct_greedy"); ok {
				ev += " · greedy correct " + format.Percent(g)
			}
			c = append([]string{c[0], ev}, c[1:]...)
		}
		if z, ok := r.Last("frac_reward_zero_std"); ok {
			c = append(c, "zero-std groups "+format.Percent(z))
		}
		return c
	})
	m.titled = rewardTitle
	return m
}

// rewardTitle is the reward pane's title: with the reward's reliability once it has values,
// as much as fits in w.
func rewardTitle(r *state.Run, w int) string {
	rel, ok := reliability(r)
	if !ok {
		return "reward"
	}
	for _, t := range []string{
		fmt.Sprintf("reward · stability %.2g · consistency %s", rel.Stability, format.Percent(rel.Consistency)),
		fmt.Sprintf("reward · stability %.2g · %s within 2σ", rel.Stability, format.Percent(rel.Consistency)),
		fmt.Sprintf("reward · stability %.2g", rel.Stability),
	} {
		if lipgloss.Width(t) <= w-3 {
			return t
		}
	}
	return "reward"
}

// reliability is the reward's reliability over its latest finite values (the monitor's
// reliability window).
func reliability(r *state.Run) (monitor.Reliability, bool) {
	win := monitor.DefaultThresholds().ReliabilityWindow
	var y []float64
	ps := r.Points("reward")
	for i := len(ps) - 1; i >= 0 && len(y) < win; i-- {
		if v := ps[i].Value; !math.IsNaN(v) && !math.IsInf(v, 0) {
			y = append(y, v)
		}
	}
	if len(y) < 2 {
		return monitor.Reliability{}, false
	}
	return monitor.ReliabilityOf("reward", y), true
}

// Entropy is the policy's entropy per step (shown for other tools' runs, which log no
// perplexity), with the entropy-collapse rule's bound (DESIGN §15).
func Entropy(ctx *context.Context) Model {
	return New(ctx, "entropy", []Series{{Metric: "entropy", Label: "entropy"}}, func(r *state.Run) []string {
		v, ok := r.Last("entropy")
		if !ok {
			return nil
		}
		return []string{"now " + format.Value(v) + " " + format.Arrow(r.TrendOf("entropy")), "alert below 30% of its early level"}
	})
}

// Length is the mean completion length per step (shown for other tools' runs, which log no
// number token loss).
func Length(ctx *context.Context) Model {
	return New(ctx, "completion length", []Series{{Metric: "completions/mean_length", Label: "mean tokens"}}, func(r *state.Run) []string {
		v, ok := r.Last("completions/mean_length")
		if !ok {
			return nil
		}
		c := []string{"now " + format.Value(v) + " " + format.Arrow(r.TrendOf("completions/mean_length"))}
		if z, ok := r.Last("completions/clipped_ratio"); ok {
			c = append(c, "clipped "+format.Percent(z))
		}
		return c
	})
}

// View renders the framed chart.
func (m Model) View() string {
	title := m.title
	if m.titled != nil {
		title = m.titled(m.Ctx.Run, m.Width-2)
	}
	return m.Frame(title, func(w, h int) string {
		r := m.Ctx.Run
		var data [][]float64
		var labels []string
		for _, s := range m.series {
			switch {
			case !s.Held:
				data = append(data, r.Series(s.Metric))
			case r.Has(s.Metric):
				data = append(data, held(r, s.Metric, m.series[0].Metric))
			default:
				continue
			}
			labels = append(labels, s.Label)
		}
		var caption []string
		if m.caption != nil {
			caption = m.caption(r)
		}
		return Plot(m.Ctx.Styles, data, labels, caption, w, h)
	})
}

// held is metric at each step of the series of base: its value there or the latest before
// (NaN before its first).
func held(r *state.Run, metric, base string) []float64 {
	ps := r.Points(base)
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = math.NaN()
		if v, ok := r.At(metric, p.Step); ok {
			out[i] = v
		}
	}
	return out
}

// offset is asciigraph's gap between the y labels and the plot.
const offset = 3

// Plot draws series into at most w×h cells: the plot takes h−1 rows and the last row holds
// the legend and the caption (the plot takes every row when h < 3). Non-finite values are
// gaps. Series longer than the plot's width are resampled, keeping each bucket's most extreme
// point so that spikes stay visible.
func Plot(st styles.Styles, data [][]float64, labels []string, caption []string, w, h int) string {
	if w <= 0 || h <= 0 {
		return ""
	}
	clean := make([][]float64, 0, len(data))
	lo, hi := math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range data {
		c := make([]float64, len(s))
		for i, v := range s {
			if math.IsInf(v, 0) {
				v = math.NaN()
			}
			c[i] = v
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		clean = append(clean, c)
		n = max(n, len(c))
	}
	legend := legendLine(st, labels, caption, w)
	if math.IsInf(lo, 1) {
		msg := st.Muted.Render("waiting for data…")
		if h == 1 {
			return styles.Clip(msg, w)
		}
		return styles.Clip(msg, w) + strings.Repeat("\n", h-1) + legend
	}
	plotRows := h
	if h >= 3 {
		plotRows = h - 1
	}
	yfmt := axisFormat(lo, hi, max(plotRows-2, 1))
	labelW := max(len(yfmt(lo)), len(yfmt(hi)), len(yfmt(-math.Abs(hi-lo)/2+lo)))
	cols := w - labelW - offset
	if cols < 2 {
		return styles.Clip(st.Muted.Render(fmt.Sprintf("last %s", format.Value(lastFinite(clean[0])))), w)
	}
	for i := range clean {
		// Pad to a common length so that series stay aligned by step, then resample.
		for len(clean[i]) < n {
			clean[i] = append([]float64{math.NaN()}, clean[i]...)
		}
		clean[i] = resample(clean[i], cols)
	}
	opts := []asciigraph.Option{
		asciigraph.Height(max(plotRows-1, 1)),
		asciigraph.Offset(offset),
		asciigraph.YAxisValueFormatter(yfmt),
	}
	if st.NoColor {
		var cs []asciigraph.CharSet
		for i := range clean {
			if i == 0 {
				cs = append(cs, asciigraph.DefaultCharSet)
			} else {
				cs = append(cs, asciigraph.CreateCharSet(styles.SeriesChar(i)))
			}
		}
		opts = append(opts, asciigraph.SeriesChars(cs...))
	} else {
		opts = append(opts, asciigraph.SeriesColors(st.Series...), asciigraph.AxisColor(asciigraph.Gray),
			asciigraph.LabelColor(asciigraph.Gray))
	}
	graph := asciigraph.PlotMany(clean, opts...)
	lines := strings.Split(graph, "\n")
	if len(lines) > plotRows {
		lines = lines[len(lines)-plotRows:]
	}
	for i, l := range lines {
		lines[i] = styles.Clip(l, w)
	}
	for len(lines) < plotRows {
		lines = append(lines, "")
	}
	if plotRows < h {
		lines = append(lines, legend)
	}
	return strings.Join(lines, "\n")
}

// legendLine is "── mean  •• std  now 0.61 ↑ · zero-std 8.8%": the series markers (left
// out for a lone series with a caption), then as many caption items as fit in w.
func legendLine(st styles.Styles, labels []string, caption []string, w int) string {
	var parts []string
	if len(labels) > 1 || len(caption) == 0 {
		for i, l := range labels {
			parts = append(parts, st.SeriesMarker(i)+" "+l)
		}
	}
	line := strings.Join(parts, "  ")
	sep := "  "
	if line == "" {
		sep = ""
	}
	for _, c := range caption {
		next := line + sep + st.Muted.Render(c)
		if lipgloss.Width(next) > w {
			break
		}
		line, sep = next, st.Muted.Render(" · ")
	}
	return styles.Clip(line, w)
}

// axisFormat formats the y labels of a plot of rows+1 rows over [lo, hi] so that no two rows
// read the same: fixed decimals, or for values below 0.001 (a KL near 1e-6) the digits of
// scientific notation the rows' spacing needs, where fixed decimals would run out.
func axisFormat(lo, hi float64, rows int) func(float64) string {
	mag := math.Max(math.Abs(lo), math.Abs(hi))
	if mag == 0 || mag >= 1e-3 {
		dec := decimals(lo, hi)
		return func(v float64) string { return fmt.Sprintf("%.*f", dec, v) }
	}
	digits := 1
	if step := (hi - lo) / float64(rows); step > 0 {
		digits = max(1, min(int(math.Ceil(math.Log10(mag/step)))+1, 4))
	}
	return func(v float64) string { return strconv.FormatFloat(v, 'e', digits-1, 64) }
}

// decimals picks how many decimals the y labels need to tell rows apart.
func decimals(lo, hi float64) int {
	span := hi - lo
	if span <= 0 {
		span = math.Abs(hi)
	}
	if span == 0 {
		return 1
	}
	d := int(math.Ceil(-math.Log10(span))) + 1
	return max(0, min(d, 6))
}

// resample reduces s to at most n points: bucket i keeps its value farthest from the bucket's
// mean, so a one-step spike survives.
func resample(s []float64, n int) []float64 {
	if len(s) <= n {
		return s
	}
	out := make([]float64, n)
	for i := range out {
		a, b := i*len(s)/n, (i+1)*len(s)/n
		mean, k := 0.0, 0
		for _, v := range s[a:b] {
			if !math.IsNaN(v) {
				mean += v
				k++
			}
		}
		if k == 0 {
			out[i] = math.NaN()
			continue
		}
		mean /= float64(k)
		best := math.NaN()
		for _, v := range s[a:b] {
			if !math.IsNaN(v) && (math.IsNaN(best) || math.Abs(v-mean) > math.Abs(best-mean)) {
				best = v
			}
		}
		out[i] = best
	}
	return out
}

func maxOf(s []float64) float64 {
	m := math.NaN()
	for _, v := range s {
		if !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}

func lastFinite(s []float64) float64 {
	for i := len(s) - 1; i >= 0; i-- {
		if !math.IsNaN(s[i]) {
			return s[i]
		}
	}
	return math.NaN()
}

// sparkBlocks are the eight heights of a sparkline cell.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws s in at most w cells of block characters, scaled to its own minimum and
// maximum (a flat series sits on the middle height); longer series are resampled keeping each
// bucket's most extreme point, non-finite values are blanks.
func Sparkline(s []float64, w int) string {
	if w <= 0 || len(s) == 0 {
		return ""
	}
	c := make([]float64, len(s))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, v := range s {
		if math.IsInf(v, 0) {
			v = math.NaN()
		}
		c[i] = v
		if !math.IsNaN(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	c = resample(c, w)
	var b strings.Builder
	for _, v := range c {
		switch {
		case math.IsNaN(v):
			b.WriteRune(' ')
		case hi == lo:
			b.WriteRune(sparkBlocks[3])
		default:
			i := int(math.Round((v - lo) / (hi - lo) * float64(len(sparkBlocks)-1)))
			b.WriteRune(sparkBlocks[max(0, min(i, len(sparkBlocks)-1))])
		}
	}
	return b.String()
}
