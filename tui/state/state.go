// Package state accumulates a run's events (DESIGN §9) into what the panes draw: metric
// series, the latest samples, anomalies, checkpoints and the run's status. It is the only
// place the TUI interprets events.
package state

import (
	"math"
	"path/filepath"
	"sort"
	"time"

	"rlhfstation/engine/events"
)

// Limits on what is kept for display. A metric keeps every point up to maxPoints; beyond, its
// older half is thinned two to one, so that a run of any length (a 1 GB event file) fits in
// memory while the recent steps stay whole and a non-finite point is never thinned away.
const (
	keepSamples = 32
	keepLogs    = 100
	maxPoints   = 1 << 13
)

// Point is one metric value at a step.
type Point struct {
	Step  int
	Value float64
}

// Checkpoint is a saved checkpoint as the inspector lists it.
type Checkpoint struct {
	Step   int
	Path   string // as the checkpoint event wrote it (or the folder found, for those only on disk)
	Dir    string // the folder found in the run folder, when it was found there
	Time   time.Time
	Health *events.Health // nil when only found in the folder
	Event  bool           // announced by a checkpoint event (else found on disk)
}

// Baselines are the perplexity baselines B_l of DESIGN §6.1; zero means unknown.
type Baselines struct {
	Word, Phrase, Sentence, Aggregate float64
}

// Get returns the baseline of a level name (word, phrase, sentence, aggregate).
func (b Baselines) Get(level string) float64 {
	switch level {
	case "word":
		return b.Word
	case "phrase":
		return b.Phrase
	case "sentence":
		return b.Sentence
	case "aggregate":
		return b.Aggregate
	}
	return 0
}

// Run is the accumulated state of one run.
type Run struct {
	Name, Model, Device, Preset string
	// Source names the tool that wrote a run read from its files ("" for rlhfstation's own);
	// SamplesFrom says where its completions come from ("" when it logged none).
	Source, SamplesFrom string
	TotalSteps          int
	Params              *events.Params
	Config              map[string]any
	Started             bool
	StartTime           time.Time

	Step     int       // latest step seen
	LastTime time.Time // time of the latest event

	Samples     []events.Event // samples events, oldest first, the latest keepSamples
	SamplesSeen int            // samples events ever applied: Samples[i] is number SamplesSeen-len(Samples)+i
	Anomalies   []events.Event // anomaly events in arrival order
	Checkpoints []Checkpoint   // sorted by step
	Logs        []events.Event // the latest keepLogs log events

	Ended   bool
	Status  string // run_end status
	Reason  string
	EndTime time.Time

	Baselines Baselines
	Events    int // events applied

	// PausedAt is when the run paused ("paused" log event), zero while it runs; Paused is the
	// time spent paused before it, which the elapsed time leaves out.
	PausedAt time.Time
	Paused   time.Duration

	metrics map[string][]Point
	sums    map[string]float64 // of every finite value, thinned or not
}

// New returns an empty run.
func New() *Run { return &Run{metrics: map[string][]Point{}, sums: map[string]float64{}} }

// Apply folds one event into the run.
func (r *Run) Apply(e events.Event) {
	r.Events++
	if !e.Time.IsZero() && e.Time.After(r.LastTime) {
		r.LastTime = e.Time
	}
	if e.Step > r.Step {
		r.Step = e.Step
	}
	switch e.Type {
	case events.RunStart:
		r.Started = true
		r.Name, r.Model, r.Device, r.Preset = e.Run, e.Model, e.Device, e.Preset
		r.TotalSteps, r.Params, r.Config = e.TotalSteps, e.Params, e.Config
		r.StartTime = e.Time
		r.Source = e.Source
		r.SamplesFrom, _ = e.Config["samples_from"].(string)
		r.Baselines = baselinesFromConfig(e.Config, r.Baselines)
	case events.Step:
		names := make([]string, 0, len(e.Metrics))
		for k := range e.Metrics {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v := e.Metrics[k]
			r.metrics[k] = thin(append(r.metrics[k], Point{e.Step, v}))
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				r.sums[k] += v
			}
		}
		r.Baselines = baselinesFromMetrics(e.Metrics, r.Baselines)
	case events.Samples:
		r.Samples = append(r.Samples, e)
		r.SamplesSeen++
		if len(r.Samples) > keepSamples {
			r.Samples = r.Samples[len(r.Samples)-keepSamples:]
		}
	case events.Anomaly:
		r.Anomalies = append(r.Anomalies, e)
	case events.Checkpoint:
		r.addCheckpoint(Checkpoint{Step: e.Step, Path: e.Path, Time: e.Time, Health: e.Health, Event: true})
	case events.Log:
		// The engine marks its pause and resume with Control (older runs: the message alone).
		pause := e.Control == "pause" || e.Message == "paused"
		resume := e.Control == "resume" || e.Message == "resumed"
		switch {
		case pause && r.PausedAt.IsZero() && !e.Time.IsZero():
			r.PausedAt = e.Time
		case resume && !r.PausedAt.IsZero():
			if e.Time.After(r.PausedAt) {
				r.Paused += e.Time.Sub(r.PausedAt)
			}
			r.PausedAt = time.Time{}
		}
		r.Logs = append(r.Logs, e)
		if len(r.Logs) > keepLogs {
			r.Logs = r.Logs[len(r.Logs)-keepLogs:]
		}
	case events.RunEnd:
		r.Ended, r.Status, r.Reason, r.EndTime = true, e.Status, e.Reason, e.Time
	}
}

