package monitor

import (
	"fmt"
	"path"
	"strings"
)

// Thresholds tunes every rule of the monitor. Start from DefaultThresholds and decode the run
// configuration over it (BurntSushi/toml keeps the defaults of keys the file leaves out); the
// toml names are the keys of the run config's monitor table.
//
// Counts of steps are counts of Observe calls (one per training step), whatever the step
// numbers are; counts of batches are counts of ObserveSamples calls.
type Thresholds struct {
	// GraceSteps: no rule fires during the first GraceSteps observations, except non-finite
	// values, which are always reported at once.
	GraceSteps int `toml:"grace_steps"`
	// CooldownSteps: after an alert a rule stays silent, for that metric, until its condition
	// has been false for CooldownSteps consecutive observations. One problem, one alert.
	CooldownSteps int `toml:"cooldown_steps"`

	// Rolling z-score: z = (x − ŷ)/se, where ŷ is the least-squares line through the previous
	// ZWindow finite values carried one step forward and se the standard error of that
	// prediction (residual std·√(1 + 1/n + (n − x̄)²/Sxx)); on a flat window it is close to the
	// plain (x − mean)/std. The line keeps steady trends from counting as
	// outliers. It runs once ZMinHistory values are there. An alert needs |z| ≥ ZScore on ZSteps
	// consecutive steps in the same direction, or |z| ≥ ZExtreme on one step; values under test
	// are held out of the window until their run ends or is reported. Why not one step at
	// |z| ≥ 3: on Gaussian noise that fires 5.7e-3 times per metric and step (a dozen alerts
	// per 100 steps of 25 metrics); with the defaults the rate is about 5e-6
	// (TestZScoreFalseAlarmRate).
	ZWindow     int     `toml:"zscore_window"`
	ZMinHistory int     `toml:"zscore_min_history"`
	ZScore      float64 `toml:"zscore"`
	ZSteps      int     `toml:"zscore_steps"`
	ZExtreme    float64 `toml:"zscore_extreme"`
	// ZSkip lists metrics the z-score ignores: exact names, prefixes ending in "/", or
	// patterns with * for one level of a name ("rewards/*/std").
	ZSkip []string `toml:"zscore_skip"`

	// KL: kl > KLMax on KLSteps consecutive steps.
	KLMax   float64 `toml:"kl_max"`
	KLSteps int     `toml:"kl_steps"`

	// Entropy collapse: the early level E0 is the mean of the first EntropyBaselineSteps finite
	// entropy values; the rule fires when entropy < max(EntropyCollapseFrac·E0, EntropyFloor)
	// on EntropySteps consecutive steps.
	EntropyBaselineSteps int     `toml:"entropy_baseline_steps"`
	EntropyCollapseFrac  float64 `toml:"entropy_collapse_frac"`
	EntropyFloor         float64 `toml:"entropy_floor"`
	EntropySteps         int     `toml:"entropy_steps"`

	// Reward stall: a least-squares line through the last StallWindow rewards; the rule fires
	// when its fitted change over the window, |slope|·(StallWindow−1), is below
	// StallMaxChange × max(residual std, StallNoiseFloor): the trend is lost in the noise.
	// On a plateau that estimate wanders around the limit, so after an alert the rule re-arms
	// only once the fitted change has stayed above 4 × the limit for CooldownSteps steps.
	StallWindow     int     `toml:"reward_stall_window"`
	StallMaxChange  float64 `toml:"reward_stall_max_change"`
	StallNoiseFloor float64 `toml:"reward_stall_noise_floor"`

	// Groups without a learning signal: frac_reward_zero_std > ZeroStdMax on ZeroStdSteps
	// consecutive steps.
	ZeroStdMax   float64 `toml:"zero_std_max"`
	ZeroStdSteps int     `toml:"zero_std_steps"`

	// Gradient explosion: grad_norm > GradNormMax (one step is enough).
	GradNormMax float64 `toml:"grad_norm_max"`

	// Memory leak, for each of LeakMetrics: a line through the last LeakWindow values; the rule
	// fires when the slope is positive, R² ≥ LeakMinR2 and the fitted growth over the window is
	// at least max(LeakMinBytes, LeakMinFrac × the fitted value at the window's start).
	LeakMetrics  []string `toml:"leak_metrics"`
	LeakWindow   int      `toml:"leak_window"`
	LeakMinR2    float64  `toml:"leak_min_r2"`
	LeakMinBytes float64  `toml:"leak_min_bytes"`
	LeakMinFrac  float64  `toml:"leak_min_frac"`

	// Trends: a line through the last TrendWindow finite values (at least TrendMinPoints); the
	// trend is increasing or decreasing when |slope| ≥ TrendT × its standard error, else stable.
	TrendWindow    int     `toml:"trend_window"`
	TrendMinPoints int     `toml:"trend_min_points"`
	TrendT         float64 `toml:"trend_t"`

	// EpochSteps: steps per epoch for the per-epoch statistics (the engine sets it from the
	// data set size when it knows it).
	EpochSteps int `toml:"epoch_steps"`
	// ReliabilityWindow: how many recent steps the reward reliability is measured over.
	ReliabilityWindow int `toml:"reliability_window"`

	// Completions (reward hacking). The early level is the mean over the first
	// SamplesBaseline sample batches, the recent level the mean over the last SamplesBaseline;
	// the rules run once both windows are full and disjoint.
	SamplesBaseline int `toml:"samples_baseline"`
	// RepetitionMax: the recent share of repeated word trigrams inside completions.
	RepetitionMax float64 `toml:"repetition_max"`
	// DistinctDropFrac: distinct-2 below this fraction of its early level.
	DistinctDropFrac float64 `toml:"distinct_drop_frac"`
	// LengthDriftRatio: recent mean length (words) over the early one ≥ this, or ≤ its inverse.
	LengthDriftRatio float64 `toml:"length_drift_ratio"`

	// StopOn names the alerts that stop the run (it saves first): rule names, or "nan" (any
	// non-finite value), "kl_spike" (kl_high, or a z-score jump of kl) and "critical" (any
	// critical alert). Empty: alerts never stop a run.
	StopOn []string `toml:"stop_on"`
}

