// Package grpo holds the maths of Group Relative Policy Optimization as DESIGN §5 states it
// (names and definitions follow TRL's GRPOConfig and GRPOTrainer): group advantages, the
// per-token policy terms of every loss_type with the k3 KL penalty, importance sampling at
// token or sequence level (GSPO), truncated-completion masking, the high-entropy token filter,
// the loss aggregations and the clip metrics. It works on per-token log-probabilities and
// returns the gradient of the loss with respect to them; the model turns that into parameter
// gradients.
package grpo

import (
	"fmt"
	"math"
	"rlhfstation/internal/stats"
	"sort"
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
	LossCISPO  = "cispo"
	LossSAPO   = "sapo"
	LossLUSPO  = "luspo"
	LossVESPO  = "vespo"
)

// LossTypes lists every loss_type, for validation and messages.
var LossTypes = []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO, LossCISPO, LossSAPO, LossLUSPO, LossVESPO}

// Levels of importance_sampling_level.
const (
	LevelToken    = "token"
	LevelSequence = "sequence"
)

// stdEps is added to the standard deviation before dividing (DESIGN §5).
const stdEps = 1e-4

// Advantages computes A_i = r_i − mean(group) for consecutive groups of size g, divided by
// std + 1e-4 where scale is "group" (the group's std) or "batch" (the std of all rewards).
// Standard deviations are unbiased (n−1), as torch.std and TRL use. A NaN reward (a completion
// no reward function could score: a failed episode) is left out of the means and deviations
// and gets advantage 0, as TRL's nan-aware advantages do. It also returns the share of groups
// whose rewards all agree (frac_reward_zero_std): those groups carry no signal.
func Advantages(rewards []float64, g int, scale string) (adv []float64, fracZeroStd float64, err error) {
	if g < 1 || len(rewards)%g != 0 {
		return nil, 0, fmt.Errorf("grpo: %d rewards do not form groups of %d", len(rewards), g)
	}
	adv = make([]float64, len(rewards))
	_, batchStd := stats.NaNMeanStd(rewards)
	groups := len(rewards) / g
	zero := 0
	for gi := 0; gi < groups; gi++ {
		grp := rewards[gi*g : (gi+1)*g]
		mean, std := stats.NaNMeanStd(grp)
		if !(math.Abs(std) > 1e-8) {
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
			if math.IsNaN(a) {
				a = 0
			}
			adv[gi*g+i] = a
		}
	}
	if groups > 0 {
		fracZeroStd = float64(zero) / float64(groups)
	}
	return adv, fracZeroStd, nil
}

// Aggregations of multi_objective_aggregation.
const (
	SumThenNormalize = "sum_then_normalize"
	NormalizeThenSum = "normalize_then_sum"
)

// NormalizedSum is GDPO's reward (multi_objective_aggregation "normalize_then_sum"): each
// function's values byFunc[f] normalised within their group, (r − mean)/(std + 1e-4) over the
// values that apply, then summed with the weights (functions that do not apply add nothing; a
// completion none applies to stays NaN). Advantages(NormalizedSum(...), len(all), "batch")
// then gives TRL's advantages: the sum normalised over the whole batch.
func NormalizedSum(byFunc [][]float64, weights []float64, g int) ([]float64, error) {
	if len(byFunc) == 0 || len(weights) != len(byFunc) {
		return nil, fmt.Errorf("grpo: %d reward functions with %d weights", len(byFunc), len(weights))
	}
	n := len(byFunc[0])
	if g < 1 || n%g != 0 {
		return nil, fmt.Errorf("grpo: %d rewards do not form groups of %d", n, g)
	}
	out := make([]float64, n)
	scored := make([]bool, n)
	for f, vals := range byFunc {
		if len(vals) != n {
			return nil, fmt.Errorf("grpo: reward function %d has %d values, not %d", f, len(vals), n)
		}
		for gi := 0; gi < n/g; gi++ {
			grp := vals[gi*g : (gi+1)*g]
			mean, std := stats.NaNMeanStd(grp)
			if g == 1 {
				std = 0
			}
			for i, r := range grp {
				if math.IsNaN(r) {
					continue
				}
				out[gi*g+i] += weights[f] * (r - mean) / (std + stdEps)
				scored[gi*g+i] = true
			}
		}
	}
	for i := range out {
		if !scored[i] {
			out[i] = math.NaN()
		}
	}
	return out, nil
}

