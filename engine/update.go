package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/model"
	"rlhfstation/engine/optim"
	"rlhfstation/internal/stats"
)

// maxBadSteps non-finite updates in a row stop the run.
const maxBadSteps = 3

var errNonFiniteStop = errors.New("3 non-finite updates in a row: the run stopped, its last good checkpoint kept")

// trainStep does one optimizer step of DESIGN §5: gradient_accumulation_steps micro-batches
// of per_device_train_batch_size prompts × num_generations completions are rolled out and
// rewarded first (dapo normalises by the tokens of all of them), then each is run through the
// policy with its tape and its loss's gradient is propagated into the adapters.
func (e *Engine) trainStep(ctx context.Context) (err error) {
	step := e.step + 1
	// A step that fails or is interrupted before its update gives its prompts back, so that a
	// checkpoint saved afterwards resumes exactly where the last complete step ended.
	cursor := e.cursor
	defer func() {
		if err != nil && e.step < step {
			e.cursor = cursor
		}
	}()
	t0 := time.Now()
	rng := e.stepRNG(step, 0)
	dropout := e.stepRNG(step, 2)
	for _, a := range e.modules {
		a.rng = dropout
	}
	ga := max(1, e.cfg.GradientAccumulationSteps)
	var batches []*batch
	rewardMetrics := map[string]float64{}
	var allRewards []float64
	zeroStd := 0.0
	totalTokens := 0
	for mb := 0; mb < ga; mb++ {
		b, err := e.generate(ctx, e.nextPrompts(e.cfg.PerDeviceTrainBatchSize), rng.Uint64())
		if err != nil {
			return err
		}
		if err := e.score(b); err != nil {
			return err
		}
		m, err := e.reward(b)
		if err != nil {
			return err
		}
		for k, v := range m {
			rewardMetrics[k] += v / float64(ga)
		}
		rs := make([]float64, len(b.rollouts))
		for i, r := range b.rollouts {
			rs[i] = r.reward
		}
		adv, frac, err := grpo.Advantages(rs, e.cfg.NumGenerations, e.cfg.ScaleRewards)
		if err != nil {
			return err
		}
		for i, r := range b.rollouts {
			r.adv = adv[i]
		}
		allRewards = append(allRewards, rs...)
		zeroStd += frac / float64(ga)
		totalTokens += b.tokens
		batches = append(batches, b)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	rolloutSec := time.Since(t0).Seconds()

	e.adapters.ZeroGrad()
	params := lossParams(e.cfg)
	for _, b := range batches {
		for _, r := range b.rollouts {
			if !params.Masked(r.cut) {
				params.Tokens += len(r.tokens)
			}
		}
	}
	var loss float64
	var lossStats grpo.Stats
	tape := e.tape()
	for _, b := range batches {
		seqs := make([][]int, len(b.rollouts))
		first := make([]int, len(b.rollouts))
		for i, r := range b.rollouts {
			seqs[i] = append(append(make([]int, 0, len(r.prompt)+len(r.tokens)), r.prompt...), r.tokens...)
			first[i] = len(r.prompt) // the LM head runs on completion positions only
		}
		e.model.AdaptersOff = false
		if err := e.model.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: float32(e.cfg.Temperature), Entropy: true, FirstScored: first}); err != nil {
			return err
		}
		gs := make([]grpo.Sequence, len(b.rollouts))
		for i, r := range b.rollouts {
			p := len(r.prompt)
			lp, ent := make([]float64, len(r.tokens)), make([]float64, len(r.tokens))
			for k := range r.tokens {
				lp[k], ent[k] = float64(tape.LogProbs[i][p+k]), float64(tape.Entropy[i][p+k])
			}
			gs[i] = grpo.Sequence{LogP: lp, RefLogP: r.refLogP, Entropy: ent, Advantage: r.adv, Truncated: r.cut}
		}
		res, err := grpo.Loss(gs, params)
		if err != nil {
			return err
		}
		// Token-mean losses of each micro-batch average over the accumulation (as the
		// Trainer divides by gradient_accumulation_steps); dapo is already normalised by
		// the tokens of the whole accumulated batch.
		scale := 1.0
		if !grpo.GlobalTokens(e.cfg.LossType) {
			scale = 1 / float64(ga)
		}
		loss += res.Loss * scale
		lossStats.Add(res.Stats)
		dlogp := make([][]float32, len(seqs))
		for i, r := range b.rollouts {
			d := make([]float32, len(seqs[i]))
			p := len(r.prompt)
			for k, g := range res.Grad[i] {
				d[p+k] = float32(g * scale)
			}
			dlogp[i] = d
		}
		if err := e.model.Backward(tape, dlogp, nil); err != nil {
			return err
		}
	}

	gradNorm := optim.ClipGradNorm(e.params, e.cfg.MaxGradNorm)
	lr := e.cfg.LearningRate * e.sched.Factor(e.step)
	finite := !math.IsNaN(loss) && !math.IsInf(loss, 0) && !math.IsNaN(gradNorm) && !math.IsInf(gradNorm, 0)
	if finite {
		e.opt.Update(lr)
		e.badSteps = 0
	} else {
		e.badSteps++
	}
	e.step = step
	stepSec := time.Since(t0).Seconds()

	metrics := events.Metrics{
		"loss": loss, "grad_norm": gradNorm, "learning_rate": lr,
		"frac_reward_zero_std": zeroStd,
		"perf/step_seconds":    stepSec, "perf/rollout_seconds": rolloutSec,
	}
	for k, v := range lossStats.Metrics() {
		metrics[k] = v
	}
	mean, std := stats.MeanStd(allRewards)
	metrics["reward"], metrics["reward_std"] = mean, std
	for k, v := range rewardMetrics {
		metrics[k] = v
	}
	var lengths, cut, all float64
	n := 0
	for _, b := range batches {
		for _, r := range b.rollouts {
			lengths += float64(len(r.tokens))
			if r.cut {
				cut++
			}
			n++
		}
		all += float64(b.all)
	}
	metrics["completions/mean_length"] = lengths / float64(n)
	metrics["completions/clipped_ratio"] = cut / float64(n)
	res := e.sampler.Sample(time.Now(), int64(totalTokens))
	for k, v := range res.Metrics() {
		metrics[k] = v
	}
	// Throughput counts every token the step processed (prompts and completions, each through
	// generation or prefill, the scorer and the policy's training pass) per second of the step.
	metrics["perf/tokens_per_second"] = all / stepSec
	e.lastStep = metrics

	e.emit(events.Event{Type: events.Step, Step: step, Metrics: metrics})
	if e.tb != nil {
		if err := e.tb.Scalars(int64(step), time.Now(), metrics); err != nil {
			e.logf("writing TensorBoard events: %v", err)
		}
	}
	samples := e.samplesOf(batches[0])
	if e.cfg.LoggingSteps <= 1 || step%e.cfg.LoggingSteps == 0 || step == 1 {
		e.emit(events.Event{Type: events.Samples, Step: step, Samples: samples})
	}
	for _, ev := range e.mon.Observe(step, metrics) {
		e.emit(ev)
	}
	for _, ev := range e.mon.ObserveSamples(step, samples) {
		e.emit(ev)
	}
	if !finite {
		e.emit(events.Event{Type: events.Anomaly, Step: step, Rule: "non_finite_update", Metric: "loss", Severity: events.Critical,
			Message: fmt.Sprintf("non-finite loss or gradient (loss %v, grad norm %v): update skipped (%d in a row; %d stop the run)", loss, gradNorm, e.badSteps, maxBadSteps)})
		if e.badSteps >= maxBadSteps {
			return errNonFiniteStop
		}
	}
	return nil
}

