package charts

import (
	"math"
	"strings"
	"testing"

	"charm.land/lipgloss/v2"

	"rlhfstation/tui/styles"
)

func series(n int, f func(i int) float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

// Plot never draws outside its w×h, whatever the data and the size.
func TestPlotFits(t *testing.T) {
	data := map[string][][]float64{
		"ramp":     {series(60, func(i int) float64 { return float64(i) })},
		"two":      {series(60, func(i int) float64 { return math.Sin(float64(i) / 5) }), series(40, func(i int) float64 { return 0.5 })},
		"tiny":     {series(60, func(i int) float64 { return 1e-5 * float64(i) })},
		"huge":     {series(60, func(i int) float64 { return 1e9 * float64(i) })},
		"negative": {series(60, func(i int) float64 { return -123.456 * float64(i) })},
		"flat":     {series(10, func(int) float64 { return 3 })},
		"one":      {{0.25}},
		"gaps":     {{1, math.NaN(), math.Inf(1), 3, math.Inf(-1), 2}},
		"long":     {series(5000, func(i int) float64 { return float64(i % 97) })},
	}
	for _, noColor := range []bool{true, false} {
		st := styles.New(true, noColor)
		for name, d := range data {
			labels := make([]string, len(d))
			for i := range labels {
				labels[i] = "series"
			}
			for w := 1; w <= 60; w += 7 {
				for h := 1; h <= 14; h += 3 {
					out := Plot(st, d, labels, []string{"now 1.0", "max 2.0"}, w, h)
					lines := strings.Split(out, "\n")
					if len(lines) > h {
						t.Errorf("%s %dx%d: %d lines", name, w, h, len(lines))
					}
					for _, l := range lines {
						if lipgloss.Width(l) > w {
							t.Errorf("%s %dx%d: line %q is %d wide", name, w, h, l, lipgloss.Width(l))
						}
					}
				}
			}
		}
	}
}

func TestPlotNoData(t *testing.T) {
	st := styles.New(true, true)
	out := Plot(st, [][]float64{{math.NaN(), math.Inf(1)}}, []string{"kl"}, nil, 30, 5)
	if !strings.Contains(out, "waiting for data") || !strings.Contains(out, "── kl") {
		t.Errorf("no-data chart:\n%s", out)
	}
}

func TestPlotLabelsAndLegend(t *testing.T) {
	st := styles.New(true, true)
	out := Plot(st, [][]float64{series(30, func(i int) float64 { return float64(i) / 100 }), series(30, func(int) float64 { return 0.1 })},
		[]string{"mean", "std"}, []string{"now 0.29", "a caption far too long to fit in the chart's width"}, 40, 8)
	lines := strings.Split(out, "\n")
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 8:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(strings.TrimSpace(lines[0]), "0.29") || !strings.Contains(lines[6], "0.00") {
		t.Errorf("y labels wrong:\n%s", out)
	}
	last := lines[7]
	if !strings.Contains(last, "── mean") || !strings.Contains(last, "•• std") || !strings.Contains(last, "now 0.29") || strings.Contains(last, "far too long") {
		t.Errorf("legend line %q", last)
	}
	if !strings.Contains(out, "•") {
		t.Errorf("second series not drawn with its own character:\n%s", out)
	}
}

func TestResampleKeepsSpikes(t *testing.T) {
	s := series(1000, func(int) float64 { return 1 })
	s[517] = 50
	r := resample(s, 40)
	if len(r) != 40 {
		t.Fatalf("len %d", len(r))
	}
	found := false
	for _, v := range r {
		found = found || v == 50
	}
	if !found {
		t.Errorf("spike lost: %v", r)
	}
	if short := resample([]float64{1, 2}, 10); len(short) != 2 {
		t.Errorf("short series changed: %v", short)
	}
}

func TestDecimals(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   int
	}{{0, 0.04, 3}, {0, 300, 0}, {0.5, 0.7, 2}, {5, 5, 1}, {0, 0, 1}} {
		if got := decimals(c.lo, c.hi); got != c.want {
			t.Errorf("decimals(%v, %v) = %d, want %d", c.lo, c.hi, got, c.want)
		}
	}
}

// A KL near 1e-6 gets y labels that tell every row apart (fixed decimals capped at 6 used to
// print 0.000005 twice).
func TestTinyValuesGetDistinctAxisLabels(t *testing.T) {
	st := styles.New(true, true)
	var kl []float64
	for i := 0; i < 40; i++ {
		kl = append(kl, 1e-6+float64(i)*1.2e-7)
	}
	for _, h := range []int{6, 10, 16} {
		out := Plot(st, [][]float64{kl}, []string{"kl"}, nil, 60, h)
		seen := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			i := strings.IndexAny(line, "┤┼")
			if i < 0 {
				continue
			}
			label := strings.TrimSpace(line[:i])
			if seen[label] {
				t.Errorf("height %d: label %q twice:\n%s", h, label, out)
			}
			seen[label] = true
			if !strings.Contains(label, "e-0") {
				t.Errorf("height %d: label %q is not in scientific notation", h, label)
			}
		}
		if len(seen) < 2 {
			t.Errorf("height %d: no labels:\n%s", h, out)
		}
	}
}