// AdaptiveEntropy is TRL's adaptive entropy controller (use_adaptive_entropy): the bonus is
// applied only while the last step's mean entropy is at most the target, and after each step
// the coefficient moves by delta toward more bonus (entropy at or below the target) or less,
// within [min, max].
type AdaptiveEntropy struct {
	Coef, Target, Min, Max, Delta float64
	// Last is the previous step's mean entropy over the loss tokens (+Inf before the first:
	// no bonus on the first step, as TRL starts from an infinite entropy).
	Last float64
}

// Applied is the coefficient the coming step's loss uses.
func (c *AdaptiveEntropy) Applied() float64 {
	if c.Last <= c.Target {
		return c.Coef
	}
	return 0
}

// Observe updates the controller with a finished step's mean entropy.
func (c *AdaptiveEntropy) Observe(entropy float64) {
	if entropy <= c.Target {
		c.Coef = math.Min(c.Coef+c.Delta, c.Max)
	} else {
		c.Coef = math.Max(c.Coef-c.Delta, c.Min)
	}
	c.Last = entropy
}

// Params are the GRPOConfig fields the loss reads.
type Params struct {
	Beta        float64 // KL coefficient
	Epsilon     float64 // lower clip: ratio ≥ 1 − Epsilon
	EpsilonHigh float64 // upper clip: ratio ≤ 1 + EpsilonHigh (cispo: the weight's cap itself)
	LossType    string
	// ImportanceSamplingLevel is "token" (one ratio per token; "" means token) or "sequence"
	// (GSPO: one ratio per sequence, exp of the mean log-ratio over its tokens).
	ImportanceSamplingLevel string
	// MaskTruncatedCompletions drops completions that ended without a stop token from the
	// loss (and from the token counts and metrics), as DAPO recommends.
	MaskTruncatedCompletions bool
	// TopEntropyQuantile is ρ: the policy term keeps only tokens whose entropy is at least the
	// (1 − ρ) quantile of the batch's entropies. 1 keeps every token; it must be set (the zero
	// value keeps only the highest-entropy tokens, as in TRL).
	TopEntropyQuantile float64
	// SAPO's gate temperatures for positive and non-positive advantages.
	SAPOTemperaturePos, SAPOTemperatureNeg float64
	// VESPO's Gamma weighting: power k and decay λ for non-negative and negative advantages.
	VESPOKPos, VESPOLambdaPos, VESPOKNeg, VESPOLambdaNeg float64
	// MaxCompletionLength is the dr_grpo denominator's length.
	MaxCompletionLength int
	// Tokens is the number of loss tokens in the whole accumulated batch (completions dropped
	// by MaskTruncatedCompletions not counted): dapo, cispo and vespo divide by it so that the
	// gradients of every micro-batch add up to one normalisation over the batch. Zero means
	// this micro-batch alone.
	Tokens int
	// Delta is TRL's two-sided clipping: the unclipped term's weight is capped at Delta
	// (min(w, δ)·A) for the clipped loss types. 0 means off (TRL's None).
	Delta float64
	// OffPolicyMaskThreshold drops the policy term of a sequence whose advantage is negative
	// and whose mean KL(old ‖ policy) over its loss tokens, mean(logp_old − logp), exceeds it
	// (DeepSeek-V3.2's off-policy sequence mask). 0 means off (TRL's None).
	OffPolicyMaskThreshold float64
	// EntropyCoef is the entropy bonus's coefficient as applied in this step (the adaptive
	// controller's value, or 0 when it gates the bonus off): the loss gets −coef·H̄, H̄ the mean
	// entropy of the loss tokens the entropy filter keeps. Needs Sequence.Entropy.
	EntropyCoef float64
}

