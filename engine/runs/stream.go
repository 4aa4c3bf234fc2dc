package runs

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
)

// Options tune Stream.
type Options struct {
	// Follow keeps reading files as they grow, until the run ends or the context does.
	Follow bool
	// Poll is how often followed files are checked for more (250 ms when 0).
	Poll time.Duration
	// Thresholds for the monitor that watches another tool's metrics (DefaultThresholds when
	// zero). rlhfstation's own runs carry their alerts in events.jsonl.
	Thresholds *monitor.Thresholds
}

func (o Options) poll() time.Duration {
	if o.Poll <= 0 {
		return 250 * time.Millisecond
	}
	return o.Poll
}

// settle is how long a followed TensorBoard step waits for more of its tags before it is
// shown: writers put one step's scalars out together, so a pause means the step is complete.
func (o Options) settle() time.Duration { return 2 * o.poll() }

// rescanEvery is how often a followed run's folder is searched for new checkpoints and
// completions files.
const rescanEvery = 2 * time.Second

// maxSamples bounds the completions kept from one step (verl dumps the whole batch).
const maxSamples = 64

// Stream sends the run's events on the returned channel, which closes at the end: everything
// already written, then, with Follow, what is appended later, until run_end or ctx ends. For
// another tool's run the stream starts with a log event saying what was found, then run_start,
// then per logged step a step event (DESIGN §5 names) followed by the monitor's anomalies and
// the completions logged at that step; a closing log event lists the metrics that kept their
// own names. Problems with the files (unreadable, torn, damaged records) arrive as log events
// of level "warn" or "error" naming the file and the place.
func (r *Run) Stream(ctx context.Context, o Options) <-chan events.Event {
	ch := make(chan events.Event, 256)
	go func() {
		defer close(ch)
		send := func(e events.Event) bool {
			select {
			case ch <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if r.Kind == KindOwn {
			streamOwn(ctx, r.Source, o, send)
			return
		}
		p := newPipeline(ctx, r, o, send)
		var err error
		switch r.Format {
		case FormatTensorBoard:
			err = (&tbSource{files: r.Files, dir: r.Source}).run(p)
		case FormatTrainerState:
			err = (&historySource{}).run(p)
		case FormatVerlLog:
			err = (&verlSource{}).run(p)
		case FormatWandb:
			err = (&wandbSource{}).run(p)
		}
		p.finish(err)
	}()
	return ch
}

// rawStep is one logged step in the tool's own names.
type rawStep struct {
	Step   int
	Time   time.Time
	Values map[string]float64
	Texts  map[string]string // text summaries (OpenRLHF's generated sample)
}

func (s *rawStep) empty() bool { return len(s.Values) == 0 && len(s.Texts) == 0 }

// pipeline turns raw steps into events: names mapped, the monitor run, completions and
// checkpoints interleaved by step.
type pipeline struct {
	ctx  context.Context
	run  *Run
	o    Options
	send func(events.Event) bool

	mon    *monitor.Monitor
	mapper *mapper

	started  bool
	ended    bool // the tool's own end-of-training record was read
	steps    int
	lastStep int
	lastTime time.Time
	total    int // planned steps, when the files say

	ckpts    map[string]bool
	lastScan time.Time
	warned   map[string]int
}

func newPipeline(ctx context.Context, r *Run, o Options, send func(events.Event) bool) *pipeline {
	p := &pipeline{ctx: ctx, run: r, o: o, send: send, mon: foreignMonitor(o), ckpts: map[string]bool{}, warned: map[string]int{}}
	if r.Kind != "" {
		p.mapper = newMapper(r.Kind)
	}
	p.total = plannedSteps(r)
	p.mon.Now = func() time.Time { return p.lastTime } // alerts carry the time of their step
	return p
}

// foreignMonitor is the monitor over another tool's metrics.
func foreignMonitor(o Options) *monitor.Monitor {
	th := monitor.DefaultThresholds()
	if o.Thresholds != nil {
		th = *o.Thresholds
	}
	// Timings and evaluation scores of other tools are noisy or sparse: no z-scores on them.
	th.ZSkip = append(th.ZSkip, "timing_s/", "timing_per_token_ms/", "timing/", "eval/", "val-core/", "val-aux/",
		"prompt_length/", "epoch", "num_tokens", "training/")
	th.EpochSteps = math.MaxInt32 // per-epoch statistics are not shown here; keep memory flat
	return monitor.New(th)
}

// alive reports whether the consumer still listens.
func (p *pipeline) alive() bool { return p.ctx.Err() == nil }

// wait sleeps one poll interval; false when ctx ended.
func (p *pipeline) wait() bool {
	select {
	case <-time.After(p.o.poll()):
		return true
	case <-p.ctx.Done():
		return false
	}
}

// start sends the detection note and run_start, once; t is the time of the first step when
// the files say.
func (p *pipeline) start(t ...time.Time) bool {
	if p.started {
		return true
	}
	p.started = true
	r := p.run
	if p.mapper == nil { // the tags never said: take names as they are
		r.Kind = KindTensorBoard
		p.mapper = newMapper(KindTensorBoard)
	}
	msg := "found " + r.Describe()
	for _, n := range r.Notes {
		msg += "; " + n
	}
	cfg := map[string]any{"source": r.Kind.Label(), "metrics_from": r.Source, "samples_from": r.Samples}
	if !p.send(events.Event{Type: events.Log, Time: p.lastTime, Level: "info", Message: msg}) {
		return false
	}
	start := events.Event{Type: events.RunStart, Run: r.Name, Model: baseModel(r.Dir), Source: r.Kind.Label(),
		TotalSteps: p.total, Config: cfg}
	if len(t) > 0 {
		start.Time = t[0]
	}
	return p.send(start)
}

// step takes one raw step; false when the consumer is gone.
func (p *pipeline) step(st rawStep) bool {
	if st.empty() {
		return true
	}
	if p.mapper == nil {
		tags := make([]string, 0, len(st.Values)+len(st.Texts))
		for k := range st.Values {
			tags = append(tags, k)
		}
		for k := range st.Texts {
			tags = append(tags, k)
		}
		if k := kindOfTags(tags); k != "" {
			p.run.Kind = k
			p.mapper = newMapper(k)
		}
	}
	if !p.start(st.Time) {
		return false
	}
	metrics, ended := p.mapper.apply(st.Values)
	if ended {
		p.ended = true
	}
	if !st.Time.IsZero() {
		p.lastTime = st.Time
	}
	if len(metrics) > 0 {
		p.steps++
		p.lastStep = st.Step
		if !p.send(events.Event{Type: events.Step, Time: st.Time, Step: st.Step, Metrics: metrics}) {
			return false
		}
		for _, a := range p.mon.Observe(st.Step, metrics) {
			if !p.send(a) {
				return false
			}
		}
	}
	for _, tag := range sortedKeys(st.Texts) {
		if s, ok := parseGeneratedSample(tag, st.Texts[tag]); ok && !p.samples(st.Step, st.Time, []events.Sample{s}) {
			return false
		}
	}
	if p.run.samples != nil {
		for _, b := range p.run.samples.upTo(st.Step, p.warn) {
			if !p.samples(b.step, st.Time, b.samples) {
				return false
			}
		}
	}
	return p.scan(false)
}

// samples sends one batch of completions and what the monitor makes of it.
func (p *pipeline) samples(step int, t time.Time, ss []events.Sample) bool {
	if len(ss) == 0 {
		return true
	}
	if !p.send(events.Event{Type: events.Samples, Time: t, Step: step, Samples: ss}) {
		return false
	}
	for _, a := range p.mon.ObserveSamples(step, ss) {
		if !p.send(a) {
			return false
		}
	}
	return true
}

// scan sends checkpoint events for checkpoint folders not seen yet; while following it looks
// again every rescanEvery (force: now).
func (p *pipeline) scan(force bool) bool {
	if !force && !p.lastScan.IsZero() && (!p.o.Follow || time.Since(p.lastScan) < rescanEvery) {
		return true
	}
	p.lastScan = time.Now()
	cps, err := Checkpoints(p.run.Dir)
	if err != nil {
		p.warn("checkpoints", fmt.Sprintf("listing the checkpoints of %s: %v", p.run.Dir, err))
	}
	for _, c := range cps {
		if p.ckpts[c.Path] {
			continue
		}
		p.ckpts[c.Path] = true
		if !p.send(events.Event{Type: events.Checkpoint, Time: modTime(c.Path), Step: c.Step, Path: c.Path}) {
			return false
		}
	}
	if p.run.samples != nil && p.o.Follow {
		p.run.samples.rescan()
	}
	return true
}

// idle is called by a following source that found nothing new: it starts the run (so the
// screen shows what is known) and rescans the folder now and then.
func (p *pipeline) idle() bool {
	if !p.start() {
		return false
	}
	return p.scan(false)
}

// warn sends a warning once per key (later ones are counted and summed up at the end).
func (p *pipeline) warn(key, msg string) {
	p.warned[key]++
	if p.warned[key] > 1 {
		return
	}
	p.send(events.Event{Type: events.Log, Time: p.lastTime, Level: "warn", Message: msg})
}

// finish sends what is left: the remaining completions, the unmapped names and run_end.
func (p *pipeline) finish(err error) {
	if !p.alive() || !p.start() {
		return
	}
	p.scan(true)
	if p.run.samples != nil {
		for _, b := range p.run.samples.upTo(math.MaxInt, p.warn) {
			if !p.samples(b.step, p.lastTime, b.samples) {
				return
			}
		}
	}
	for key, n := range p.warned {
		if n > 1 {
			p.send(events.Event{Type: events.Log, Time: p.lastTime, Level: "warn", Message: fmt.Sprintf("%s: %d more like the warning above", key, n-1)})
		}
	}
	if u := p.mapper.Unmapped(); len(u) > 0 {
		p.send(events.Event{Type: events.Log, Time: p.lastTime, Level: "info", Message: fmt.Sprintf(
			"%d metric(s) kept their %s names (no DESIGN §5 equivalent): %s", len(u), p.run.Kind.Label(), strings.Join(u, ", "))})
	}
	end := events.Event{Type: events.RunEnd, Time: p.lastTime, Step: p.lastStep}
	switch {
	case err != nil:
		p.send(events.Event{Type: events.Log, Time: p.lastTime, Level: "error", Message: err.Error()})
		end.Status, end.Reason = "failed", "reading the run: "+err.Error()
	case p.ended || (p.total > 0 && p.lastStep >= p.total):
		end.Status, end.Reason = "completed", fmt.Sprintf("%s logged the end of training", p.run.Kind.Label())
	case p.steps == 0:
		end.Status, end.Reason = "ended", "no step was logged yet"
	default:
		end.Status, end.Reason = "ended", fmt.Sprintf("the log ends at step %d; whether the run finished is not recorded (--follow keeps watching a live run)", p.lastStep)
	}
	p.send(end)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func modTime(p string) time.Time {
	if fi, err := statFile(p); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

// relTo shows p relative to dir when inside it.
func relTo(dir, p string) string {
	if rel, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}