// DefaultThresholds are the rules of DESIGN §15 with the defaults documented on each field.
func DefaultThresholds() Thresholds {
	return Thresholds{
		GraceSteps:    10,
		CooldownSteps: 10,

		ZWindow:     30,
		ZMinHistory: 20,
		ZScore:      3,
		ZSteps:      3,
		ZExtreme:    6,
		// GRPO's loss sits near zero by construction (advantages are centred per group), so its
		// relative jumps say nothing; the per-batch reward spreads (*/std) are noise too.
		ZSkip: []string{"learning_rate", "perf/", "mem/", "ntl/total_digits", "ntl/correct_digits", "loss",
			"reward_std", "rewards/*/std", "step_time", "num_tokens", "ntl/aux_positions"},

		KLMax:   0.30,
		KLSteps: 2,

		EntropyBaselineSteps: 10,
		EntropyCollapseFrac:  0.3,
		EntropyFloor:         0.05,
		EntropySteps:         3,

		StallWindow:     30,
		StallMaxChange:  0.5,
		StallNoiseFloor: 1e-6,

		ZeroStdMax:   0.9,
		ZeroStdSteps: 3,

		GradNormMax: 8,

		LeakMetrics:  []string{"mem/rss_bytes", "mem/gpu_bytes"},
		LeakWindow:   100,
		LeakMinR2:    0.8,
		LeakMinBytes: 64 << 20,
		LeakMinFrac:  0.05,

		TrendWindow:    30,
		TrendMinPoints: 5,
		TrendT:         2,

		EpochSteps:        100,
		ReliabilityWindow: 100,

		SamplesBaseline:  5,
		RepetitionMax:    0.5,
		DistinctDropFrac: 0.5,
		LengthDriftRatio: 2,
	}
}

