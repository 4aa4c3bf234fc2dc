package engine

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"rlhfstation/engine/grpo"
	"rlhfstation/engine/model"
)

// generation is one generation batch as TRL's GRPOTrainer has it: steps_per_generation
// micro-batches sampled with one policy, whose advantages are computed together, each then
// served num_iterations times (micro-step k of the batch trains on micro-batch k mod
// steps_per_generation). A new one is drawn when the last is used up, so with the defaults
// (num_iterations 1, steps_per_generation = gradient_accumulation_steps) every optimizer
// step draws its own. Unlike TRL, the completions are not shuffled across the micro-batches:
// each keeps its prompts' groups, which changes only which completions share a micro-batch.
type generation struct {
	batches []*batch
	// tokens are the loss tokens of all its micro-batches (masked completions left out):
	// dapo, cispo and vespo divide by them, as TRL divides by num_items_in_batch.
	tokens int
	used   int // micro-steps served so far
	// old: the policy's log-probs were kept as logp_old at sampling time, because it changes
	// before the batch is used up.
	old bool
}

// uses is how many micro-steps a generation batch serves.
func (e *Engine) uses() int { return e.cfg.GenerationSteps() * max(1, e.cfg.NumIterations) }

// keepsOld reports whether a generation batch outlives an optimizer step, so that its
// importance weights need the log-probs of the policy that sampled it. This is TRL's rule:
// logp_old is computed unless gradient_accumulation_steps is a multiple of
// steps_per_generation × num_iterations (then every use falls inside the step that drew it,
// before any update, and logp_old is logp detached).
func (e *Engine) keepsOld() bool {
	return max(1, e.cfg.GradientAccumulationSteps)%e.uses() != 0
}

// nextMicroBatch returns the micro-batch the next micro-step trains on, drawing a new
// generation batch when the current one is used up. drew reports a new draw.
func (e *Engine) nextMicroBatch(ctx context.Context, rng *rand.Rand) (b *batch, drew bool, err error) {
	if e.gen == nil || e.gen.used >= e.uses() {
		g, err := e.draw(ctx, rng)
		if err != nil {
			return nil, false, err
		}
		e.gen, drew = g, true
	}
	b = e.gen.batches[e.gen.used%len(e.gen.batches)]
	e.gen.used++
	return b, drew, nil
}

// draw samples a generation batch: steps_per_generation micro-batches of
// per_device_train_batch_size prompts × num_generations completions, scored and rewarded
// micro-batch by micro-batch, with group advantages over the whole batch (scale_rewards
// "batch" divides by the std of all its rewards, as TRL's does). When the batch outlives an
// optimizer step, the sampling policy's log-probs are kept as logp_old.
//
// logp_old comes from a forward pass of the policy right after sampling (what TRL computes
// when it does not use vLLM), not from the sampler's own logits: the decode path rounds
// differently from the training pass (on the GPU, in bf16, by up to a few hundredths), and
// the first pass over a batch must see weights of exactly 1 to be the on-policy step. The
// pass has no dropout; it costs one forward over the batch, shared by num_iterations uses.
func (e *Engine) draw(ctx context.Context, rng *rand.Rand) (*generation, error) {
	g := &generation{old: e.keepsOld()}
	params := lossParams(e.cfg)
	var rs []float64
	for j := 0; j < e.cfg.GenerationSteps(); j++ {
		t0 := time.Now()
		b, err := e.generate(ctx, e.nextPrompts(e.cfg.PerDeviceTrainBatchSize), rng.Uint64())
		if err != nil {
			return nil, err
		}
		if err := e.score(b); err != nil {
			return nil, err
		}
		if b.rewardMetrics, err = e.reward(b); err != nil {
			return nil, err
		}
		e.alignAnswers(b)
		if g.old {
			if err := e.keepOldLogProbs(b); err != nil {
				return nil, err
			}
		}
		b.seconds = time.Since(t0).Seconds()
		b.gen = g
		for _, r := range b.rollouts {
			rs = append(rs, r.reward)
			if !params.Masked(r.cut) {
				g.tokens += r.modelTokens()
			}
		}
		e.tokensSeen += int64(b.all)
		g.batches = append(g.batches, b)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	adv, err := e.advantages(g, rs)
	if err != nil {
		return nil, err
	}
	k := 0
	for _, b := range g.batches {
		b.rewards = make([]float64, len(b.rollouts))
		for i, r := range b.rollouts {
			r.adv = adv[k]
			b.rewards[i] = r.reward
			k++
		}
		// The share of groups whose rewards all agree, per micro-batch (groups never span two).
		if _, b.zeroStd, err = grpo.Advantages(b.rewards, e.cfg.NumGenerations, grpo.ScaleNone); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// keepOldLogProbs stores the policy's log-probs of each completion token (logits divided by
// the temperature, adapters on, no dropout) as the rollouts' logp_old.
func (e *Engine) keepOldLogProbs(b *batch) error {
	seqs := make([][]int, len(b.rollouts))
	for i, r := range b.rollouts {
		seqs[i] = append(append(make([]int, 0, len(r.prompt)+len(r.tokens)), r.prompt...), r.tokens...)
	}
	lp, err := e.model.LogProbs(seqs, float32(e.cfg.Temperature), model.AdaptersOn)
	if err != nil {
		return err
	}
	for i, r := range b.rollouts {
		p := len(r.prompt)
		r.oldLogP = make([]float64, len(r.tokens))
		for k := range r.tokens {
			r.oldLogP[k] = float64(lp[i][p+k])
		}
	}
	return nil
}

// advantages are the group advantages of a generation batch's rewards: TRL's
// sum_then_normalize (the weighted sum rs normalised within each group), or GDPO's
// normalize_then_sum (each reward function normalised within its group, then the weighted sum
// normalised over the batch).
func (e *Engine) advantages(g *generation, rs []float64) ([]float64, error) {
	if e.cfg.MultiObjectiveAggregation != grpo.NormalizeThenSum {
		adv, _, err := grpo.Advantages(rs, e.cfg.NumGenerations, e.cfg.ScaleRewards)
		return adv, err
	}
	var names []string
	var weights []float64
	for _, f := range e.funcs {
		names, weights = append(names, f.Func.Name()), append(weights, f.Weight)
	}
	for _, r := range e.envs {
		for _, name := range envRewardNames(g, r) {
			names, weights = append(names, r.spec.Name+"."+name), append(weights, r.spec.Weight(name))
		}
	}
	byFunc := make([][]float64, len(names))
	for f, name := range names {
		for _, b := range g.batches {
			for _, r := range b.rollouts {
				v, ok := r.byFunc[name]
				if !ok || (r.ep != nil && r.ep.failed != "") {
					v = math.NaN()
				}
				byFunc[f] = append(byFunc[f], v)
			}
		}
	}
	sum, err := grpo.NormalizedSum(byFunc, weights, e.cfg.NumGenerations)
	if err != nil {
		return nil, err
	}
	adv, _, err := grpo.Advantages(sum, len(sum), grpo.ScaleBatch)
	return adv, err
}

// envRewardNames are the reward names an environment gave over a generation batch, sorted.
func envRewardNames(g *generation, run *envRun) []string {
	seen := map[string]bool{}
	for _, b := range g.batches {
		for _, r := range b.rollouts {
			if r.ep != nil && r.ep.run == run {
				for k := range r.ep.envRew {
					seen[k] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
