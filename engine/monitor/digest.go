package monitor

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/internal/stats"
)

// Digest folds a run's events into the account `rlhfstation replay --summary` gives of it, in
// memory that does not grow with the run's length: per metric its first and last values, the
// statistics of its finite values, a least-squares trend over the whole run and the monitor's
// trend over its recent window; the anomalies; reward reliability; the completions' signals;
// the checkpoints. The anomalies are those the events carry (rlhfstation's runs log them; for
// another tool's runs the reader's monitor adds them to the stream); the Digest's own monitor
// is only asked for trends, reliability and completion signals.
type Digest struct {
	mon       *Monitor
	th        Thresholds
	run       RunInfo
	metrics   map[string]*metricDigest
	anomalies []Anomaly
	dropped   int
	alerts    map[string]int
	ckpts     []CheckpointInfo
	sample    *SampleInfo
	batches   int
	logs      []string
}

// maxAnomalies and maxLogs bound what a Digest keeps of a pathological run.
const (
	maxAnomalies = 1000
	maxLogs      = 100
)

type metricDigest struct {
	first, last         float64
	firstStep, lastStep int
	run                 stats.Running
	head                []float64 // the first 2·window finite values
	tail                *ring     // the latest window finite values
}

// add takes one value.
func (m *metricDigest) add(v float64, window int) {
	m.run.Add(v)
	if !finite(v) {
		return
	}
	if len(m.head) < 2*window {
		m.head = append(m.head, v)
	}
	m.tail.push(v)
}

// trend compares the mean of the last window of finite values with the mean of the first
// (each half of the values when there are fewer than two windows' worth).
func (m *metricDigest) trend(window int) RunTrend {
	n := m.run.N
	var first, last []float64
	switch {
	case n < 4:
		return RunTrend{Direction: Stable, Points: n}
	case n < 2*window:
		first, last = m.head[:n/2], m.head[n-n/2:]
	default:
		first, last = m.head[:window], m.tail.values()
	}
	a, sa := stats.MeanSE(first)
	b, sb := stats.MeanSE(last)
	t := RunTrend{Direction: Stable, First: a, Last: b, Window: len(first), Points: n}
	se := math.Sqrt(sa*sa + sb*sb)
	switch {
	case se > 0:
		t.Rise = (b - a) / se
	case b != a:
		t.Rise = math.Copysign(math.Inf(1), b-a)
	}
	switch {
	case t.Rise >= trendRise:
		t.Direction = Increasing
	case t.Rise <= -trendRise:
		t.Direction = Decreasing
	}
	if math.IsInf(t.Rise, 0) {
		t.Rise = math.Copysign(math.MaxFloat64, t.Rise) // JSON has no infinity
	}
	return t
}

// trendRise: a run's trend is a rise or a fall when the last window's mean is this many
// standard errors from the first's.
const trendRise = 3

// NewDigest starts a digest with the monitor thresholds th (for trends and reliability).
func NewDigest(th Thresholds) *Digest {
	th.EpochSteps = math.MaxInt32 // per-epoch statistics are not part of the digest
	return &Digest{mon: New(th), th: th, metrics: map[string]*metricDigest{}, alerts: map[string]int{}}
}

