// Package optim updates trainable parameters held by a backend: AdamW with decoupled weight
// decay and bias correction (as torch.optim.AdamW), clipping by global gradient norm, and
// learning-rate schedules with warm-up (as Hugging Face's get_scheduler).
package optim

import (
	"fmt"
	"math"

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
}

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
	return o.b.AdamW(o.ops, lr, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.Step)
}

// ZeroGrad clears every gradient.
func ZeroGrad(b backend.Backend, params []*Param) {
	for _, p := range params {
		b.Zero(p.Grad)
	}
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
// update numbered step (0-based), as Hugging Face's schedulers compute it.
type Schedule struct {
	Kind   string // "constant", "linear", "cosine"
	Warmup int    // warm-up steps
	Total  int    // training steps
	// Hold keeps the factor of step Total−1 for the steps at or past Total: a resumed run
	// given more steps than it was planned for continues at its last rate, without a jump.
	Hold bool
}

// Factor returns the multiplier of the base learning rate at step.
func (s Schedule) Factor(step int) float64 {
	if s.Hold && s.Total > 0 && step >= s.Total {
		step = s.Total - 1
	}
	if step < s.Warmup {
		return float64(step) / float64(max(1, s.Warmup))
	}
	switch s.Kind {
	case "linear":
		return math.Max(0, float64(s.Total-step)/float64(max(1, s.Total-s.Warmup)))
	case "cosine":
		progress := float64(step-s.Warmup) / float64(max(1, s.Total-s.Warmup))
		return math.Max(0, 0.5*(1+math.Cos(math.Pi*progress)))
	default:
		return 1
	}
}

// Validate checks the schedule's kind.
func (s Schedule) Validate() error {
	switch s.Kind {
	case "constant", "linear", "cosine":
		return nil
	}
	return fmt.Errorf("lr_scheduler_type %q is not one of constant, linear, cosine", s.Kind)
}
