// Package optim updates trainable parameters: AdamW with decoupled weight decay and bias
// correction (as torch.optim.AdamW), clipping by global gradient norm, and learning-rate
// schedules with warm-up (as Hugging Face's get_scheduler).
package optim

import (
	"fmt"
	"math"
)

// Param is one trainable tensor with its gradient and its AdamW moments.
type Param struct {
	Name string
	Data []float32
	Grad []float32
	M, V []float32 // first and second moments, allocated by NewAdamW
}

// AdamW holds the optimizer's settings and step count.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	Step                           int // updates done so far
	Params                         []*Param
}

// NewAdamW allocates moments for params.
func NewAdamW(params []*Param, beta1, beta2, eps, weightDecay float64) *AdamW {
	for _, p := range params {
		if p.M == nil {
			p.M = make([]float32, len(p.Data))
			p.V = make([]float32, len(p.Data))
		}
	}
	return &AdamW{Beta1: beta1, Beta2: beta2, Eps: eps, WeightDecay: weightDecay, Params: params}
}

// Update applies one AdamW step with learning rate lr:
//
//	p ← p − lr·λ·p;  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	p ← p − lr · (m / (1−β1^t)) / (√(v / (1−β2^t)) + ε)
func (o *AdamW) Update(lr float64) {
	o.Step++
	t := float64(o.Step)
	bc1 := 1 - math.Pow(o.Beta1, t)
	bc2 := 1 - math.Pow(o.Beta2, t)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	decay := float32(1 - lr*o.WeightDecay)
	stepSize := lr / bc1
	sqrtBC2 := math.Sqrt(bc2)
	for _, p := range o.Params {
		for i, g := range p.Grad {
			m := b1*p.M[i] + (1-b1)*g
			v := b2*p.V[i] + (1-b2)*g*g
			p.M[i], p.V[i] = m, v
			denom := math.Sqrt(float64(v))/sqrtBC2 + o.Eps
			p.Data[i] = p.Data[i]*decay - float32(stepSize*float64(m)/denom)
		}
	}
}

// ZeroGrad clears every gradient.
func ZeroGrad(params []*Param) {
	for _, p := range params {
		clear(p.Grad)
	}
}

// GradNorm is the global L2 norm of all gradients (accumulated in float64).
func GradNorm(params []*Param) float64 {
	s := 0.0
	for _, p := range params {
		for _, g := range p.Grad {
			s += float64(g) * float64(g)
		}
	}
	return math.Sqrt(s)
}

// ClipGradNorm scales the gradients so that their global norm is at most maxNorm (as
// torch.nn.utils.clip_grad_norm_: factor maxNorm/(norm+1e-6) when below 1) and returns the
// norm before clipping. maxNorm ≤ 0 disables clipping. A non-finite norm is returned
// unchanged and nothing is scaled: the caller skips the update.
func ClipGradNorm(params []*Param, maxNorm float64) float64 {
	norm := GradNorm(params)
	if maxNorm <= 0 || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm
	}
	coef := maxNorm / (norm + 1e-6)
	if coef < 1 {
		c := float32(coef)
		for _, p := range params {
			for i := range p.Grad {
				p.Grad[i] *= c
			}
		}
	}
	return norm
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
