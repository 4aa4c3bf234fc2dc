package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
)

const streamSteps = 300

// stream is a synthetic run: a healthy GRPO run's metrics with Gaussian noise, which a fault
// may overwrite. Steps are numbered from 1.
type stream struct {
	rng   *rand.Rand
	steps []events.Metrics
}

// cleanStream: reward rising, KL creeping up, entropy slowly falling, memory that grows during
// a warm-up and then holds, everything else flat with noise.
func cleanStream(seed uint64) *stream {
	s := &stream{rng: rand.New(rand.NewPCG(seed, 7))}
	n := func(sd float64) float64 { return sd * s.rng.NormFloat64() }
	for i := 1; i <= streamSteps; i++ {
		t := float64(i)
		m := events.Metrics{
			"loss":                    0.5 + n(0.05),
			"reward":                  0.2 + 0.003*t + n(0.02),
			"reward_std":              0.3 + n(0.02),
			"frac_reward_zero_std":    math.Min(1, math.Max(0, 0.1+n(0.03))),
			"kl":                      0.01 + 0.0002*t + n(0.003),
			"entropy":                 2.0 - 0.002*t + n(0.05),
			"grad_norm":               math.Abs(0.8 + n(0.1)),
			"learning_rate":           1e-5,
			"completions/mean_length": 60 + n(5),
			"mem/rss_bytes":           2e9 + 5e8*math.Min(t, 20)/20 + n(2<<20),
			"perf/tokens_per_second":  500 + n(20),
		}
		s.steps = append(s.steps, m)
	}
	return s
}

// set overwrites metric name on steps lo..hi (inclusive) with f(step).
func (s *stream) set(name string, lo, hi int, f func(step int, old float64) float64) {
	for i := lo; i <= hi; i++ {
		s.steps[i-1][name] = f(i, s.steps[i-1][name])
	}
}

func runStream(t *testing.T, s *stream, th Thresholds) []events.Event {
	t.Helper()
	m := New(th)
	m.Now = func() time.Time { return time.Unix(0, 0) }
	var out []events.Event
	for i, mt := range s.steps {
		out = append(out, m.Observe(i+1, mt)...)
	}
	return out
}

func describe(evs []events.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  step %d %s %s %s: %s", e.Step, e.Rule, e.Metric, e.Severity, e.Message)
	}
	return b.String()
}

// expectOne asserts that the events are exactly one alert of rule on metric, at a step in
// [lo, hi], with the severity given.
func expectOne(t *testing.T, evs []events.Event, rule, metric, severity string, lo, hi int) events.Event {
	t.Helper()
	if len(evs) != 1 {
		t.Fatalf("want exactly one %s alert on %s in steps %d..%d, got %d:%s", rule, metric, lo, hi, len(evs), describe(evs))
	}
	e := evs[0]
	if e.Type != events.Anomaly || e.Rule != rule || e.Metric != metric || e.Severity != severity || e.Step < lo || e.Step > hi {
		t.Fatalf("want %s/%s (%s) in steps %d..%d, got:%s", rule, metric, severity, lo, hi, describe(evs))
	}
	if e.Message == "" {
		t.Fatalf("alert without a message: %+v", e)
	}
	return e
}

var seeds = []uint64{1, 2, 3, 4, 5, 6}

func TestCleanStreamsRaiseNothing(t *testing.T) {
	for _, seed := range seeds {
		if evs := runStream(t, cleanStream(seed), DefaultThresholds()); len(evs) != 0 {
			t.Errorf("seed %d: clean stream raised %d alerts:%s", seed, len(evs), describe(evs))
		}
	}
}

func TestKLSpike(t *testing.T) {
	for _, seed := range seeds {
		s := cleanStream(seed)
		s.set("kl", 150, 154, func(int, float64) float64 { return 0.5 })
		e := expectOne(t, runStream(t, s, DefaultThresholds()), RuleKL, "kl", events.Warning, 151, 151)
		if e.Value != 0.5 || !strings.Contains(e.Message, "0.3") {
			t.Fatalf("the message should give the value and the threshold: %+v", e)
		}
	}
}