// Validate checks the values the loss depends on.
func (p Params) Validate() error {
	known := false
	for _, t := range LossTypes {
		known = known || p.LossType == t
	}
	switch {
	case !known:
		return fmt.Errorf("grpo: loss_type %q is not one of %v", p.LossType, LossTypes)
	case p.ImportanceSamplingLevel != "" && p.ImportanceSamplingLevel != LevelToken && p.ImportanceSamplingLevel != LevelSequence:
		return fmt.Errorf("grpo: importance_sampling_level %q is not token or sequence", p.ImportanceSamplingLevel)
	case !(p.TopEntropyQuantile >= 0 && p.TopEntropyQuantile <= 1):
		return fmt.Errorf("grpo: top_entropy_quantile %v is not in [0, 1]", p.TopEntropyQuantile)
	case p.LossType == LossDrGRPO && p.MaxCompletionLength < 1:
		return fmt.Errorf("grpo: dr_grpo needs max_completion_length ≥ 1")
	case p.LossType == LossSAPO && !(p.SAPOTemperaturePos > 0 && p.SAPOTemperatureNeg > 0):
		return fmt.Errorf("grpo: sapo needs temperatures above 0")
	case p.Delta != 0 && !(p.Delta > 1+p.EpsilonHigh):
		return fmt.Errorf("grpo: delta %v must be above 1 + epsilon_high (%v)", p.Delta, 1+p.EpsilonHigh)
	case p.OffPolicyMaskThreshold < 0:
		return fmt.Errorf("grpo: off_policy_mask_threshold %v is negative", p.OffPolicyMaskThreshold)
	}
	return nil
}

func (p Params) sequenceLevel() bool { return p.ImportanceSamplingLevel == LevelSequence }

// clipped reports whether the loss type uses the clipped surrogate (and logs clip ratios).
func (p Params) clipped() bool {
	switch p.LossType {
	case LossGRPO, LossBNPO, LossDrGRPO, LossDAPO, LossLUSPO:
		return true
	}
	return false
}

// GlobalTokens reports whether a loss type divides by the loss tokens of the whole accumulated
// batch (Params.Tokens): its micro-batch losses add up. The others are means per micro-batch,
// which gradient accumulation averages.
func GlobalTokens(lossType string) bool {
	return lossType == LossDAPO || lossType == LossCISPO || lossType == LossVESPO
}

// Masked reports whether MaskTruncatedCompletions drops a completion from the loss.
func (p Params) Masked(truncated bool) bool { return p.MaskTruncatedCompletions && truncated }

// Sequence is one completion's tokens as the loss sees them.
type Sequence struct {
	LogP    []float64 // log-prob of each completion token under the policy (logits / temperature)
	OldLogP []float64 // the same at sampling time; nil means LogP detached (num_iterations = 1)
	RefLogP []float64 // under the reference (adapters off)
	// Entropy of the policy's distribution at each token (logits / temperature); needed when
	// TopEntropyQuantile < 1, and logged as `entropy` when given.
	Entropy []float64
	// Advantage is the completion's group advantage.
	Advantage float64
	// Truncated: the completion ended at max_completion_length, without a stop token.
	Truncated bool
	// Mask marks the tokens the model wrote (true) among those an environment or the chat
	// template wrote between its turns (false): only the former are in the loss, the KL, the
	// entropy statistics and the token counts. nil: every token is the model's.
	Mask []bool
}

// Counts reports whether token t is a loss token of s (before truncation masking).
func (s Sequence) Counts(t int) bool { return s.Mask == nil || s.Mask[t] }

// ModelTokens is how many of s's tokens the model wrote.
func (s Sequence) ModelTokens() int {
	if s.Mask == nil {
		return len(s.LogP)
	}
	n := 0
	for _, m := range s.Mask {
		if m {
			n++
		}
	}
	return n
}

// Result of the loss over a (micro-)batch.
type Result struct {
	Loss float64
	// Grad[i][t] = ∂Loss/∂LogP[i][t].
	Grad [][]float64
	// EntropyGrad[i][t] = ∂Loss/∂Entropy[i][t] (the entropy bonus's; nil without one).
	EntropyGrad [][]float64
	// Bonus is the entropy bonus's term, coef·H̄, which Loss already subtracts: Loss + Bonus
	// is the policy loss alone (TRL's policy_loss).
	Bonus float64
	// Stats are the metrics' sums: add those of every micro-batch, then read Metrics.
	Stats Stats
}

