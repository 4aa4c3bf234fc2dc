package rewards

import (
	"fmt"
	"math"
)

// Scheduled is a reward function whose settings follow the run's progress (NTL's
// temperature_schedule): At gives the function to use at that point of the run.
type Scheduled interface {
	At(progress float64) Func
}

// AtProgress returns funcs with each Scheduled function set for progress (see Progress).
func AtProgress(funcs []Weighted, progress float64) []Weighted {
	out := make([]Weighted, len(funcs))
	for i, f := range funcs {
		out[i] = f
		if s, ok := f.Func.(Scheduled); ok {
			out[i].Func = s.At(progress)
		}
	}
	return out
}

// Progress is how far step (1-based) is through a run of total steps: 0 at the first step,
// 1 at the last.
func Progress(step, total int) float64 {
	if total <= 1 {
		return 0
	}
	return math.Max(0, math.Min(1, float64(step-1)/float64(total-1)))
}

// Kinds of temperature_schedule.
const (
	ScheduleConstant = "constant"
	ScheduleLinear   = "linear"
	ScheduleCosine   = "cosine"
)

// TauSchedule moves NTL's tau from Start at the first step to End at the last: linearly, or
// along a half cosine (slow at both ends); constant keeps Start.
type TauSchedule struct {
	Kind       string
	Start, End float64
}

// At is tau at progress p ∈ [0, 1].
func (s TauSchedule) At(p float64) float64 {
	p = math.Max(0, math.Min(1, p))
	switch s.Kind {
	case ScheduleLinear:
		return s.Start + (s.End-s.Start)*p
	case ScheduleCosine:
		return s.End + (s.Start-s.End)*(1+math.Cos(math.Pi*p))/2
	}
	return s.Start
}

// Validate checks the kind and that both ends are finite and above 0.
func (s TauSchedule) Validate() error {
	if err := ParseScheduleKind(s.Kind); err != nil {
		return err
	}
	for _, v := range []float64{s.Start, s.End} {
		if !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("NTL temperature schedule from %v to %v: both must be finite numbers above 0", s.Start, s.End)
		}
	}
	return nil
}

// ParseScheduleKind checks a temperature_schedule name.
func ParseScheduleKind(kind string) error {
	switch kind {
	case ScheduleConstant, ScheduleLinear, ScheduleCosine:
		return nil
	}
	return fmt.Errorf("unknown temperature_schedule %q (want \"constant\", \"linear\" or \"cosine\")", kind)
}