// Validate reports the first out-of-range field by its toml key.
func (t Thresholds) Validate() error {
	ints := []struct {
		key string
		v   int
		min int
	}{
		{"grace_steps", t.GraceSteps, 0}, {"cooldown_steps", t.CooldownSteps, 1},
		{"zscore_window", t.ZWindow, 3}, {"zscore_min_history", t.ZMinHistory, 3},
		{"zscore_steps", t.ZSteps, 1}, {"kl_steps", t.KLSteps, 1},
		{"entropy_baseline_steps", t.EntropyBaselineSteps, 1}, {"entropy_steps", t.EntropySteps, 1},
		{"reward_stall_window", t.StallWindow, 3}, {"zero_std_steps", t.ZeroStdSteps, 1},
		{"leak_window", t.LeakWindow, 3}, {"trend_window", t.TrendWindow, 3},
		{"trend_min_points", t.TrendMinPoints, 3}, {"epoch_steps", t.EpochSteps, 1},
		{"reliability_window", t.ReliabilityWindow, 2}, {"samples_baseline", t.SamplesBaseline, 1},
	}
	for _, c := range ints {
		if c.v < c.min {
			return fmt.Errorf("monitor: %s must be at least %d, got %d", c.key, c.min, c.v)
		}
	}
	if t.ZMinHistory > t.ZWindow {
		return fmt.Errorf("monitor: zscore_min_history (%d) must not exceed zscore_window (%d)", t.ZMinHistory, t.ZWindow)
	}
	if t.TrendMinPoints > t.TrendWindow {
		return fmt.Errorf("monitor: trend_min_points (%d) must not exceed trend_window (%d)", t.TrendMinPoints, t.TrendWindow)
	}
	pos := []struct {
		key string
		v   float64
	}{
		{"zscore", t.ZScore}, {"zscore_extreme", t.ZExtreme}, {"kl_max", t.KLMax},
		{"reward_stall_max_change", t.StallMaxChange}, {"reward_stall_noise_floor", t.StallNoiseFloor},
		{"grad_norm_max", t.GradNormMax}, {"trend_t", t.TrendT}, {"repetition_max", t.RepetitionMax},
		{"distinct_drop_frac", t.DistinctDropFrac}, {"entropy_collapse_frac", t.EntropyCollapseFrac},
	}
	for _, c := range pos {
		if !(c.v > 0) || !finite(c.v) {
			return fmt.Errorf("monitor: %s must be a positive number, got %g", c.key, c.v)
		}
	}
	if t.ZExtreme < t.ZScore {
		return fmt.Errorf("monitor: zscore_extreme (%g) must be at least zscore (%g)", t.ZExtreme, t.ZScore)
	}
	if !(t.ZeroStdMax >= 0 && t.ZeroStdMax <= 1) {
		return fmt.Errorf("monitor: zero_std_max must be in [0, 1], got %g", t.ZeroStdMax)
	}
	if !(t.EntropyFloor >= 0) {
		return fmt.Errorf("monitor: entropy_floor must not be negative, got %g", t.EntropyFloor)
	}
	if !(t.LeakMinR2 >= 0 && t.LeakMinR2 <= 1) {
		return fmt.Errorf("monitor: leak_min_r2 must be in [0, 1], got %g", t.LeakMinR2)
	}
	if !(t.LeakMinBytes >= 0) || !(t.LeakMinFrac >= 0) {
		return fmt.Errorf("monitor: leak_min_bytes and leak_min_frac must not be negative")
	}
	if err := CheckStopOn(t.StopOn); err != nil {
		return fmt.Errorf("monitor: stop_on: %w", err)
	}
	if !(t.LengthDriftRatio > 1) {
		return fmt.Errorf("monitor: length_drift_ratio must be above 1, got %g", t.LengthDriftRatio)
	}
	return nil
}

// skipZ reports whether the z-score ignores metric name.
func (t *Thresholds) skipZ(name string) bool {
	for _, s := range t.ZSkip {
		if name == s || (strings.HasSuffix(s, "/") && strings.HasPrefix(name, s)) {
			return true
		}
		if m, _ := path.Match(s, name); m {
			return true
		}
	}
	return false
}