// Stats accumulate the loss metrics over the micro-batches of a step. Token means are over
// the loss tokens (masked completions left out); with sequence-level importance sampling the
// ratio metrics are per sequence, over every sequence, as TRL computes them.
type Stats struct {
	LossType     string
	Tokens, Seqs float64 // loss tokens and sequences seen
	KL, Entropy  float64 // sums over loss tokens
	HasEntropy   bool
	// KeptEntropy and KeptTokens are the entropy's sum and count over the loss tokens the
	// entropy filter keeps: the mean the adaptive entropy controller observes (TRL's
	// world entropy).
	KeptEntropy, KeptTokens float64
	// Bonus is the entropy bonus's term of the step's loss (the caller adds each micro-batch's
	// Result.Bonus, scaled as its loss).
	Bonus                   float64
	ClipLow, ClipHigh       float64 // sums of the clip indicators
	ClipRegion, CISPOClip   float64
	ClipCount               float64 // what those sums are over: tokens, or sequences
	ClipLowMin, ClipHighMax float64 // over sequences (NaN before any)
	PhiSum                  float64 // vespo: Σ φ over sequences
	// OffPolicyDropped counts the sequences the off-policy mask dropped (logged as
	// off_policy_mask/dropped_ratio when the mask is on).
	OffPolicyDropped float64
	OffPolicyMask    bool
}

// Add accumulates another micro-batch's stats (the zero Stats is an empty accumulator).
func (s *Stats) Add(o Stats) {
	if s.LossType == "" {
		*s = o
		return
	}
	s.Tokens += o.Tokens
	s.Seqs += o.Seqs
	s.KL += o.KL
	s.Entropy += o.Entropy
	s.HasEntropy = s.HasEntropy && o.HasEntropy
	s.KeptEntropy += o.KeptEntropy
	s.KeptTokens += o.KeptTokens
	s.ClipLow += o.ClipLow
	s.ClipHigh += o.ClipHigh
	s.ClipRegion += o.ClipRegion
	s.CISPOClip += o.CISPOClip
	s.ClipCount += o.ClipCount
	s.ClipLowMin = nanMin(s.ClipLowMin, o.ClipLowMin)
	s.ClipHighMax = nanMax(s.ClipHighMax, o.ClipHighMax)
	s.PhiSum += o.PhiSum
	s.Bonus += o.Bonus
	s.OffPolicyDropped += o.OffPolicyDropped
}

// Metrics are the step metrics with TRL's names: kl, entropy (when entropies were given) and,
// by loss type, clip_ratio/{low_mean,low_min,high_mean,high_max,region_mean},
// cispo_clip_ratio or vespo/phi_seq_mean. low_min and high_max are the least and greatest
// per-sequence clip shares of the step.
func (s Stats) Metrics() map[string]float64 {
	out := map[string]float64{"kl": ratio(s.KL, s.Tokens)}
	if s.OffPolicyMask {
		out["off_policy_mask/dropped_ratio"] = ratio(s.OffPolicyDropped, s.Seqs)
	}
	if s.HasEntropy {
		out["entropy"] = ratio(s.Entropy, s.Tokens)
	}
	switch s.LossType {
	case LossCISPO:
		out["cispo_clip_ratio"] = ratio(s.CISPOClip, s.ClipCount)
	case LossSAPO:
	case LossVESPO:
		out["vespo/phi_seq_mean"] = ratio(s.PhiSum, s.Seqs)
	default:
		out["clip_ratio/low_mean"] = ratio(s.ClipLow, s.ClipCount)
		out["clip_ratio/high_mean"] = ratio(s.ClipHigh, s.ClipCount)
		out["clip_ratio/region_mean"] = ratio(s.ClipRegion, s.ClipCount)
		out["clip_ratio/low_min"] = s.ClipLowMin
		out["clip_ratio/high_max"] = s.ClipHighMax
	}
	return out
}

// KeptEntropyMean is the mean entropy over the loss tokens the entropy filter kept.
func (s Stats) KeptEntropyMean() float64 { return ratio(s.KeptEntropy, s.KeptTokens) }

// ratio is num/den with den clamped to at least 1, as TRL's masked means are.
func ratio(num, den float64) float64 { return num / math.Max(den, 1) }

func nanMin(a, b float64) float64 {
	if math.IsNaN(a) || b < a {
		return b
	}
	return a
}

func nanMax(a, b float64) float64 {
	if math.IsNaN(a) || b > a {
		return b
	}
	return a
}

