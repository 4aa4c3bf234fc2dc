package monitor

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"rlhfstation/engine/events"
)

func TestDigest(t *testing.T) {
	d := NewDigest(DefaultThresholds())
	r := rand.New(rand.NewPCG(1, 2))
	d.Apply(events.Event{Type: events.RunStart, Run: "x", Source: "verl", TotalSteps: 200})
	for s := 1; s <= 200; s++ {
		kl := 0.0005*float64(s) + 0.002*r.NormFloat64()
		if s == 100 || s == 101 {
			kl = 5 // a spike: the whole-run trend still follows the start and the end
		}
		m := events.Metrics{"kl": kl, "noise": r.NormFloat64(), "falls": 10 - 0.01*float64(s) + 0.01*r.NormFloat64()}
		if s == 200 {
			m["noise"] = math.NaN()
		}
		d.Apply(events.Event{Type: events.Step, Step: s, Metrics: m})
	}
	for i := 0; i < maxAnomalies+5; i++ {
		d.Apply(events.Event{Type: events.Anomaly, Step: 7, Rule: "zscore", Metric: "kl"})
	}
	d.Apply(events.Event{Type: events.RunEnd, Status: "completed"})
	rep := d.Report()
	if rep.Run.Steps != 200 || rep.Run.LastStep != 200 || rep.Run.Status != "completed" || rep.Run.Source != "verl" {
		t.Fatalf("run %+v", rep.Run)
	}
	for name, want := range map[string]string{"kl": Increasing, "noise": Stable, "falls": Decreasing} {
		if got := rep.Metrics[name].Trend; got.Direction != want || got.Window != 30 {
			t.Errorf("%s: %+v, want %s", name, got, want)
		}
	}
	kl := rep.Metrics["kl"]
	if kl.Max != 5 || kl.N != 200 || kl.Recent == nil {
		t.Errorf("kl %+v", kl)
	}
	if n := rep.Metrics["noise"]; n.NonFinite != 1 || n.N != 199 || !math.IsNaN(float64(n.Last)) {
		t.Errorf("noise %+v", n)
	}
	if len(rep.Anomalies) != maxAnomalies || rep.AnomaliesDropped != 5 || rep.Alerts["zscore"] != maxAnomalies+5 {
		t.Errorf("%d anomalies kept, %d dropped", len(rep.Anomalies), rep.AnomaliesDropped)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"noise":"NaN"`) || !strings.Contains(string(b), `"last":"NaN"`) {
		t.Errorf("non-finite values not spelled out: %.300s", b)
	}
	// Memory per metric does not grow with the run.
	for _, m := range d.metrics {
		if len(m.head) > 2*30 || m.tail.len() > 30 {
			t.Errorf("digest keeps %d + %d values", len(m.head), m.tail.len())
		}
	}
}

// A short run compares its halves.
func TestDigestShortRun(t *testing.T) {
	d := NewDigest(DefaultThresholds())
	for s := 1; s <= 10; s++ {
		d.Apply(events.Event{Type: events.Step, Step: s, Metrics: events.Metrics{"x": float64(s)}})
	}
	tr := d.Report().Metrics["x"].Trend
	if tr.Direction != Increasing || tr.Window != 5 || tr.First != 3 || tr.Last != 8 {
		t.Errorf("%+v", tr)
	}
}