// AddFolderCheckpoint records a checkpoint folder found on disk; one its event already
// announced (same folder name) keeps what the event said and learns where it lies.
func (r *Run) AddFolderCheckpoint(dir string, step int) {
	r.addCheckpoint(Checkpoint{Step: step, Path: dir, Dir: dir})
}

// Location is where the checkpoint can be opened: the folder found on disk when known, else
// the path its event gave.
func (c Checkpoint) Location() string {
	if c.Dir != "" {
		return c.Dir
	}
	return c.Path
}

func (r *Run) addCheckpoint(c Checkpoint) {
	for i, old := range r.Checkpoints {
		if samePath(old.Path, c.Path) {
			switch {
			case c.Event: // the event knows more than the folder listing
				c.Dir = old.Dir
				r.Checkpoints[i] = c
			case old.Dir == "":
				r.Checkpoints[i].Dir = c.Dir
			}
			return
		}
	}
	r.Checkpoints = append(r.Checkpoints, c)
	sort.SliceStable(r.Checkpoints, func(i, j int) bool { return r.Checkpoints[i].Step < r.Checkpoints[j].Step })
}

// samePath matches a checkpoint path written by the engine (often relative to where it ran)
// with one listed from the run folder: same folder name under a "checkpoints" parent.
func samePath(a, b string) bool {
	if a == b {
		return true
	}
	return filepath.Base(a) == filepath.Base(b) &&
		filepath.Base(filepath.Dir(a)) == filepath.Base(filepath.Dir(b))
}

// Points returns the recorded values of a metric, in step order.
func (r *Run) Points(name string) []Point { return r.metrics[name] }

// Series returns the values of a metric.
func (r *Run) Series(name string) []float64 {
	ps := r.metrics[name]
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = p.Value
	}
	return out
}

// Has reports whether a metric was ever recorded.
func (r *Run) Has(name string) bool { return len(r.metrics[name]) > 0 }

// Last returns the latest value of a metric.
func (r *Run) Last(name string) (float64, bool) {
	ps := r.metrics[name]
	if len(ps) == 0 {
		return 0, false
	}
	return ps[len(ps)-1].Value, true
}

// At returns a metric's value at a step, or the latest value before it.
func (r *Run) At(name string, step int) (float64, bool) {
	ps := r.metrics[name]
	i := sort.Search(len(ps), func(i int) bool { return ps[i].Step > step })
	if i == 0 {
		return 0, false
	}
	return ps[i-1].Value, true
}

// Sum adds up every finite value of a metric (digits seen over the run, say).
func (r *Run) Sum(name string) float64 { return r.sums[name] }