// Loss computes the GRPO loss of a micro-batch and its gradient with respect to each token's
// log-prob. With the importance weight w (per token: exp(logp − logp_old); per sequence:
// exp(mean over its loss tokens of (logp − logp_old))), advantage A and
// KL_t = exp(ref − logp) − (ref − logp) − 1, the per-token policy term is, by loss_type,
//
//	grpo, bnpo, dr_grpo, dapo, luspo: −min(min(w, δ)·A, clamp(w, 1−ε, 1+ε_high)·A)  (δ: delta, ∞ when off)
//	cispo: −sg(min(w, ε_high))·A·logp
//	sapo:  −σ(τ(w − 1))·(4/τ)·A,  τ = τ_pos if A > 0 else τ_neg
//	vespo: −sg(φ(W))·A·logp,  W = exp(Σ_t (logp − logp_old)), φ(W) = e^λ W^k e^{−λW}
//
// multiplied by the off-policy sequence mask and the entropy filter (top_entropy_quantile),
// plus β·KL_t, then aggregated over the loss tokens (the tokens the model wrote: Sequence.Mask;
// a masked truncated completion has none): grpo and sapo average each sequence's tokens, then
// the sequences; bnpo divides by the micro-batch's tokens; dr_grpo by sequences ×
// max_completion_length; dapo, cispo and vespo by the accumulated batch's tokens; luspo sums
// each sequence's tokens (its loss times its length) and averages the sequences. The entropy
// bonus subtracts coef·ΣH/N over the loss tokens the entropy filter keeps, N their number
// (dapo, cispo, vespo: the accumulated batch's loss tokens), as TRL does.
// With a detached old log-prob the weight is 1 in value but not in gradient: ∂w/∂logp = w.
func Loss(seqs []Sequence, p Params) (Result, error) {
	res := Result{Grad: make([][]float64, len(seqs))}
	if err := p.Validate(); err != nil {
		return res, err
	}
	n := len(seqs)
	active := make([]float64, n) // loss tokens of each sequence
	local := 0.0
	for i, s := range seqs {
		if len(s.RefLogP) != len(s.LogP) || (s.OldLogP != nil && len(s.OldLogP) != len(s.LogP)) ||
			(s.Entropy != nil && len(s.Entropy) != len(s.LogP)) || (s.Mask != nil && len(s.Mask) != len(s.LogP)) {
			return res, fmt.Errorf("grpo: sequence %d: log-prob lengths differ", i)
		}
		if p.EntropyCoef != 0 && s.Entropy == nil {
			return res, fmt.Errorf("grpo: entropy_coef needs the entropies of sequence %d", i)
		}
		if !p.Masked(s.Truncated) {
			active[i] = float64(s.ModelTokens())
			local += active[i]
		}
	}
	keep, err := entropyFilter(seqs, active, p.TopEntropyQuantile)
	if err != nil {
		return res, err
	}
	// weight(i) is the aggregation's factor for a loss token of sequence i.
	var weight func(i int) float64
	switch p.LossType {
	case LossGRPO, LossSAPO:
		weight = func(i int) float64 { return 1 / math.Max(active[i], 1) / float64(max(n, 1)) }
	case LossBNPO:
		weight = func(int) float64 { return 1 / math.Max(local, 1) }
	case LossDrGRPO:
		weight = func(int) float64 { return 1 / float64(max(n, 1)*p.MaxCompletionLength) }
	case LossDAPO, LossCISPO, LossVESPO:
		tokens := float64(p.Tokens)
		if p.Tokens == 0 {
			tokens = local
		}
		weight = func(int) float64 { return 1 / math.Max(tokens, 1) }
	case LossLUSPO:
		weight = func(int) float64 { return 1 / float64(max(n, 1)) }
	}
	// The entropy bonus's factor for a kept loss token: coef over the kept tokens (the
	// accumulated batch's loss tokens for the global types).
	entW := 0.0
	if p.EntropyCoef != 0 {
		den := 0.0
		if GlobalTokens(p.LossType) {
			den = float64(p.Tokens)
			if p.Tokens == 0 {
				den = local
			}
		} else {
			for i, s := range seqs {
				for t := range s.LogP {
					if active[i] > 0 && s.Counts(t) && (keep == nil || keep[i][t]) {
						den++
					}
				}
			}
		}
		entW = p.EntropyCoef / math.Max(den, 1)
		res.EntropyGrad = make([][]float64, n)
	}
	st := Stats{LossType: p.LossType, Seqs: float64(n), Tokens: local, HasEntropy: n > 0,
		ClipLowMin: math.NaN(), ClipHighMax: math.NaN(), OffPolicyMask: p.OffPolicyMaskThreshold > 0}
	seqLevel := p.sequenceLevel()
	delta := math.Inf(1)
	if p.Delta != 0 {
		delta = p.Delta
	}
	for i, s := range seqs {
		w, a, m := weight(i), s.Advantage, active[i] > 0
		st.HasEntropy = st.HasEntropy && s.Entropy != nil
		logRatio := make([]float64, len(s.LogP))
		for t, lp := range s.LogP {
			if s.OldLogP != nil && s.Counts(t) {
				logRatio[t] = lp - s.OldLogP[t]
			}
		}
		// The sequence's importance weight (GSPO) or none.
		seqCoef := 1.0
		if seqLevel && m {
			seqCoef = math.Exp(sum(logRatio) / active[i])
		}
		// The off-policy sequence mask: keep when A ≥ 0 or mean(old − logp) ≤ threshold.
		policy := 1.0
		if p.OffPolicyMaskThreshold > 0 && m && a < 0 && -sum(logRatio)/active[i] > p.OffPolicyMaskThreshold {
			policy = 0
			st.OffPolicyDropped++
		}
		// vespo's detached Gamma weight of the sequence's summed log-ratio.
		phi := 0.0
		if p.LossType == LossVESPO {
			phi = p.vespoWeight(logRatio, m, a)
			st.PhiSum += phi
		}
		g := make([]float64, len(s.LogP))
		var eg []float64
		if res.EntropyGrad != nil {
			eg = make([]float64, len(s.LogP))
			res.EntropyGrad[i] = eg
		}
		seqDC := 0.0 // ∂Loss/∂(sequence weight), spread over the tokens after the loop
		var low, high float64
		for t, lp := range s.LogP {
			if !m || !s.Counts(t) {
				continue
			}
			coef := seqCoef
			if !seqLevel {
				coef = math.Exp(logRatio[t])
			}
			if keep == nil || keep[i][t] {
				var val, dc, dlp float64 // term, ∂term/∂coef, ∂term/∂logp directly
				switch p.LossType {
				case LossCISPO:
					k := math.Min(coef, p.EpsilonHigh)
					val, dlp = -k*a*lp, -k*a
				case LossVESPO:
					val, dlp = -phi*a*lp, -phi*a
				case LossSAPO:
					tau := p.SAPOTemperatureNeg
					if a > 0 {
						tau = p.SAPOTemperaturePos
					}
					sg := sigmoid(tau * (coef - 1))
					val, dc = -sg*4/tau*a, -4*sg*(1-sg)*a
				default:
					val, dc = clippedTerm(coef, a, 1-p.Epsilon, 1+p.EpsilonHigh, delta)
				}
				val, dc, dlp = val*policy, dc*policy, dlp*policy
				res.Loss += w * val
				g[t] += w * dlp
				if seqLevel {
					seqDC += w * dc
				} else {
					g[t] += w * dc * coef
				}
				if eg != nil {
					res.Loss -= entW * s.Entropy[t]
					res.Bonus += entW * s.Entropy[t]
					eg[t] = -entW
				}
			}
			d := s.RefLogP[t] - lp
			klT := math.Exp(d) - d - 1
			st.KL += klT
			if s.Entropy != nil {
				st.Entropy += s.Entropy[t]
				if keep == nil || keep[i][t] {
					st.KeptEntropy += s.Entropy[t]
					st.KeptTokens++
				}
			}
			if p.Beta != 0 {
				res.Loss += w * p.Beta * klT
				g[t] += w * p.Beta * (1 - math.Exp(d))
			}
			if !seqLevel {
				l, h, c := clipFlags(coef, a, p)
				low, high = low+l, high+h
				st.ClipLow, st.ClipHigh, st.CISPOClip = st.ClipLow+l, st.ClipHigh+h, st.CISPOClip+c
				st.ClipRegion += math.Max(l, h)
				st.ClipCount++
			}
		}
		if seqLevel {
			for t := range g {
				if m && s.Counts(t) {
					g[t] += seqDC * seqCoef / active[i]
				}
			}
			l, h, c := clipFlags(seqCoef, a, p)
			low, high = l, h
			st.ClipLow, st.ClipHigh, st.CISPOClip = st.ClipLow+l, st.ClipHigh+h, st.CISPOClip+c
			st.ClipRegion += math.Max(l, h)
			st.ClipCount++
			st.ClipLowMin, st.ClipHighMax = nanMin(st.ClipLowMin, low), nanMax(st.ClipHighMax, high)
		} else if m { // a sequence without loss tokens has no share (NaN in TRL, skipped)
			st.ClipLowMin = nanMin(st.ClipLowMin, low/active[i])
			st.ClipHighMax = nanMax(st.ClipHighMax, high/active[i])
		}
		res.Grad[i] = g
	}
	res.Stats = st
	return res, nil
}

