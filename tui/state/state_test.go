package state

import (
	"math"
	"testing"
	"time"

	"rlhfstation/engine/events"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func step(s int, m events.Metrics) events.Event {
	return events.Event{Type: events.Step, Step: s, Time: t0.Add(time.Duration(s) * 2 * time.Second), Metrics: m}
}

func TestApplyAndSeries(t *testing.T) {
	r := New()
	r.Apply(events.Event{Type: events.RunStart, Time: t0, Run: "r1", Model: "m", Device: "cpu", Preset: "math", TotalSteps: 10,
		Config: map[string]any{"beta": 0.04, "baselines": map[string]any{"word": 40.0, "phrase": 50.0, "sentence": 60.0}}})
	r.Apply(step(1, events.Metrics{"kl": 0.1, "reward": 0.5}))
	r.Apply(step(2, events.Metrics{"kl": math.NaN()}))
	r.Apply(step(3, events.Metrics{"kl": 0.3, "reward": 0.7, "ppl/baseline/aggregate": 55}))
	if got := r.Series("kl"); len(got) != 3 || got[0] != 0.1 || !math.IsNaN(got[1]) || got[2] != 0.3 {
		t.Errorf("kl series %v", got)
	}
	if v, ok := r.At("reward", 2); !ok || v != 0.5 {
		t.Errorf("reward at step 2 = %v %v, want the value of step 1", v, ok)
	}
	if _, ok := r.At("reward", 0); ok {
		t.Error("reward before any step")
	}
	if v, _ := r.Last("reward"); v != 0.7 || r.Step != 3 {
		t.Errorf("last reward %v, step %d", v, r.Step)
	}
	if b := r.Baselines; b.Word != 40 || b.Phrase != 50 || b.Sentence != 60 || b.Aggregate != 55 {
		t.Errorf("baselines %+v", b)
	}
	if v, ok := r.ConfigNumber("beta"); !ok || v != 0.04 {
		t.Errorf("beta %v", v)
	}
	if r.Sum("kl") != 0.4 {
		t.Errorf("sum skips NaN: %v", r.Sum("kl"))
	}
}

func TestElapsedAndETA(t *testing.T) {
	r := New()
	r.Apply(events.Event{Type: events.RunStart, Time: t0, TotalSteps: 100})
	for s := 1; s <= 20; s++ {
		r.Apply(step(s, events.Metrics{"perf/step_seconds": 3}))
	}
	now := t0.Add(time.Minute)
	if got := r.Elapsed(now); got != time.Minute {
		t.Errorf("elapsed %v", got)
	}
	if eta, ok := r.ETA(now); !ok || eta != 80*3*time.Second {
		t.Errorf("ETA %v %v, want 80 steps × 3 s", eta, ok)
	}
	// Without step timings: elapsed per step so far.
	r2 := New()
	r2.Apply(events.Event{Type: events.RunStart, Time: t0, TotalSteps: 4})
	r2.Apply(step(1, events.Metrics{"loss": 1}))
	if eta, ok := r2.ETA(t0.Add(10 * time.Second)); !ok || eta != 30*time.Second {
		t.Errorf("ETA from elapsed %v %v", eta, ok)
	}
	r.Apply(events.Event{Type: events.RunEnd, Time: t0.Add(70 * time.Second), Status: "stopped"})
	if _, ok := r.ETA(now); ok {
		t.Error("ETA after run_end")
	}
	if got := r.Elapsed(t0.Add(time.Hour)); got != 70*time.Second {
		t.Errorf("elapsed of an ended run %v, want start to run_end", got)
	}
}

func TestTrend(t *testing.T) {
	r := New()
	for s := 1; s <= 20; s++ {
		r.Apply(step(s, events.Metrics{"up": float64(s), "down": 100 - float64(s), "flat": 5 + 0.001*float64(s%2), "zero": 0}))
	}
	for name, want := range map[string]Trend{"up": Rising, "down": Falling, "flat": Stable, "zero": Stable, "none": Unknown} {
		if got := r.TrendOf(name); got != want {
			t.Errorf("trend of %s = %v, want %v", name, got, want)
		}
	}
}

func TestCheckpointsMerge(t *testing.T) {
	r := New()
	r.AddFolderCheckpoint("/data/runs/x/checkpoints/step-000040", 40)
	r.Apply(events.Event{Type: events.Checkpoint, Step: 20, Path: "runs/x/checkpoints/step-000020", Health: &events.Health{Score: 0.9}})
	r.Apply(events.Event{Type: events.Checkpoint, Step: 40, Path: "runs/x/checkpoints/step-000040", Health: &events.Health{Score: 0.8}})
	r.AddFolderCheckpoint("/data/runs/x/checkpoints/step-000020", 20)
	if len(r.Checkpoints) != 2 {
		t.Fatalf("%d checkpoints, want 2: %+v", len(r.Checkpoints), r.Checkpoints)
	}
	for i, c := range r.Checkpoints {
		want := []int{20, 40}[i]
		if c.Step != want || c.Health == nil || !c.Event || c.Location() != "/data/runs/x/checkpoints/"+[]string{"step-000020", "step-000040"}[i] {
			t.Errorf("checkpoint %d: %+v (location %s)", i, c, c.Location())
		}
	}
}

func TestSamplesKept(t *testing.T) {
	r := New()
	for s := 1; s <= keepSamples+5; s++ {
		r.Apply(events.Event{Type: events.Samples, Step: s, Samples: []events.Sample{{Prompt: "p"}}})
	}
	if len(r.Samples) != keepSamples || r.SamplesSeen != keepSamples+5 || r.Samples[0].Step != 6 {
		t.Errorf("kept %d (first step %d), seen %d", len(r.Samples), r.Samples[0].Step, r.SamplesSeen)
	}
}

// A long run keeps a bounded number of points per metric: the recent ones whole, a non-finite
// point never thinned away, and sums exact.
func TestLongRunIsThinned(t *testing.T) {
	r := New()
	const n = 100000
	for s := 1; s <= n; s++ {
		v := float64(s % 7)
		if s == 1234 {
			v = math.NaN()
		}
		r.Apply(events.Event{Type: events.Step, Step: s, Metrics: events.Metrics{"x": v, "d": 2}})
	}
	ps := r.Points("x")
	if len(ps) >= 2*maxPoints || len(ps) < maxPoints {
		t.Fatalf("%d points kept", len(ps))
	}
	nan := 0
	for i, p := range ps {
		if math.IsNaN(p.Value) {
			nan++
			if p.Step != 1234 {
				t.Errorf("NaN at step %d", p.Step)
			}
		}
		if i > 0 && p.Step <= ps[i-1].Step {
			t.Fatalf("steps out of order at %d", i)
		}
	}
	if nan != 1 {
		t.Errorf("%d NaN points kept, want 1", nan)
	}
	if last := ps[len(ps)-1]; last.Step != n {
		t.Errorf("last point at step %d", last.Step)
	}
	// The latest maxPoints steps are whole.
	tail := ps[len(ps)-maxPoints:]
	if tail[0].Step != n-maxPoints+1 {
		t.Errorf("recent points thinned: %d", tail[0].Step)
	}
	if r.Sum("d") != 2*n {
		t.Errorf("sum %g", r.Sum("d"))
	}
}

// Elapsed time stands still while the run is paused and leaves the pause out afterwards.
func TestElapsedLeavesPausesOut(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := New()
	r.Apply(events.Event{Type: events.RunStart, Time: t0})
	r.Apply(events.Event{Type: events.Log, Message: "paused after step 3", Control: "pause", Time: t0.Add(10 * time.Second)})
	if got := r.Elapsed(t0.Add(70 * time.Second)); got != 10*time.Second {
		t.Errorf("paused: elapsed %v, want 10s", got)
	}
	r.Apply(events.Event{Type: events.Log, Message: "resumed after step 3", Control: "resume", Time: t0.Add(70 * time.Second)})
	if got := r.Elapsed(t0.Add(75 * time.Second)); got != 15*time.Second {
		t.Errorf("resumed: elapsed %v, want 15s", got)
	}
}
