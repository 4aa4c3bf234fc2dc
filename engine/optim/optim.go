// Package optim updates trainable parameters held by a backend: AdamW with decoupled weight
// decay and bias correction (as torch.optim.AdamW), clipping by global gradient norm, and
// learning-rate schedules with warm-up (as Hugging Face's get_scheduler).
package optim

import (
	"fmt"
	"math"
	"strings"

	"rlhfstation/engine/backend"
)

// Param is one trainable float32 tensor with its gradient and its AdamW moments, in a
// backend's memory.
type Param struct {
	Name string
	Data backend.Buf
	Grad backend.Buf
	M, V backend.Buf // first and second moments, allocated by NewAdamW
}

// AdamW holds the optimizer's settings and step count.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	Step                           int // updates done so far
	Params                         []*Param
	b                              backend.Backend
	ops                            []backend.OptParam
	after                          []func() error
}

// AfterUpdate registers f to run after each update: what keeps copies of the parameters in
// step (the model's copies of its adapters' factors, model.Model.AdaptersChanged).
func (o *AdamW) AfterUpdate(f func() error) { o.after = append(o.after, f) }

// NewAdamW allocates zeroed moments for params on b (those that have none yet).
func NewAdamW(b backend.Backend, params []*Param, beta1, beta2, eps, weightDecay float64) (*AdamW, error) {
	o := &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay, Params: params, b: b}
	for _, p := range params {
		if p.M.Nil() {
			var err error
			if p.M, err = b.Alloc(backend.F32, p.Data.Len()); err != nil {
				return nil, fmt.Errorf("AdamW moments of %s: %w", p.Name, err)
			}
			if p.V, err = b.Alloc(backend.F32, p.Data.Len()); err != nil {
				return nil, fmt.Errorf("AdamW moments of %s: %w", p.Name, err)
			}
			b.Zero(p.M)
			b.Zero(p.V)
		}
		o.ops = append(o.ops, backend.OptParam{Data: p.Data, Grad: p.Grad, M: p.M, V: p.V})
	}
	return o, nil
}