// clippedTerm is −min(min(c, δ)·A, clamp(c, lo, hi)·A) and its derivative with respect to c,
// with PyTorch's subgradients: clamp passes the gradient on its closed interval, and on a tie
// torch.minimum gives each side half. δ = +Inf is no two-sided clipping.
func clippedTerm(c, a, lo, hi, delta float64) (val, dc float64) {
	cl := math.Min(math.Max(c, lo), hi)
	un, cv := math.Min(c, delta)*a, cl*a
	dun, dcv := 0.0, 0.0 // ∂un/∂c, ∂cv/∂c
	if c <= delta {
		dun = a
	}
	if c >= lo && c <= hi {
		dcv = a
	}
	switch {
	case un < cv:
		return -un, -dun
	case un > cv:
		return -cv, -dcv
	default:
		return -un, -0.5 * (dun + dcv)
	}
}

// clipFlags are the clip indicators of a weight: low (w < 1−ε with A < 0) and high
// (w > 1+ε_high with A > 0) for the clipped losses, cispo's (w > ε_high with A > 0).
func clipFlags(c, a float64, p Params) (low, high, cispo float64) {
	if p.LossType == LossCISPO {
		if c > p.EpsilonHigh && a > 0 {
			cispo = 1
		}
		return
	}
	if !p.clipped() {
		return
	}
	if c < 1-p.Epsilon && a < 0 {
		low = 1
	}
	if c > 1+p.EpsilonHigh && a > 0 {
		high = 1
	}
	return
}