func TestSlowRewardStall(t *testing.T) {
	// The rise slows from 0.003/step at step 120 to nothing at step 160, then the reward holds.
	// The rule fires when the trend is lost in the noise: over 200 seeds, steps 154..189.
	for _, seed := range seeds {
		s := cleanStream(seed)
		level := func(i int) float64 {
			t := float64(min(i, 160) - 120)
			return 0.2 + 0.003*120 + 0.003*t - 0.003*t*t/80
		}
		s.set("reward", 121, streamSteps, func(i int, old float64) float64 {
			return old - (0.2 + 0.003*float64(i)) + level(i)
		})
		expectOne(t, runStream(t, s, DefaultThresholds()), RuleRewardStall, "reward", events.Warning, 150, 195)
	}
}

// A reward that stays flat through the learning-rate warm-up and rises after it is a stall
// only when the monitor is not told of the warm-up.
func TestRewardFlatDuringWarmup(t *testing.T) {
	const warmup = 40
	for _, seed := range seeds {
		s := cleanStream(seed)
		s.set("reward", 1, streamSteps, func(i int, old float64) float64 {
			return old - 0.003*float64(i) + 0.003*float64(max(0, i-warmup))
		})
		m := New(DefaultThresholds())
		m.Now = func() time.Time { return time.Unix(0, 0) }
		m.WarmupSteps = warmup
		var told, untold []events.Event
		for i, mt := range s.steps {
			for _, e := range m.Observe(i+1, mt) {
				if e.Rule == RuleRewardStall {
					told = append(told, e)
				}
			}
		}
		for _, e := range runStream(t, s, DefaultThresholds()) {
			if e.Rule == RuleRewardStall {
				untold = append(untold, e)
			}
		}
		if len(told) != 0 || len(untold) == 0 {
			t.Fatalf("seed %d: stall alerts %d with the warm-up known (want 0), %d without (want some):%s", seed, len(told), len(untold), describe(untold))
		}
	}
}

func TestEntropyCollapse(t *testing.T) {
	// From step 120 entropy falls at 0.015/step (too slow for the z-score) to a floor of 0.2;
	// the limit is 0.3 × its early level ≈ 0.597, crossed near step 197.5; the rule needs 3 steps.
	for _, seed := range seeds {
		s := cleanStream(seed)
		s.set("entropy", 121, streamSteps, func(i int, old float64) float64 {
			clean := 2.0 - 0.002*float64(i)
			return old - clean + math.Max(0.2, 2.0-0.002*120-0.015*float64(i-120))
		})
		expectOne(t, runStream(t, s, DefaultThresholds()), RuleEntropyCollapse, "entropy", events.Warning, 195, 210)
	}
}

func TestNaNIsCriticalAtOnce(t *testing.T) {
	for _, seed := range seeds {
		s := cleanStream(seed)
		for _, name := range []string{"loss", "kl", "grad_norm"} {
			s.set(name, 200, 204, func(int, float64) float64 { return math.NaN() })
		}
		s.set("grad_norm", 203, 203, func(int, float64) float64 { return math.Inf(1) })
		e := expectOne(t, runStream(t, s, DefaultThresholds()), RuleNonFinite, "grad_norm", events.Critical, 200, 200)
		for _, name := range []string{"loss", "kl", "grad_norm"} {
			if !strings.Contains(e.Message, name+" is NaN") {
				t.Fatalf("message should name %s: %s", name, e.Message)
			}
		}
	}
	// Even inside the grace period.
	m := New(DefaultThresholds())
	if evs := m.Observe(1, events.Metrics{"loss": math.Inf(-1)}); len(evs) != 1 || evs[0].Rule != RuleNonFinite || evs[0].Value != 0 {
		t.Fatalf("step 1 -Inf: %+v", evs)
	}
}

func TestMemoryLeak(t *testing.T) {
	// 2 MiB a step from step 151 on 2.5 GB: the fitted growth over 100 steps passes 5% of the
	// level (≈119 MiB) near step 206.
	for _, seed := range seeds {
		s := cleanStream(seed)
		s.set("mem/rss_bytes", 151, streamSteps, func(i int, old float64) float64 { return old + float64(i-150)*(2<<20) })
		expectOne(t, runStream(t, s, DefaultThresholds()), RuleMemoryLeak, "mem/rss_bytes", events.Warning, 200, 215)
	}
}

