// Package monitor watches a training run and explains its checkpoints (DESIGN §15).
//
// A Monitor reads the step metrics (DESIGN §5 names) and the sample completions as they come
// and returns anomaly events: streaming rules with a grace period after the start and a
// cool-down, so that one problem gives one alert. It also keeps what the front ends show
// beside the alerts: trends, per-epoch statistics, reward reliability and the reward-hacking
// signals of the completions (Summary). Analyze, in checkpoint.go, is the checkpoint half:
// LoRA norms, drift against a reference, optimizer state and a health score.
package monitor

import (
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/internal/human"
	"rlhfstation/internal/stats"
)

// Rule names, as written in the anomaly events' "rule" field.
const (
	RuleNonFinite       = "non_finite"
	RuleZScore          = "zscore"
	RuleKL              = "kl_high"
	RuleEntropyCollapse = "entropy_collapse"
	RuleRewardStall     = "reward_stall"
	RuleZeroStd         = "reward_zero_std"
	RuleGradNorm        = "grad_norm"
	RuleMemoryLeak      = "memory_leak"
	RuleRepetition      = "repetition"
	RuleDiversityDrop   = "diversity_drop"
	RuleLengthDrift     = "length_drift"
)

// Monitor runs the rules over one run's metrics. Its methods are safe for concurrent use: the
// engine observes while a front end reads the Summary.
type Monitor struct {
	mu sync.Mutex
	th Thresholds

	// Now stamps the events' Time; time.Now unless a test sets it.
	Now func() time.Time
	// WarmupSteps are the steps of the learning-rate warm-up: their rewards do not count
	// toward reward_stall, since a flat reward is expected while the rate is still rising.
	WarmupSteps int

	n        int // Observe calls so far
	lastStep int
	series   map[string]*series
	latches  map[latchKey]*latch
	alerts   map[string]int // by rule

	entropyBase []float64 // the first EntropyBaselineSteps finite entropy values
	stall       *ring     // recent finite rewards

	epochs   []Epoch
	epoch    map[string]*stats.Running // the epoch in progress
	epochIdx int
	epochN   int
	epochLo  int // first and last step of the epoch in progress
	epochHi  int

	text textState
}

// series is what the monitor keeps per metric.
type series struct {
	skipZ bool  // the z-score ignores the metric (Thresholds.ZSkip, decided once)
	trend *ring // recent finite values
	z     zscore
	leak  *ring // LeakMetrics only
	rel   *ring // reward metrics only
}

// New makes a monitor. It expects thresholds that pass Validate (call it when loading the run
// config, so that a bad key is reported there).
func New(th Thresholds) *Monitor {
	return &Monitor{
		th:      th,
		Now:     time.Now,
		series:  map[string]*series{},
		latches: map[latchKey]*latch{},
		alerts:  map[string]int{},
		stall:   newRing(th.StallWindow),
		epoch:   map[string]*stats.Running{},
	}
}

// Thresholds returns the thresholds the monitor runs with.
func (m *Monitor) Thresholds() Thresholds { return m.th }

// latch turns a per-step condition into one alert per episode: it fires once the condition has
// held for `need` consecutive steps, then stays silent until the metric has recovered for
// `cooldown` consecutive steps, and only then re-arms. Recovered is the condition's negation
// for most rules; a rule with hysteresis passes a stricter one.
type latch struct {
	streak int // consecutive steps with the condition true
	clear  int // consecutive recovered steps, while fired
	fired  bool
}

func (l *latch) update(cond bool, need, cooldown int) bool {
	return l.updateHysteresis(cond, !cond, need, cooldown)
}

func (l *latch) updateHysteresis(cond, recovered bool, need, cooldown int) bool {
	if cond {
		l.streak++
	} else {
		l.streak = 0
	}
	if l.fired {
		if recovered {
			l.clear++
			if l.clear >= cooldown {
				l.fired, l.clear = false, 0
			}
		} else {
			l.clear = 0
		}
		return false
	}
	if cond && l.streak >= need {
		l.fired = true
		return true
	}
	return false
}

// latchKey names a latch: one per rule and metric.
type latchKey struct{ rule, metric string }

func (m *Monitor) latch(rule, metric string) *latch {
	k := latchKey{rule, metric}
	l := m.latches[k]
	if l == nil {
		l = &latch{}
		m.latches[k] = l
	}
	return l
}

func (m *Monitor) seriesOf(name string) *series {
	s := m.series[name]
	if s == nil {
		s = &series{trend: newRing(m.th.TrendWindow), z: zscore{win: newRing(m.th.ZWindow)}, skipZ: m.th.skipZ(name)}
		for _, lm := range m.th.LeakMetrics {
			if lm == name {
				s.leak = newRing(m.th.LeakWindow)
			}
		}
		if isRewardMetric(name) {
			s.rel = newRing(m.th.ReliabilityWindow)
		}
		m.series[name] = s
	}
	return s
}

// isRewardMetric: the total reward and each reward function's mean.
func isRewardMetric(name string) bool {
	return name == "reward" || (strings.HasPrefix(name, "rewards/") && strings.HasSuffix(name, "/mean"))
}

