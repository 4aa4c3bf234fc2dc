package rewards

import (
	"fmt"
	"math"
)

// Threshold is one row of the table that maps an improvement I to a reward.
type Threshold struct {
	Improvement float64 `json:"improvement" toml:"improvement"`
	Reward      float64 `json:"reward" toml:"reward"`
}

// Thresholds is a threshold table, highest improvement first.
type Thresholds []Threshold

// DefaultThresholds is the table of DESIGN §6.1 (from the seeds).
var DefaultThresholds = Thresholds{
	{0.03, 1.0},
	{0.02, 0.9},
	{0.01, 0.7},
	{0.005, 0.5},
	{0.0005, 0.2},
}

// Shape maps an improvement to a reward through a threshold table.
type Shape string

// The reward shapes of DESIGN §6.1.
const (
	Step   Shape = "step"   // the reward of the first threshold reached, else 0
	Linear Shape = "linear" // piecewise-linear through (0,0) and the thresholds, mirrored below 0
)

// ParseShape checks a shape name.
func ParseShape(s string) (Shape, error) {
	switch Shape(s) {
	case Step, Linear:
		return Shape(s), nil
	}
	return "", fmt.Errorf("unknown reward shape %q (want \"step\" or \"linear\")", s)
}

// Reward maps improvement i to a reward. A NaN improvement gives NaN (not applicable).
func (s Shape) Reward(i float64, t Thresholds) float64 {
	if math.IsNaN(i) {
		return math.NaN()
	}
	if s == Linear {
		return linearReward(i, t)
	}
	return stepReward(i, t)
}

// thresholdSlack lets an improvement that equals a threshold in exact arithmetic but lands a
// rounding error below it (P = 9.9 against B = 10 gives 0.00999…96) reach it.
const thresholdSlack = 1e-12

// stepReward: I ≥ threshold → its reward, taking the first (highest) threshold reached.
func stepReward(i float64, t Thresholds) float64 {
	for _, th := range t {
		if i >= th.Improvement-thresholdSlack {
			return th.Reward
		}
	}
	return 0
}

// linearReward interpolates between (0,0) and the thresholds, holds the top reward beyond the
// top threshold, and mirrors for negative improvements: r(−I) = −r(I).
func linearReward(i float64, t Thresholds) float64 {
	if len(t) == 0 {
		return 0
	}
	sign := 1.0
	if i < 0 {
		sign, i = -1, -i
	}
	if i >= t[0].Improvement {
		return sign * t[0].Reward
	}
	x0, y0 := 0.0, 0.0 // the point below i
	for k := len(t) - 1; k >= 0; k-- {
		x1, y1 := t[k].Improvement, t[k].Reward
		if i < x1 {
			return sign * (y0 + (y1-y0)*(i-x0)/(x1-x0))
		}
		x0, y0 = x1, y1
	}
	return sign * t[0].Reward
}

// Validate requires improvements strictly descending and positive, and rewards in [0,1] and
// not increasing down the table.
func (t Thresholds) Validate() error {
	if len(t) == 0 {
		return fmt.Errorf("threshold table is empty")
	}
	for k, th := range t {
		if !(th.Improvement > 0) || math.IsInf(th.Improvement, 0) {
			return fmt.Errorf("threshold %d: improvement %v must be a finite number above 0", k+1, th.Improvement)
		}
		if !(th.Reward >= 0 && th.Reward <= 1) {
			return fmt.Errorf("threshold %d: reward %v must be within [0, 1]", k+1, th.Reward)
		}
		if k > 0 && th.Improvement >= t[k-1].Improvement {
			return fmt.Errorf("thresholds must be in descending order of improvement: %v follows %v", th.Improvement, t[k-1].Improvement)
		}
		if k > 0 && th.Reward > t[k-1].Reward {
			return fmt.Errorf("thresholds' rewards must not increase as improvement descends: %v follows %v", th.Reward, t[k-1].Reward)
		}
	}
	return nil
}