// Apply folds one event in.
func (d *Digest) Apply(e events.Event) {
	switch e.Type {
	case events.RunStart:
		d.run.Name, d.run.Source, d.run.Model, d.run.Device, d.run.Preset = e.Run, e.Source, e.Model, e.Device, e.Preset
		d.run.TotalSteps = e.TotalSteps
		d.run.Started = timePtr(e.Time)
		d.run.Config = e.Config
	case events.Step:
		d.run.Steps++
		if d.run.Steps == 1 {
			d.run.FirstStep = e.Step
		}
		d.run.LastStep = e.Step
		d.run.Last = timePtr(e.Time)
		for k, v := range e.Metrics {
			m := d.metrics[k]
			if m == nil {
				m = &metricDigest{first: v, firstStep: e.Step, tail: newRing(d.th.TrendWindow)}
				d.metrics[k] = m
			}
			m.last, m.lastStep = v, e.Step
			m.add(v, d.th.TrendWindow)
		}
		d.mon.Observe(e.Step, e.Metrics)
	case events.Samples:
		d.batches++
		d.mon.ObserveSamples(e.Step, e.Samples)
		if len(e.Samples) > 0 {
			s := e.Samples[0]
			d.sample = &SampleInfo{Step: e.Step, Of: len(e.Samples), Prompt: s.Prompt, Completion: s.Completion,
				Reward: Num(s.Reward), Advantage: Num(s.Advantage), Turns: s.Turns, Failed: s.Failed}
		}
	case events.Anomaly:
		d.alerts[e.Rule]++
		if len(d.anomalies) >= maxAnomalies {
			d.dropped++
			return
		}
		d.anomalies = append(d.anomalies, Anomaly{Step: e.Step, Rule: e.Rule, Metric: e.Metric, Value: e.Value,
			Severity: e.Severity, Message: e.Message})
	case events.Checkpoint:
		d.AddCheckpoint(e.Step, e.Path, e.Health)
	case events.Log:
		if e.Level != "info" && len(d.logs) < maxLogs {
			d.logs = append(d.logs, e.Level+": "+e.Message)
		}
	case events.RunEnd:
		d.run.Status, d.run.Reason = e.Status, e.Reason
		d.run.Ended = timePtr(e.Time)
	}
}