func TestGradNormAndZeroStd(t *testing.T) {
	s := cleanStream(1)
	s.set("grad_norm", 100, 100, func(int, float64) float64 { return 20 })
	expectOne(t, runStream(t, s, DefaultThresholds()), RuleGradNorm, "grad_norm", events.Warning, 100, 100)

	s = cleanStream(1)
	s.set("frac_reward_zero_std", 100, 110, func(int, float64) float64 { return 0.95 })
	expectOne(t, runStream(t, s, DefaultThresholds()), RuleZeroStd, "frac_reward_zero_std", events.Warning, 102, 102)
}

func TestZScoreCatchesAJump(t *testing.T) {
	// completions/mean_length has no rule of its own: a step change is the z-score's.
	for _, seed := range seeds {
		s := cleanStream(seed)
		s.set("completions/mean_length", 180, streamSteps, func(_ int, old float64) float64 { return old + 50 })
		e := expectOne(t, runStream(t, s, DefaultThresholds()), RuleZScore, "completions/mean_length", events.Info, 180, 181)
		if !strings.Contains(e.Message, "standard deviations") {
			t.Fatalf("message: %s", e.Message)
		}
	}
}

func TestGraceAndCooldown(t *testing.T) {
	th := DefaultThresholds()
	// A fault inside the grace period is not reported while it lasts, only after.
	s := cleanStream(1)
	s.set("grad_norm", 5, 5, func(int, float64) float64 { return 50 })
	if evs := runStream(t, s, th); len(evs) != 0 {
		t.Fatalf("alert inside the grace period:%s", describe(evs))
	}
	// Two KL episodes: with a full recovery between them, two alerts; with a gap shorter than
	// the cool-down, one.
	s = cleanStream(1)
	s.set("kl", 100, 102, func(int, float64) float64 { return 0.5 })
	s.set("kl", 100+3+th.CooldownSteps, 100+5+th.CooldownSteps, func(int, float64) float64 { return 0.5 })
	if evs := runStream(t, s, th); len(evs) != 2 || evs[0].Step != 101 || evs[1].Step != 101+3+th.CooldownSteps {
		t.Fatalf("two separate episodes should give two alerts:%s", describe(evs))
	}
	s = cleanStream(1)
	s.set("kl", 100, 102, func(int, float64) float64 { return 0.5 })
	s.set("kl", 100+3+th.CooldownSteps-2, 100+5+th.CooldownSteps, func(int, float64) float64 { return 0.5 })
	if evs := runStream(t, s, th); len(evs) != 1 {
		t.Fatalf("a relapse inside the cool-down should not alert again:%s", describe(evs))
	}
}

func TestThresholdsOverride(t *testing.T) {
	th := DefaultThresholds()
	th.KLMax = 0.05
	s := cleanStream(1) // kl reaches 0.05 near step 200
	evs := runStream(t, s, th)
	if len(evs) != 1 || evs[0].Rule != RuleKL || evs[0].Step < 180 || evs[0].Step > 230 {
		t.Fatalf("kl_max 0.05:%s", describe(evs))
	}
	bad := DefaultThresholds()
	bad.ZWindow = 1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "zscore_window") {
		t.Fatalf("Validate should name the key: %v", err)
	}
	if err := DefaultThresholds().Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestZScoreFalseAlarmRate measures the z-score's alarms on pure Gaussian noise: about 5e-6
// per metric and step with the defaults (one |z| ≥ 3 alone happens at 5.7e-3).
func TestZScoreFalseAlarmRate(t *testing.T) {
	th := DefaultThresholds()
	r := rand.New(rand.NewPCG(1, 2))
	fires, tests := 0, 0
	for run := 0; run < 1000; run++ {
		z := zscore{win: newRing(th.ZWindow)}
		for i := 0; i < 300; i++ {
			if _, c := z.observe(r.NormFloat64(), &th); c {
				fires++
			}
			if z.win.len() >= th.ZMinHistory {
				tests++
			}
		}
	}
	if rate := float64(fires) / float64(tests); rate > 3e-5 {
		t.Fatalf("false alarm rate %.2g per metric-step on Gaussian noise, want below 3e-5", rate)
	}
}