func (m *Monitor) anomaly(step int, rule, metric, severity string, value float64, msg string) events.Event {
	m.alerts[rule]++
	if !finite(value) {
		value = 0 // JSON numbers cannot hold NaN or Inf; the message names the value
	}
	return events.Event{Type: events.Anomaly, Time: m.Now(), Step: step, Rule: rule, Metric: metric,
		Value: value, Severity: severity, Message: msg}
}

// Observe takes one training step's metrics and returns the anomalies it raises, in a fixed
// order: non-finite values, then the named rules, then the z-scores, each by metric name.
func (m *Monitor) Observe(step int, metrics events.Metrics) []events.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	m.lastStep = step
	armed := m.n > m.th.GraceSteps

	names := make([]string, 0, len(metrics))
	for k := range metrics {
		names = append(names, k)
	}
	sort.Strings(names)

	// Non-finite values of one step are one problem: one alert naming every metric affected.
	var out []events.Event
	var broken []string
	for _, name := range names {
		v := metrics[name]
		if m.latch(RuleNonFinite, name).update(!finite(v), 1, m.th.CooldownSteps) {
			broken = append(broken, sprintf("%s is %v", name, v))
			if len(broken) == 1 {
				out = append(out, m.anomaly(step, RuleNonFinite, name, events.Critical, v, ""))
			}
		}
	}
	if len(broken) > 0 {
		out[0].Message = nonFiniteMessage(broken)
	}

	busy := map[string]bool{} // metrics with a named rule's condition true this step
	out = m.namedRules(step, metrics, armed, busy, out)

	for _, name := range names {
		v := metrics[name]
		s := m.seriesOf(name)
		if !s.skipZ {
			z, cond := s.z.observe(v, &m.th)
			fire := m.latch(RuleZScore, name).update(armed && cond, 1, m.th.CooldownSteps)
			if fire && !busy[name] {
				out = append(out, m.anomaly(step, RuleZScore, name, events.Info, v, zMessage(name, v, z, &m.th)))
			}
		}
		if finite(v) {
			s.trend.push(v)
			if s.rel != nil {
				s.rel.push(v)
			}
		}
	}
	m.addEpoch(step, names, metrics)
	return out
}

// namedRules runs the DESIGN §15 rules that watch one named metric each.
func (m *Monitor) namedRules(step int, mt events.Metrics, armed bool, busy map[string]bool, out []events.Event) []events.Event {
	th := &m.th
	check := func(rule, metric, severity string, cond bool, need int, v float64, msg func() string) {
		cond = cond && finite(v) // non-finite values are the non_finite rule's
		if cond {
			busy[metric] = true
		}
		if m.latch(rule, metric).update(armed && cond, need, th.CooldownSteps) {
			out = append(out, m.anomaly(step, rule, metric, severity, v, msg()))
		}
	}

	if kl, ok := mt["kl"]; ok {
		check(RuleKL, "kl", events.Warning, kl > th.KLMax, th.KLSteps, kl, func() string {
			return sprintf("kl %.3g above %.3g for %d steps: the policy is moving away from the reference; try a larger beta, a lower learning_rate or a smaller epsilon", kl, th.KLMax, th.KLSteps)
		})
	}

	if e, ok := mt["entropy"]; ok {
		if finite(e) && len(m.entropyBase) < th.EntropyBaselineSteps {
			m.entropyBase = append(m.entropyBase, e)
		}
		if len(m.entropyBase) == th.EntropyBaselineSteps {
			e0, _ := stats.MeanStd(m.entropyBase)
			limit := max(th.EntropyCollapseFrac*e0, th.EntropyFloor)
			check(RuleEntropyCollapse, "entropy", events.Warning, e < limit, th.EntropySteps, e, func() string {
				return sprintf("entropy %.3g below %.3g (%.0f%% of its early level %.3g, floor %.3g) for %d steps: the policy is collapsing onto few tokens; try a higher temperature, a larger beta or a lower learning_rate",
					e, limit, 100*th.EntropyCollapseFrac, e0, th.EntropyFloor, th.EntropySteps)
			})
		}
	}

	if r, ok := mt["reward"]; ok {
		if finite(r) && step > m.WarmupSteps {
			m.stall.push(r)
		}
		if m.stall.full() && finite(r) && step > m.WarmupSteps {
			f := fitLine(m.stall.values())
			noise := max(f.Resid, th.StallNoiseFloor)
			change := math.Abs(f.Change())
			cond := change < th.StallMaxChange*noise
			busy["reward"] = busy["reward"] || cond
			// Hysteresis: on a plateau the fitted change wanders around the limit, so the rule
			// re-arms only after the reward has trended again, at stallRecover × the limit.
			recovered := change >= stallRecover*th.StallMaxChange*noise
			if m.latch(RuleRewardStall, "reward").updateHysteresis(armed && cond, recovered, 1, th.CooldownSteps) {
				out = append(out, m.anomaly(step, RuleRewardStall, "reward", events.Warning, r, sprintf(
					"reward flat for %d steps: fitted change %.3g is below %.3g × its noise %.3g; GRPO learns from reward differences: check frac_reward_zero_std, raise temperature or num_generations, or the learning_rate",
					th.StallWindow, change, th.StallMaxChange, noise)))
			}
		}
	}

	if z, ok := mt["frac_reward_zero_std"]; ok {
		check(RuleZeroStd, "frac_reward_zero_std", events.Warning, z > th.ZeroStdMax, th.ZeroStdSteps, z, func() string {
			return sprintf("%.0f%% of prompt groups have identical rewards (above %.0f%%) for %d steps: they give no learning signal; use a graded reward, a task of the right difficulty, or raise temperature or num_generations",
				100*z, 100*th.ZeroStdMax, th.ZeroStdSteps)
		})
	}

	if g, ok := mt["grad_norm"]; ok {
		check(RuleGradNorm, "grad_norm", events.Warning, g > th.GradNormMax, 1, g, func() string {
			return sprintf("grad_norm %.3g above %.3g: the gradients are exploding; lower the learning_rate or max_grad_norm, and check the rewards' scale", g, th.GradNormMax)
		})
	}

	for _, name := range th.LeakMetrics {
		v, ok := mt[name]
		if !ok {
			continue
		}
		s := m.seriesOf(name)
		if finite(v) {
			s.leak.push(v)
		}
		if !s.leak.full() {
			continue
		}
		f := fitLine(s.leak.values())
		growth := f.Change()
		minGrowth := max(th.LeakMinBytes, th.LeakMinFrac*f.Intercept)
		check(RuleMemoryLeak, name, events.Warning, f.Slope > 0 && f.R2 >= th.LeakMinR2 && growth >= minGrowth, 1, v, func() string {
			return sprintf("%s grew %s over %d steps (%s a step, R² %.2f; threshold %s): memory is leaking; look for buffers or caches that grow every step",
				name, human.Bytes(int64(growth)), th.LeakWindow, human.Bytes(int64(f.Slope)), f.R2, human.Bytes(int64(minGrowth)))
		})
	}
	return out
}