// AddCheckpoint records a checkpoint (from its event, or found on disk: health nil). One
// already recorded at the same step keeps its health.
func (d *Digest) AddCheckpoint(step int, path string, h *events.Health) {
	for i, c := range d.ckpts {
		if c.Step == step {
			if c.Health == nil {
				d.ckpts[i].Health = h
			}
			return
		}
	}
	d.ckpts = append(d.ckpts, CheckpointInfo{Step: step, Path: path, Health: h})
	sort.SliceStable(d.ckpts, func(i, j int) bool { return d.ckpts[i].Step < d.ckpts[j].Step })
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Num is a number that may be NaN or infinite: JSON carries those as the strings "NaN",
// "+Inf" and "-Inf", as events.Metrics does.
type Num float64

func (n Num) MarshalJSON() ([]byte, error) {
	v := float64(n)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil
}

func (n *Num) UnmarshalJSON(b []byte) error {
	var m events.Metrics
	if err := json.Unmarshal([]byte(`{"v":`+string(b)+`}`), &m); err != nil {
		return err
	}
	*n = Num(m["v"])
	return nil
}

// RunReport is the JSON document of `rlhfstation replay DIR --summary --json`.
type RunReport struct {
	Run RunInfo `json:"run"`
	// Final is each metric's last value (non-finite ones as "NaN", "+Inf", "-Inf").
	Final events.Metrics `json:"final"`
	// Metrics summarises each metric over the run, by name.
	Metrics map[string]MetricSummary `json:"metrics"`
	// Anomalies in the order they were raised (at most 1000; AnomaliesDropped counts the rest).
	Anomalies        []Anomaly      `json:"anomalies"`
	AnomaliesDropped int            `json:"anomalies_dropped,omitempty"`
	Alerts           map[string]int `json:"alerts"` // anomalies by rule
	// Reliability of the reward and of each reward function's mean over the last
	// reliability_window steps.
	Reliability []Reliability `json:"reliability"`
	// Completions: the reward-hacking signals of the latest batch, when completions were logged.
	Completions  *TextSignals     `json:"completions,omitempty"`
	SampleBatch  int              `json:"sample_batches"`
	LatestSample *SampleInfo      `json:"latest_sample,omitempty"`
	Checkpoints  []CheckpointInfo `json:"checkpoints"`
	// Problems are the warnings and errors met while reading the run.
	Problems []string `json:"problems,omitempty"`
}

// RunInfo says what ran and how it ended.
type RunInfo struct {
	Name       string         `json:"name"`
	Source     string         `json:"source,omitempty"` // the tool that wrote it, when not rlhfstation
	Model      string         `json:"model,omitempty"`
	Device     string         `json:"device,omitempty"`
	Preset     string         `json:"preset,omitempty"`
	Status     string         `json:"status"` // run_end's status; "in progress" without one
	Reason     string         `json:"reason,omitempty"`
	Steps      int            `json:"steps"` // step events read
	FirstStep  int            `json:"first_step"`
	LastStep   int            `json:"last_step"`
	TotalSteps int            `json:"total_steps,omitempty"`
	Started    *time.Time     `json:"started,omitempty"`
	Last       *time.Time     `json:"last,omitempty"`
	Ended      *time.Time     `json:"ended,omitempty"`
	Config     map[string]any `json:"-"`
}

// MetricSummary is one metric over the run.
type MetricSummary struct {
	First     Num            `json:"first"`
	FirstStep int            `json:"first_step"`
	Last      Num            `json:"last"`
	LastStep  int            `json:"last_step"`
	Stats     `json:"stats"` // of the finite values
	// Trend compares the end of the run with its start.
	Trend RunTrend `json:"trend"`
	// Recent is the monitor's trend over its last trend_window finite values (absent below
	// trend_min_points).
	Recent *Trend `json:"recent,omitempty"`
}

// RunTrend is a metric's trend over the whole run: the mean of its last trend_window finite
// values against the mean of its first (with fewer than two windows, the second half against
// the first), in standard errors of the difference. So it never contradicts the run's start
// and end, whatever happened in between.
type RunTrend struct {
	Direction string  `json:"direction"` // increasing, decreasing (|rise| ≥ 3), else stable
	First     float64 `json:"first_mean"`
	Last      float64 `json:"last_mean"`
	Window    int     `json:"window"` // values in each mean
	Rise      float64 `json:"rise_se"`
	Points    int     `json:"points"` // finite values in the run
}

// Anomaly is one alert of the run.
type Anomaly struct {
	Step     int     `json:"step"`
	Rule     string  `json:"rule"`
	Metric   string  `json:"metric,omitempty"`
	Value    float64 `json:"value"`
	Severity string  `json:"severity"`
	Message  string  `json:"message"`
}

// CheckpointInfo is a checkpoint of the run.
type CheckpointInfo struct {
	Step   int            `json:"step"`
	Path   string         `json:"path"`
	Health *events.Health `json:"health,omitempty"`
}

// SampleInfo is the first completion of the latest batch.
type SampleInfo struct {
	Step       int    `json:"step"`
	Of         int    `json:"of"` // completions in the batch
	Prompt     string `json:"prompt"`
	Completion string `json:"completion"`
	Reward     Num    `json:"reward"`
	Advantage  Num    `json:"advantage"`
	// Turns are a multi-turn episode's messages; Failed why its environment failed it.
	Turns  []events.Turn `json:"turns,omitempty"`
	Failed string        `json:"failed,omitempty"`
}

// Report is the digest now.
func (d *Digest) Report() RunReport {
	rep := RunReport{Run: d.run, Final: events.Metrics{}, Metrics: map[string]MetricSummary{},
		Anomalies: append([]Anomaly{}, d.anomalies...), AnomaliesDropped: d.dropped, Alerts: map[string]int{},
		Checkpoints: append([]CheckpointInfo{}, d.ckpts...), SampleBatch: d.batches, LatestSample: d.sample,
		Problems: d.logs, Reliability: []Reliability{}}
	if rep.Run.Status == "" {
		rep.Run.Status = "in progress"
	}
	for k, v := range d.alerts {
		rep.Alerts[k] = v
	}
	sum := d.mon.Summary()
	recent := map[string]Trend{}
	for _, t := range sum.Trends {
		recent[t.Metric] = t
	}
	for name, m := range d.metrics {
		ms := MetricSummary{First: Num(m.first), FirstStep: m.firstStep, Last: Num(m.last), LastStep: m.lastStep,
			Stats: statsOfRunning(&m.run), Trend: m.trend(d.th.TrendWindow)}
		if t, ok := recent[name]; ok {
			ms.Recent = &t
		}
		rep.Metrics[name] = ms
		rep.Final[name] = m.last
	}
	if sum.Reliability != nil {
		rep.Reliability = sum.Reliability
	}
	rep.Completions = sum.Completions
	return rep
}

// Window is the number of values the recent trends are fitted over.
func (d *Digest) Window() int { return d.th.TrendWindow }
