// Package format renders the numbers the panes show: durations, byte sizes, metric values,
// trend arrows. One place, so every pane prints a value the same way.
package format

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"rlhfstation/tui/state"
)

// Duration prints 45s, 2m05s, 1h02m, 3d04h.
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// Bytes prints a size in binary units: 812 MiB, 3.4 GiB.
func Bytes(b float64) string {
	if math.IsNaN(b) || b < 0 {
		return "?"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if b >= 100 || i == 0 {
		return fmt.Sprintf("%.0f %s", b, units[i])
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

// Value prints a metric value compactly with about four significant digits; non-finite
// values print as NaN, +Inf, -Inf.
func Value(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1e6 || a < 1e-3:
		return strconv.FormatFloat(v, 'e', 2, 64)
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// Count prints an integer count with thousands separators: 12,345.
func Count(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return Value(v)
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Percent prints a fraction as a percentage: 0.873 → 87.3%; from 10000% on in e-notation
// (1.2e+07%), so that a diverging perplexity keeps its column.
func Percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value(f)
	}
	if math.Abs(f) >= 100 {
		return strconv.FormatFloat(f*100, 'e', 1, 64) + "%"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

// SignedPercent prints a signed percentage: +1.9%, -0.4%, +1.2e+07%.
func SignedPercent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value(f)
	}
	if math.Abs(f) >= 100 {
		return fmt.Sprintf("%+.1e%%", f*100)
	}
	return fmt.Sprintf("%+.1f%%", f*100)
}

// Arrow is the trend arrow of a metric: ↑ rising, ↓ falling, → stable, · unknown.
func Arrow(t state.Trend) string {
	switch t {
	case state.Rising:
		return "↑"
	case state.Falling:
		return "↓"
	case state.Stable:
		return "→"
	}
	return "·"
}

// AlertHasValue reports whether an anomaly's value means something: a non_finite alert carries
// 0 (JSON cannot hold NaN; its message names the value).
func AlertHasValue(rule string) bool { return rule != "non_finite" }
