package monitor

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func TestFitLine(t *testing.T) {
	f := fitLine([]float64{1, 3, 5, 7, 9})
	if !near(f.Slope, 2, 1e-12) || !near(f.Intercept, 1, 1e-12) || f.Resid > 1e-12 || !near(f.R2, 1, 1e-12) || !near(f.Change(), 8, 1e-12) {
		t.Fatalf("exact line: %+v", f)
	}
	// y = 0, 1, 0, 1: slope 0.2 (Sxy = 1, Sxx = 5), SSE = 1 − 0.2 = 0.8, resid √(0.8/2).
	f = fitLine([]float64{0, 1, 0, 1})
	if !near(f.Slope, 0.2, 1e-12) || !near(f.Resid, math.Sqrt(0.4), 1e-12) || !near(f.SlopeSE, math.Sqrt(0.4)/math.Sqrt(5), 1e-12) || !near(f.R2, 0.2, 1e-12) {
		t.Fatalf("0,1,0,1: %+v", f)
	}
}

func TestTrendDirections(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	noisy := func(slope, sd float64) []float64 {
		y := make([]float64, 30)
		for i := range y {
			y[i] = 5 + slope*float64(i) + sd*r.NormFloat64()
		}
		return y
	}
	cases := []struct {
		y    []float64
		want string
	}{
		{noisy(0.05, 0.1), Increasing},  // t ≈ 0.05/(0.1/47) ≈ 23
		{noisy(-0.05, 0.1), Decreasing}, //
		{noisy(0, 0.1), Stable},         // no slope
		{noisy(0.001, 0.1), Stable},     // t ≈ 0.5: lost in the noise
		{[]float64{2, 2, 2, 2, 2}, Stable},
		{[]float64{1, 2, 3, 4, 5}, Increasing}, // a perfect line
	}
	for i, c := range cases {
		if got := trendOf("m", c.y, 2); got.Direction != c.want {
			t.Errorf("case %d: %s, want %s (%+v)", i, got.Direction, c.want, got)
		}
	}
}

func TestReliability(t *testing.T) {
	// mean 1, sample std √(1.5·4/3)… computed by hand: values 0,0,0,0,0,0,0,0,0,10.
	y := []float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 10}
	r := ReliabilityOf("reward", y)
	std := math.Sqrt((9*1 + 81) / 9.0) // Σ(x−1)² = 9·1 + 81, over n−1
	if !near(r.Mean, 1, 1e-12) || !near(r.Std, std, 1e-12) || !near(r.Variance, std*std, 1e-12) ||
		!near(r.Stability, 1/std, 1e-12) || !near(r.Consistency, 0.9, 1e-12) {
		t.Fatalf("%+v", r)
	}
	c := ReliabilityOf("reward", []float64{0.5, 0.5, 0.5})
	if c.Stability != 0 || c.Consistency != 1 || c.Variance != 0 {
		t.Fatalf("constant reward: %+v", c)
	}
}

func TestEpochsAndSummary(t *testing.T) {
	th := DefaultThresholds()
	th.EpochSteps = 4
	m := New(th)
	for i := 1; i <= 10; i++ {
		mt := events.Metrics{"reward": float64(i), "loss": 1}
		if i == 3 {
			mt["loss"] = math.NaN()
		}
		m.Observe(100+i, mt)
	}
	s := m.Summary()
	if s.Steps != 10 || s.LastStep != 110 || len(s.Epochs) != 3 {
		t.Fatalf("summary: steps %d last %d epochs %d", s.Steps, s.LastStep, len(s.Epochs))
	}
	e0, e2 := s.Epochs[0], s.Epochs[2]
	r0 := e0.Metrics["reward"]
	if e0.FirstStep != 101 || e0.LastStep != 104 || e0.Steps != 4 || e0.Partial ||
		r0.N != 4 || r0.Mean != 2.5 || !near(r0.Std, math.Sqrt(5.0/3), 1e-12) || r0.Min != 1 || r0.Max != 4 {
		t.Fatalf("epoch 0: %+v reward %+v", e0, r0)
	}
	if l := e0.Metrics["loss"]; l.N != 3 || l.NonFinite != 1 || l.Mean != 1 {
		t.Fatalf("epoch 0 loss (one NaN): %+v", l)
	}
	if !e2.Partial || e2.Steps != 2 || e2.FirstStep != 109 || e2.Metrics["reward"].Mean != 9.5 {
		t.Fatalf("epoch in progress: %+v", e2)
	}
	if len(s.Trends) != 2 || s.Trends[1].Metric != "reward" || s.Trends[1].Direction != Increasing || s.Trends[0].Direction != Stable {
		t.Fatalf("trends: %+v", s.Trends)
	}
	if len(s.Reliability) != 1 || s.Reliability[0].Metric != "reward" || s.Reliability[0].Mean != 5.5 {
		t.Fatalf("reliability: %+v", s.Reliability)
	}
	if s.Alerts[RuleNonFinite] != 1 {
		t.Fatalf("alerts: %+v", s.Alerts)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatalf("summary must encode as JSON: %v", err)
	}
	if tr, ok := m.Trend("reward"); !ok || tr.Slope != 1 {
		t.Fatalf("Trend(reward): %+v %v", tr, ok)
	}
}

