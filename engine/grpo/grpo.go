// Package grpo holds the maths of Group Relative Policy Optimization as DESIGN §5 states it
// (names follow TRL's GRPOConfig): group advantages, the clipped per-token surrogate with the
// k3 KL penalty, and the loss aggregations. It works on per-token log-probabilities and returns
// the gradient of the loss with respect to them; the model turns that into parameter gradients.
package grpo

import (
	"fmt"
	"math"
)

// Scale modes of scale_rewards.
const (
	ScaleGroup = "group"
	ScaleBatch = "batch"
	ScaleNone  = "none"
)

// Loss types of loss_type.
const (
	LossGRPO   = "grpo"
	LossBNPO   = "bnpo"
	LossDrGRPO = "dr_grpo"
	LossDAPO   = "dapo"
)

// stdEps is added to the standard deviation before dividing (DESIGN §5).
const stdEps = 1e-4

// Advantages computes A_i = r_i − mean(group) for consecutive groups of size g, divided by
// std + 1e-4 where scale is "group" (the group's std) or "batch" (the std of all rewards).
// Standard deviations are unbiased (n−1), as torch.std and TRL use. It also returns the share
// of groups whose rewards all agree (frac_reward_zero_std): those groups carry no signal.
func Advantages(rewards []float64, g int, scale string) (adv []float64, fracZeroStd float64, err error) {
	if g < 1 || len(rewards)%g != 0 {
		return nil, 0, fmt.Errorf("grpo: %d rewards do not form groups of %d", len(rewards), g)
	}
	adv = make([]float64, len(rewards))
	batchStd := stdUnbiased(rewards)
	groups := len(rewards) / g
	zero := 0
	for gi := 0; gi < groups; gi++ {
		grp := rewards[gi*g : (gi+1)*g]
		mean := meanOf(grp)
		std := stdUnbiased(grp)
		if math.Abs(std) <= 1e-8 {
			zero++
		}
		for i, r := range grp {
			a := r - mean
			switch scale {
			case ScaleGroup:
				a /= std + stdEps
			case ScaleBatch:
				a /= batchStd + stdEps
			case ScaleNone:
			default:
				return nil, 0, fmt.Errorf("grpo: scale_rewards %q is not one of group, batch, none", scale)
			}
			adv[gi*g+i] = a
		}
	}
	if groups > 0 {
		fracZeroStd = float64(zero) / float64(groups)
	}
	return adv, fracZeroStd, nil
}