// vespoWeight is VESPO's φ(W) = exp(λ + k·log W − λ·W) of the sequence's summed log-ratio
// (each clamped to ±20, the sum to [ln 1e-8, 20]); k, λ by the sign of the advantage
// (non-negative: the _pos pair), λ at least 1e-4, non-finite φ as 0.
func (p Params) vespoWeight(logRatio []float64, active bool, a float64) float64 {
	s := 0.0
	if active {
		for _, r := range logRatio {
			s += math.Max(-20, math.Min(20, r))
		}
	}
	logW := math.Max(math.Log(1e-8), math.Min(20, s))
	k, lambda := p.VESPOKNeg, p.VESPOLambdaNeg
	if a >= 0 {
		k, lambda = p.VESPOKPos, p.VESPOLambdaPos
	}
	lambda = math.Max(lambda, 1e-4)
	phi := math.Exp(lambda + k*logW - lambda*math.Exp(logW))
	if math.IsNaN(phi) || math.IsInf(phi, 0) {
		return 0
	}
	return phi
}

// entropyFilter is top_entropy_quantile's mask: keep[i][t] when the token's entropy is at
// least the (1 − ρ) quantile of the entropies of the loss tokens (nil when ρ = 1 keeps all).
func entropyFilter(seqs []Sequence, active []float64, rho float64) ([][]bool, error) {
	if rho >= 1 {
		return nil, nil
	}
	var all []float64
	for i, s := range seqs {
		if active[i] == 0 {
			continue
		}
		if s.Entropy == nil {
			return nil, fmt.Errorf("grpo: top_entropy_quantile %v needs the entropies of sequence %d", rho, i)
		}
		for t, h := range s.Entropy {
			if s.Counts(t) {
				all = append(all, h)
			}
		}
	}
	keep := make([][]bool, len(seqs))
	for i := range keep {
		keep[i] = make([]bool, len(seqs[i].LogP))
	}
	if len(all) == 0 {
		return keep, nil
	}
	thr := Quantile(all, 1-rho)
	for i, s := range seqs {
		if active[i] == 0 {
			continue
		}
		for t, h := range s.Entropy {
			keep[i][t] = h >= thr && s.Counts(t)
		}
	}
	return keep, nil
}

// Quantile is torch.quantile's default (linear) q-quantile of x: the sorted values at ranks
// floor and ceil of q·(n−1), interpolated as torch.lerp does (from the nearer end), so that
// ties with the threshold fall the same way. x is sorted in place.
func Quantile(x []float64, q float64) float64 {
	sort.Float64s(x)
	rank := q * float64(len(x)-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	w := rank - float64(lo)
	a, b := x[lo], x[hi]
	if w < 0.5 {
		return a + w*(b-a)
	}
	return b - (b-a)*(1-w)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func sum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}