func TestSignals(t *testing.T) {
	s := Signals([]string{"the cat sat", "the cat ran!", "the cat sat"})
	// words: 9, distinct 4 (the, cat, sat, ran); bigrams 6, distinct 3 (the cat, cat sat, cat ran).
	if !near(s.Distinct1, 4.0/9, 1e-12) || !near(s.Distinct2, 3.0/6, 1e-12) || s.Repetition != 0 ||
		!near(s.Duplicates, 1.0/3, 1e-12) || s.MeanLength != 3 {
		t.Fatalf("%+v", s)
	}
	loop := Signals([]string{"a b c a b c a b c"}) // trigrams: abc bca cab abc bca cab abc → 4 repeats of 7
	if !near(loop.Repetition, 4.0/7, 1e-12) {
		t.Fatalf("loop repetition %v", loop.Repetition)
	}
}

// batch makes n completions of about `length` words, drawn from a vocabulary of v words.
func batch(r *rand.Rand, n, length, v int) []events.Sample {
	out := make([]events.Sample, n)
	for i := range out {
		w := make([]string, length+r.IntN(5))
		for j := range w {
			w[j] = "w" + string(rune('a'+r.IntN(v)%26)) + string(rune('a'+r.IntN(v)/26))
		}
		out[i].Completion = strings.Join(w, " ")
	}
	return out
}

func TestCompletionRules(t *testing.T) {
	run := func(fault func(i int) []events.Sample) []events.Event {
		r := rand.New(rand.NewPCG(9, 9))
		m := New(DefaultThresholds())
		m.Now = func() time.Time { return time.Unix(0, 0) }
		var out []events.Event
		for i := 1; i <= 40; i++ {
			b := batch(r, 8, 30, 400)
			if f := fault(i); f != nil {
				b = f
			}
			out = append(out, m.ObserveSamples(10*i, b)...)
		}
		return out
	}
	if evs := run(func(int) []events.Sample { return nil }); len(evs) != 0 {
		t.Fatalf("clean completions raised:%s", describe(evs))
	}
	// From batch 20 every completion loops on one phrase: repetition and diversity alerts at
	// once (the recent window averages 5 batches, so the first looping batch tips it).
	loop := strings.Repeat("buy now and save more ", 6)
	evs := run(func(i int) []events.Sample {
		if i < 20 {
			return nil
		}
		return []events.Sample{{Completion: loop}, {Completion: loop}, {Completion: loop}}
	})
	rules := map[string]int{}
	for _, e := range evs {
		rules[e.Rule] = e.Step
	}
	if len(evs) != 2 || rules[RuleRepetition] < 200 || rules[RuleRepetition] > 240 || rules[RuleDiversityDrop] < 200 || rules[RuleDiversityDrop] > 240 {
		t.Fatalf("looping completions:%s", describe(evs))
	}
	// From batch 20 completions are three times longer: one length_drift.
	r := rand.New(rand.NewPCG(1, 1))
	evs = run(func(i int) []events.Sample {
		if i < 20 {
			return nil
		}
		return batch(r, 8, 100, 4000)
	})
	if len(evs) != 1 || evs[0].Rule != RuleLengthDrift || evs[0].Step < 200 || evs[0].Step > 240 || evs[0].Value < 1 {
		t.Fatalf("longer completions:%s", describe(evs))
	}
	// The alert's value is the one its message states, in the unit it names.
	if want := fmt.Sprintf("drift %+.3f (recent/early − 1)", evs[0].Value); !strings.Contains(evs[0].Message, want) {
		t.Errorf("length_drift value %v, message %q", evs[0].Value, evs[0].Message)
	}
}

func TestResources(t *testing.T) {
	if n, err := parseStatm([]byte("1000 250 30 1 0 200 0\n"), 4096); err != nil || n != 250*4096 {
		t.Fatalf("statm: %d %v", n, err)
	}
	if _, err := parseStatm([]byte("12"), 4096); err == nil {
		t.Fatal("a one-field statm should be an error")
	}
	if rss, err := RSS(); err == nil && rss == 0 {
		t.Fatal("RSS read as 0")
	}
	if GoHeap() == 0 {
		t.Fatal("Go heap read as 0")
	}
	var s Sampler
	t0 := time.Unix(1000, 0)
	s.Start(t0)
	r := s.Sample(t0.Add(2*time.Second), 1000)
	if r.TokensPerSecond != 500 {
		t.Fatalf("tokens/s %v, want 500", r.TokensPerSecond)
	}
	m := r.Metrics()
	if _, ok := m["mem/gpu_bytes"]; ok {
		t.Fatal("mem/gpu_bytes without a GPU")
	}
	if m["perf/tokens_per_second"] != 500 || m["mem/rss_bytes"] != float64(r.RSSBytes) {
		t.Fatalf("metrics: %v", m)
	}
}