// thin halves the older half of a series that reached 2·maxPoints points, keeping of each
// pair the non-finite point if there is one, else the one farther from the pair's neighbours'
// mean (a spike survives).
func thin(ps []Point) []Point {
	if len(ps) < 2*maxPoints {
		return ps
	}
	old := ps[:maxPoints]
	out := make([]Point, 0, maxPoints/2+len(ps)-maxPoints)
	for i := 0; i+1 < len(old); i += 2 {
		a, b := old[i], old[i+1]
		switch {
		case !finite(a.Value):
			out = append(out, a)
		case !finite(b.Value):
			out = append(out, b)
		default:
			ref := a.Value
			if len(out) > 0 && finite(out[len(out)-1].Value) {
				ref = out[len(out)-1].Value
			}
			if math.Abs(a.Value-ref) > math.Abs(b.Value-ref) {
				out = append(out, a)
			} else {
				out = append(out, b)
			}
		}
	}
	return append(out, ps[maxPoints:]...)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// MetricNames lists the recorded metrics, sorted.
func (r *Run) MetricNames() []string {
	out := make([]string, 0, len(r.metrics))
	for k := range r.metrics {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Elapsed is the run's working time: start to end for a finished run, start to now
// otherwise, less the time it spent paused (it stands still while paused).
func (r *Run) Elapsed(now time.Time) time.Duration {
	if r.StartTime.IsZero() {
		return 0
	}
	end := now
	if r.Ended && !r.EndTime.IsZero() {
		end = r.EndTime
	}
	if end.Before(r.LastTime) {
		end = r.LastTime
	}
	if !r.PausedAt.IsZero() && !r.Ended {
		end = r.PausedAt
	}
	return end.Sub(r.StartTime) - r.Paused
}

// ETA estimates the time to the last step from the mean of the latest step durations
// (perf/step_seconds over the last 10 steps), else from the mean so far.
func (r *Run) ETA(now time.Time) (time.Duration, bool) {
	if r.Ended || r.TotalSteps <= 0 || r.Step <= 0 || r.Step >= r.TotalSteps {
		return 0, false
	}
	per := 0.0
	if ps := r.metrics["perf/step_seconds"]; len(ps) > 0 {
		n := 0
		for i := len(ps) - 1; i >= 0 && n < 10; i-- {
			if v := ps[i].Value; v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				per += v
				n++
			}
		}
		if n > 0 {
			per /= float64(n)
		}
	}
	if per == 0 {
		per = r.Elapsed(now).Seconds() / float64(r.Step)
	}
	if per <= 0 {
		return 0, false
	}
	return time.Duration(per * float64(r.TotalSteps-r.Step) * float64(time.Second)), true
}

// LatestSamples returns the most recent samples event, if any.
func (r *Run) LatestSamples() (events.Event, bool) {
	if len(r.Samples) == 0 {
		return events.Event{}, false
	}
	return r.Samples[len(r.Samples)-1], true
}

// Trend says which way a metric has been moving.
type Trend int

const (
	Unknown Trend = iota
	Stable
	Rising
	Falling
)

// TrendWindow is how many of the latest points a display trend looks at.
const TrendWindow = 10

// TrendOf is the display trend of a metric: the least-squares slope over the last TrendWindow
// points, projected over the window, relative to the mean magnitude; beyond ±0.5% it rises or
// falls. (The monitor's own trends, DESIGN §15, arrive as anomalies; this is only the arrow.)
func (r *Run) TrendOf(name string) Trend { return r.TrendOver(name, TrendWindow) }

// TrendOver is TrendOf over the latest n points, or over the whole run when n ≤ 0.
func (r *Run) TrendOver(name string, last int) Trend {
	ps := r.metrics[name]
	if last > 0 && len(ps) > last {
		ps = ps[len(ps)-last:]
	}
	var xs, ys []float64
	for _, p := range ps {
		if !math.IsNaN(p.Value) && !math.IsInf(p.Value, 0) {
			xs = append(xs, float64(p.Step))
			ys = append(ys, p.Value)
		}
	}
	n := float64(len(xs))
	if n < 3 {
		return Unknown
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, mag float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
		mag += math.Abs(ys[i])
	}
	mag /= n
	if sxx == 0 {
		return Stable
	}
	change := sxy / sxx * (xs[len(xs)-1] - xs[0])
	if mag == 0 {
		if change == 0 {
			return Stable
		}
		mag = math.Abs(change)
	}
	switch rel := change / mag; {
	case rel > 0.005:
		return Rising
	case rel < -0.005:
		return Falling
	}
	return Stable
}

// BaselinesFrom reads the baselines of a run_start config and of step metrics
// "ppl/baseline/<level>" (the metrics win).
func BaselinesFrom(cfg map[string]any, m events.Metrics) Baselines {
	return baselinesFromMetrics(m, baselinesFromConfig(cfg, Baselines{}))
}

// baselinesFromConfig reads run_start's config["baselines"] = {word, phrase, sentence,
// aggregate?} (numbers).
func baselinesFromConfig(cfg map[string]any, b Baselines) Baselines {
	m, ok := cfg["baselines"].(map[string]any)
	if !ok {
		return b
	}
	set := func(dst *float64, k string) {
		if v, ok := number(m[k]); ok && v > 0 {
			*dst = v
		}
	}
	set(&b.Word, "word")
	set(&b.Phrase, "phrase")
	set(&b.Sentence, "sentence")
	set(&b.Aggregate, "aggregate")
	return b
}

// baselinesFromMetrics reads baselines sent as step metrics "ppl/baseline/<level>".
func baselinesFromMetrics(m events.Metrics, b Baselines) Baselines {
	for _, l := range []struct {
		dst *float64
		k   string
	}{{&b.Word, "word"}, {&b.Phrase, "phrase"}, {&b.Sentence, "sentence"}, {&b.Aggregate, "aggregate"}} {
		if v, ok := m["ppl/baseline/"+l.k]; ok && v > 0 && !math.IsInf(v, 0) {
			*l.dst = v
		}
	}
	return b
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// ConfigNumber reads a number from the run's config by key (top level), e.g. "beta".
func (r *Run) ConfigNumber(key string) (float64, bool) { return number(r.Config[key]) }