// Update applies one AdamW step with learning rate lr (backend.Backend.AdamW, the formula of
// torch.optim.AdamW):
//
//	p ← p − lr·λ·p;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	p ← p − lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)
func (o *AdamW) Update(lr float64) error {
	o.Step++
	if err := o.b.AdamW(o.ops, lr, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Step); err != nil {
		return err
	}
	for _, f := range o.after {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// ZeroGrad clears every gradient, in one call (ScaleAll by 0 clears).
func ZeroGrad(b backend.Backend, params []*Param) error {
	grads := make([]backend.Buf, len(params))
	for i, p := range params {
		grads[i] = p.Grad
	}
	return b.ScaleAll(grads, 0)
}

// GradNorm is the global L2 norm of all gradients.
func GradNorm(b backend.Backend, params []*Param) (float64, error) {
	grads := make([]backend.Buf, len(params))
	for i, p := range params {
		grads[i] = p.Grad
	}
	return b.GradNorm(grads)
}

// ClipGradNorm scales the gradients so that their global norm is at most maxNorm (as
// torch.nn.utils.clip_grad_norm_: factor maxNorm/(norm+1e-6) when below 1) and returns the
// norm before clipping. maxNorm ≤ 0 disables clipping. A non-finite norm is returned
// unchanged and nothing is scaled: the caller skips the update.
func ClipGradNorm(b backend.Backend, params []*Param, maxNorm float64) (float64, error) {
	norm, err := GradNorm(b, params)
	if err != nil || maxNorm <= 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm, err
	}
	coef := maxNorm / (norm + 1e-6)
	if coef < 1 {
		grads := make([]backend.Buf, len(params))
		for i, p := range params {
			grads[i] = p.Grad
		}
		return norm, b.ScaleAll(grads, float32(coef))
	}
	return norm, nil
}

// Schedule is a learning-rate schedule: the factor applied to the base rate before the
// update numbered step (0-based), as transformers' schedulers (get_scheduler) compute it.
type Schedule struct {
	// Kind is lr_scheduler_type: "constant" (no warm-up, as transformers has it),
	// "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr", "polynomial",
	// "warmup_stable_decay".
	Kind   string
	Warmup int // warm-up steps
	Total  int // training steps
	// Hold keeps the factor of step Total−1 for the steps at or past Total: a resumed run
	// given more steps than it was planned for continues at its last rate, without a jump.
	Hold bool
	// Args are lr_scheduler_kwargs, with transformers' names and defaults.
	Args ScheduleArgs
	// BaseLR is the learning rate the factor multiplies: min_lr and polynomial's lr_end are
	// absolute rates, turned into factors by it.
	BaseLR float64
}

// ScheduleArgs are the lr_scheduler_kwargs the schedules read; zero values take the defaults.
type ScheduleArgs struct {
	NumCycles      float64 // cosine kinds: 0.5 (half a cosine, to 0 or the floor)
	MinLR          float64 // cosine_with_min_lr: the floor as a rate…
	MinLRRate      float64 // …or as a share of the base rate (one of the two must be set)
	LREnd          float64 // polynomial: the final rate, 1e-7
	Power          float64 // polynomial: 1 (linear decay)
	NumDecaySteps  int     // warmup_stable_decay: decay steps (required)
	NumStableSteps int     // warmup_stable_decay: 0 = what warm-up and decay leave of the run
	DecayType      string  // warmup_stable_decay: "cosine" (default), "linear" or "1-sqrt"
	MinLRRatio     float64 // warmup_stable_decay: the floor as a share of the base rate, 0
}

// Kinds are the lr_scheduler_type values a Schedule knows.
var Kinds = []string{"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_min_lr", "polynomial", "warmup_stable_decay"}

// Factor returns the multiplier of the base learning rate at step.
func (s Schedule) Factor(step int) float64 {
	if s.Hold && s.Total > 0 && step >= s.Total {
		step = s.Total - 1
	}
	a := s.Args
	cycles := a.NumCycles
	if cycles == 0 {
		cycles = 0.5
	}
	if s.Kind == "constant" {
		return 1
	}
	if step < s.Warmup {
		return float64(step) / float64(max(1, s.Warmup))
	}
	progress := float64(step-s.Warmup) / float64(max(1, s.Total-s.Warmup))
	switch s.Kind {
	case "linear":
		return math.Max(0, float64(s.Total-step)/float64(max(1, s.Total-s.Warmup)))
	case "cosine":
		return math.Max(0, 0.5*(1+math.Cos(math.Pi*cycles*2*progress)))
	case "cosine_with_min_lr":
		rate := s.minLRRate()
		return math.Max(0, 0.5*(1+math.Cos(math.Pi*cycles*2*progress)))*(1-rate) + rate
	case "polynomial":
		end, power := a.LREnd, a.Power
		if end == 0 {
			end = 1e-7
		}
		if power == 0 {
			power = 1
		}
		if step > s.Total || s.BaseLR <= 0 {
			return end / math.Max(s.BaseLR, end)
		}
		remaining := 1 - float64(step-s.Warmup)/float64(max(1, s.Total-s.Warmup))
		return ((s.BaseLR-end)*math.Pow(remaining, power) + end) / s.BaseLR
	case "warmup_stable_decay":
		decay := a.NumDecaySteps
		stable := a.NumStableSteps
		if stable == 0 {
			stable = max(0, s.Total-s.Warmup-decay)
		}
		if step < s.Warmup+stable {
			return 1
		}
		if step >= s.Warmup+stable+decay {
			return a.MinLRRatio
		}
		p := float64(step-s.Warmup-stable) / float64(max(1, decay))
		var v float64
		switch a.DecayType {
		case "linear":
			v = 1 - p
		case "1-sqrt":
			v = 1 - math.Sqrt(p)
		default:
			v = math.Max(0, 0.5*(1+math.Cos(math.Pi*cycles*2*p)))
		}
		return (1-a.MinLRRatio)*v + a.MinLRRatio
	}
	return 1 // constant_with_warmup
}

// minLRRate is cosine_with_min_lr's floor as a share of the base rate.
func (s Schedule) minLRRate() float64 {
	if s.Args.MinLR > 0 && s.BaseLR > 0 {
		return s.Args.MinLR / s.BaseLR
	}
	return s.Args.MinLRRate
}

// Validate checks the schedule's kind and the kwargs it needs.
func (s Schedule) Validate() error {
	switch s.Kind {
	case "constant", "constant_with_warmup", "linear", "cosine", "polynomial":
		return nil
	case "cosine_with_min_lr":
		if (s.Args.MinLR > 0) == (s.Args.MinLRRate > 0) {
			return fmt.Errorf("lr_scheduler_type cosine_with_min_lr needs one of lr_scheduler_kwargs.min_lr and lr_scheduler_kwargs.min_lr_rate")
		}
		return nil
	case "warmup_stable_decay":
		if s.Args.NumDecaySteps <= 0 {
			return fmt.Errorf("lr_scheduler_type warmup_stable_decay needs lr_scheduler_kwargs.num_decay_steps")
		}
		switch s.Args.DecayType {
		case "", "cosine", "linear", "1-sqrt":
			return nil
		}
		return fmt.Errorf("lr_scheduler_kwargs.decay_type %q is not cosine, linear or 1-sqrt", s.Args.DecayType)
	}
	return fmt.Errorf("lr_scheduler_type %q is not one of %s", s.Kind, strings.Join(Kinds, ", "))
}
