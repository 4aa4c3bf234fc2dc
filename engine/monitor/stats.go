package monitor

import (
	"math"

	"rlhfstation/internal/stats"
)

// ring holds the most recent values of a series, oldest first when read.
type ring struct {
	buf   []float64
	start int
	n     int
}

func newRing(size int) *ring { return &ring{buf: make([]float64, size)} }

func (r *ring) push(x float64) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = x
		r.n++
		return
	}
	r.buf[r.start] = x
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring) len() int   { return r.n }
func (r *ring) full() bool { return r.n == len(r.buf) }

// values copies the series out, oldest first.
func (r *ring) values() []float64 {
	out := make([]float64, r.n)
	for i := range out {
		out[i] = r.buf[(r.start+i)%len(r.buf)]
	}
	return out
}

// lineFit is the least-squares line y = Intercept + Slope·i through y[0..n-1] at i = 0..n-1.
type lineFit struct {
	N         int
	Slope     float64 // per step
	Intercept float64 // fitted value at the first point
	Resid     float64 // residual standard deviation, √(SSE/(n−2))
	SlopeSE   float64 // standard error of the slope, Resid/√Sxx
	R2        float64 // 1 − SSE/Syy; 0 when y is constant
}

// Change is the fitted change from the first point to the last.
func (f lineFit) Change() float64 { return f.Slope * float64(f.N-1) }

// fitLine fits y against its index. It needs n ≥ 3 for a residual; with fewer points Resid and
// SlopeSE are 0.
func fitLine(y []float64) lineFit {
	n := len(y)
	f := lineFit{N: n}
	if n == 0 {
		return f
	}
	xm := float64(n-1) / 2
	ym, _ := stats.MeanStd(y)
	var sxx, sxy, syy float64
	for i, v := range y {
		dx, dy := float64(i)-xm, v-ym
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		f.Intercept = ym
		return f
	}
	f.Slope = sxy / sxx
	f.Intercept = ym - f.Slope*xm
	sse := max(syy-f.Slope*sxy, 0)
	if syy > 0 {
		f.R2 = 1 - sse/syy
	}
	if n > 2 {
		f.Resid = math.Sqrt(sse / float64(n-2))
		f.SlopeSE = f.Resid / math.Sqrt(sxx)
	}
	return f
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Stats summarises a set of values: mean, sample standard deviation, minimum and maximum of the
// finite ones (N of them), and how many were NaN or infinite.
type Stats struct {
	N         int     `json:"n"`
	Mean      float64 `json:"mean"`
	Std       float64 `json:"std"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	NonFinite int     `json:"non_finite,omitempty"`
}

// statsOfRunning is the summary of what r has taken.
func statsOfRunning(r *stats.Running) Stats {
	return Stats{N: r.N, Mean: r.Mean, Std: r.Std(), Min: r.Min, Max: r.Max, NonFinite: r.NonFinite}
}

// statsOf summarises a slice.
func statsOf(y []float64) Stats {
	var r stats.Running
	for _, v := range y {
		r.Add(v)
	}
	return statsOfRunning(&r)
}