func meanOf(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// stdUnbiased is the n−1 standard deviation (0 for fewer than two values).
func stdUnbiased(x []float64) float64 {
	if len(x) < 2 {
		return 0
	}
	m := meanOf(x)
	s := 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return math.Sqrt(s / float64(len(x)-1))
}

// Params are the GRPOConfig fields the loss reads.
type Params struct {
	Beta        float64 // KL coefficient
	Epsilon     float64 // lower clip: ratio ≥ 1 − Epsilon
	EpsilonHigh float64 // upper clip: ratio ≤ 1 + EpsilonHigh
	LossType    string
	// MaxCompletionLength is the dr_grpo denominator's length.
	MaxCompletionLength int
	// Tokens is the number of completion tokens in the whole accumulated batch: dapo divides
	// by it so that the gradient of every micro-batch adds up to one bnpo over the batch.
	// Zero means this micro-batch alone.
	Tokens int
}

// Sequence is one completion's tokens as the loss sees them.
type Sequence struct {
	LogP    []float64 // log-prob of each completion token under the policy (logits / temperature)
	OldLogP []float64 // the same at sampling time; nil means LogP detached (num_iterations = 1)
	RefLogP []float64 // under the reference (adapters off)
	// Advantage is the completion's group advantage.
	Advantage float64
}

// Result of the loss over a (micro-)batch.
type Result struct {
	Loss float64
	// Grad[i][t] = ∂Loss/∂LogP[i][t].
	Grad [][]float64
	// Means over tokens (bnpo-style), as TRL logs them.
	KL, ClipLow, ClipHigh, ClipRegion float64
}

// Loss computes the per-token loss of DESIGN §5,
//
//	loss_t = −min(ratio·A, clamp(ratio, 1−ε, 1+ε_high)·A) + β·KL_t,
//	ratio  = exp(logp − logp_old),  KL_t = exp(ref − logp) − (ref − logp) − 1,
//
// aggregated by p.LossType, with its gradient with respect to each token's log-prob. With a
// detached old log-prob the ratio is 1 in value but not in gradient: ∂ratio/∂logp = ratio.
func Loss(seqs []Sequence, p Params) (Result, error) {
	res := Result{Grad: make([][]float64, len(seqs))}
	total := 0
	for _, s := range seqs {
		total += len(s.LogP)
	}
	// weight(i) is the aggregation's factor for a token of sequence i.
	var weight func(i int) float64
	switch p.LossType {
	case LossGRPO:
		weight = func(i int) float64 {
			return 1 / float64(max(len(seqs[i].LogP), 1)) / float64(max(len(seqs), 1))
		}
	case LossBNPO:
		weight = func(int) float64 { return 1 / float64(max(total, 1)) }
	case LossDrGRPO:
		if p.MaxCompletionLength < 1 {
			return res, fmt.Errorf("grpo: dr_grpo needs max_completion_length ≥ 1")
		}
		weight = func(int) float64 { return 1 / float64(max(len(seqs), 1)*p.MaxCompletionLength) }
	case LossDAPO:
		n := p.Tokens
		if n == 0 {
			n = total
		}
		weight = func(int) float64 { return 1 / float64(max(n, 1)) }
	default:
		return res, fmt.Errorf("grpo: loss_type %q is not one of grpo, bnpo, dr_grpo, dapo", p.LossType)
	}
	var kl, low, high, region float64
	for i, s := range seqs {
		if len(s.RefLogP) != len(s.LogP) || (s.OldLogP != nil && len(s.OldLogP) != len(s.LogP)) {
			return res, fmt.Errorf("grpo: sequence %d: log-prob lengths differ", i)
		}
		w := weight(i)
		a := s.Advantage
		g := make([]float64, len(s.LogP))
		for t, lp := range s.LogP {
			old := lp
			if s.OldLogP != nil {
				old = s.OldLogP[t]
			}
			ratio := math.Exp(lp - old)
			clipped := math.Min(math.Max(ratio, 1-p.Epsilon), 1+p.EpsilonHigh)
			un, cl := ratio*a, clipped*a
			var lt, dt float64
			switch {
			case un < cl:
				lt, dt = -un, -ratio*a
			case un > cl:
				lt = -cl
				if ratio > 1-p.Epsilon && ratio < 1+p.EpsilonHigh {
					dt = -ratio * a
				}
			default: // equal: torch.minimum splits the gradient between both sides
				lt = -un
				dt = -0.5 * ratio * a
				if ratio >= 1-p.Epsilon && ratio <= 1+p.EpsilonHigh {
					dt -= 0.5 * ratio * a
				}
			}
			d := s.RefLogP[t] - lp
			klT := math.Exp(d) - d - 1
			kl += klT
			if p.Beta != 0 {
				lt += p.Beta * klT
				dt += p.Beta * (1 - math.Exp(d))
			}
			res.Loss += w * lt
			g[t] = w * dt
			lowClip := ratio < 1-p.Epsilon && a < 0
			highClip := ratio > 1+p.EpsilonHigh && a > 0
			if lowClip {
				low++
			}
			if highClip {
				high++
			}
			if lowClip || highClip {
				region++
			}
		}
		res.Grad[i] = g
	}
	if total > 0 {
		n := float64(total)
		res.KL, res.ClipLow, res.ClipHigh, res.ClipRegion = kl/n, low/n, high/n, region/n
	}
	return res, nil
}