// stallRecover: the reward-stall rule re-arms once the fitted change has been at least this
// many times its limit (2 noise units with the defaults) for CooldownSteps steps.
const stallRecover = 4

// zscore is the rolling z-score state of one metric.
type zscore struct {
	win     *ring
	pending []float64 // the current run of outliers, held out of the window
	dir     int       // their sign
}

// observe returns the value's z-score and whether it completes an outlier run (see
// Thresholds.ZScore). The z-score is taken against the window's least-squares line carried one
// step forward, in units of the prediction's standard error, so that a metric moving steadily
// (a rising reward, a falling entropy) is not an outlier: only a sudden change is. A window that
// lies exactly on a line gives no z-score.
func (z *zscore) observe(v float64, th *Thresholds) (float64, bool) {
	if !finite(v) {
		return 0, false
	}
	if z.win.len() < th.ZMinHistory {
		z.win.push(v)
		return 0, false
	}
	score, ok := predictionZ(z.win.values(), v)
	if !ok || math.Abs(score) < th.ZScore {
		z.flush()
		z.win.push(v)
		return score, false
	}
	d := 1
	if score < 0 {
		d = -1
	}
	if d != z.dir {
		z.flush()
		z.dir = d
	}
	z.pending = append(z.pending, v)
	if len(z.pending) >= th.ZSteps || math.Abs(score) >= th.ZExtreme {
		z.flush() // reported: let the window learn the new level
		return score, true
	}
	return score, false
}

// predictionZ is the studentized prediction residual of v as the next point after window y:
// (v − ŷ) / (s·√(1 + 1/n + (n − x̄)²/Sxx)), with ŷ the least-squares line at x = n and s its
// residual standard deviation. ok is false when s is 0 (to rounding).
func predictionZ(y []float64, v float64) (float64, bool) {
	f := fitLine(y)
	n := float64(f.N)
	xm := (n - 1) / 2
	sxx := n * (n*n - 1) / 12
	pred := f.Intercept + f.Slope*n
	if f.Resid <= 1e-12*max(1, math.Abs(pred)) {
		return 0, false
	}
	se := f.Resid * math.Sqrt(1+1/n+(n-xm)*(n-xm)/sxx)
	return (v - pred) / se, true
}

func (z *zscore) flush() {
	for _, p := range z.pending {
		z.win.push(p)
	}
	z.pending, z.dir = z.pending[:0], 0
}

func nonFiniteMessage(broken []string) string {
	return sprintf("%s: the step's numbers are broken (overflow or a division by zero); stop and resume from the last good checkpoint with a lower learning_rate, and check the rewards for NaN", strings.Join(broken, ", "))
}

func zMessage(name string, v, z float64, th *Thresholds) string {
	return sprintf("%s jumped to %.4g, %+.1f standard deviations from the trend of its last %d steps (threshold %.0f): a sudden change; look at the samples and the other metrics at this step",
		name, v, z, th.ZWindow, th.ZScore)
}