// lossParams are the loss settings of the configuration (Tokens left to the step).
func lossParams(c *config.Config) grpo.Params {
	return grpo.Params{Beta: c.Beta, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, LossType: c.LossType,
		ImportanceSamplingLevel: c.ImportanceSamplingLevel, MaskTruncatedCompletions: c.MaskTruncatedCompletions,
		TopEntropyQuantile: c.TopEntropyQuantile, SAPOTemperaturePos: c.SAPOTemperaturePos, SAPOTemperatureNeg: c.SAPOTemperatureNeg,
		VESPOKPos: c.VESPOKPos, VESPOLambdaPos: c.VESPOLambdaPos, VESPOKNeg: c.VESPOKNeg, VESPOLambdaNeg: c.VESPOLambdaNeg,
		MaxCompletionLength: c.MaxCompletionLength}
}

// tape returns the policy's training tape, made once and reused.
func (e *Engine) tape() *model.Tape {
	if e.trainTape == nil {
		e.trainTape = e.model.NewTape()
	}
	return e.trainTape
}

// samplesOf gives the first prompt's completions with their rewards, for the samples event.
func (e *Engine) samplesOf(b *batch) []events.Sample {
	g := e.cfg.NumGenerations
	out := make([]events.Sample, 0, g)
	for _, r := range b.rollouts[:min(g, len(b.rollouts))] {
		rw := events.Metrics{}
		for k, v := range r.byFunc {
			if !math.IsNaN(v) {
				rw[k] = v
			}
		}
		out = append(out, events.Sample{Prompt: r.promptTx, Completion: r.text, Answer: r.example.Answer,
			Reward: r.reward, Rewards: rw, Advantage: r.adv})
	}
	return out
}
