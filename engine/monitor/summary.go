package monitor

import (
	"fmt"
	"math"
	"sort"

	"rlhfstation/engine/events"
	"rlhfstation/internal/stats"
)

// Trend directions.
const (
	Increasing = "increasing"
	Decreasing = "decreasing"
	Stable     = "stable"
)

// Trend is the direction of one metric over its recent window.
type Trend struct {
	Metric    string  `json:"metric"`
	Direction string  `json:"direction"` // increasing, decreasing or stable
	Slope     float64 `json:"slope"`     // per step, least squares over the window
	SlopeSE   float64 `json:"slope_se"`  // its standard error
	Change    float64 `json:"change"`    // slope × (points − 1)
	Points    int     `json:"points"`
	Last      float64 `json:"last"` // the latest finite value
}

// trendOf classifies a window.
func trendOf(metric string, y []float64, t float64) Trend {
	f := fitLine(y)
	tr := Trend{Metric: metric, Direction: direction(f, t), Slope: f.Slope, SlopeSE: f.SlopeSE, Change: f.Change(), Points: len(y)}
	if len(y) > 0 {
		tr.Last = y[len(y)-1]
	}
	return tr
}

// direction says which way a fitted line goes: the slope is significant when |slope| ≥ t·SE
// (a t-test of the least-squares slope against the residual noise); a perfect line (SE 0) with
// a change that is more than rounding is significant too.
func direction(f lineFit, t float64) string {
	scale := 1e-12 * (math.Abs(f.Intercept) + math.Abs(f.Change()) + 1e-300)
	switch {
	case math.Abs(f.Change()) <= scale || math.Abs(f.Slope) < t*f.SlopeSE:
		return Stable
	case f.Slope < 0:
		return Decreasing
	}
	return Increasing
}

// Reliability describes how dependable a reward signal has been over the reliability window.
type Reliability struct {
	Metric   string  `json:"metric"`
	Points   int     `json:"points"`
	Mean     float64 `json:"mean"`
	Std      float64 `json:"std"`
	Variance float64 `json:"variance"`
	// Stability = mean/std, a signal-to-noise ratio; 0 when std is 0 (a constant reward).
	Stability float64 `json:"stability"`
	// Consistency = the share of values within mean ± 2·std (1 for a constant reward).
	Consistency float64 `json:"consistency"`
}

// ReliabilityOf measures stability, consistency and variance of a reward series.
func ReliabilityOf(metric string, y []float64) Reliability {
	mean, std := stats.MeanStd(y)
	r := Reliability{Metric: metric, Points: len(y), Mean: mean, Std: std, Variance: std * std}
	if std > 0 {
		r.Stability = mean / std
	}
	in := 0
	for _, v := range y {
		if math.Abs(v-mean) <= 2*std {
			in++
		}
	}
	if len(y) > 0 {
		r.Consistency = float64(in) / float64(len(y))
	}
	return r
}

// Epoch holds per-metric statistics over one epoch of Thresholds.EpochSteps observations.
type Epoch struct {
	Index     int              `json:"index"` // from 0
	FirstStep int              `json:"first_step"`
	LastStep  int              `json:"last_step"`
	Steps     int              `json:"steps"`
	Partial   bool             `json:"partial,omitempty"` // the epoch in progress
	Metrics   map[string]Stats `json:"metrics"`
}

func (m *Monitor) addEpoch(step int, names []string, mt events.Metrics) {
	if m.epochN == m.th.EpochSteps {
		m.epochs = append(m.epochs, m.currentEpoch(false))
		m.epoch = map[string]*stats.Running{}
		m.epochIdx++
		m.epochN = 0
	}
	if m.epochN == 0 {
		m.epochLo = step
	}
	m.epochN++
	m.epochHi = step
	for _, name := range names {
		w := m.epoch[name]
		if w == nil {
			w = &stats.Running{}
			m.epoch[name] = w
		}
		w.Add(mt[name])
	}
}

func (m *Monitor) currentEpoch(partial bool) Epoch {
	e := Epoch{Index: m.epochIdx, FirstStep: m.epochLo, LastStep: m.epochHi, Steps: m.epochN,
		Partial: partial, Metrics: make(map[string]Stats, len(m.epoch))}
	for k, w := range m.epoch {
		e.Metrics[k] = statsOfRunning(w)
	}
	return e
}

// Summary is the monitor's view of the run so far, for the dashboard and the batch summary.
type Summary struct {
	Steps    int `json:"steps"` // observations so far
	LastStep int `json:"last_step"`
	// Trends of every metric with at least TrendMinPoints finite values, by name.
	Trends []Trend `json:"trends"`
	// Reliability of "reward" and of each "rewards/<func>/mean", by name.
	Reliability []Reliability `json:"reliability"`
	// Epochs: the finished ones, then the one in progress (Partial).
	Epochs []Epoch `json:"epochs"`
	// Completions: the latest reward-hacking signals, nil before any samples.
	Completions *TextSignals `json:"completions,omitempty"`
	// Alerts counts the anomalies raised, by rule.
	Alerts map[string]int `json:"alerts"`
}

// Summary computes trends and reliability now.
func (m *Monitor) Summary() Summary {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Summary{Steps: m.n, LastStep: m.lastStep, Alerts: map[string]int{}}
	names := make([]string, 0, len(m.series))
	for k := range m.series {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		se := m.series[name]
		if se.trend.len() >= m.th.TrendMinPoints {
			s.Trends = append(s.Trends, trendOf(name, se.trend.values(), m.th.TrendT))
		}
		if se.rel != nil && se.rel.len() >= 2 {
			s.Reliability = append(s.Reliability, ReliabilityOf(name, se.rel.values()))
		}
	}
	s.Epochs = append(s.Epochs, m.epochs...)
	if m.epochN > 0 {
		s.Epochs = append(s.Epochs, m.currentEpoch(true))
	}
	if m.text.batches > 0 {
		sig := m.text.latest
		s.Completions = &sig
	}
	for k, v := range m.alerts {
		s.Alerts[k] = v
	}
	return s
}

// Trend returns one metric's trend now; ok is false with fewer than TrendMinPoints values.
func (m *Monitor) Trend(metric string) (Trend, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	se := m.series[metric]
	if se == nil || se.trend.len() < m.th.TrendMinPoints {
		return Trend{}, false
	}
	return trendOf(metric, se.trend.values(), m.th.TrendT), true
}

func sprintf(format string, a ...any) string { return fmt.Sprintf(format, a...) }
