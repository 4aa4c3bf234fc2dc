package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/model"
	"rlhfstation/engine/monitor"
	"rlhfstation/engine/optim"
	"rlhfstation/internal/stats"
)

// maxBadSteps non-finite updates in a row stop the run.
const maxBadSteps = 3

var errNonFiniteStop = errors.New("3 non-finite updates in a row: the run stopped, its last good checkpoint kept")

// trainStep does one optimizer step of DESIGN §5 in its phases: rollout (generation, scoring,
// rewards and advantages of every micro-batch), loss and backward, the update, then metrics
// and their events.
func (e *Engine) trainStep(ctx context.Context) (err error) {
	step := e.step + 1
	// A step that fails or is interrupted before its update gives its prompts and its share
	// of the generation batch back, so that a checkpoint saved afterwards resumes exactly
	// where the last complete step ended.
	cursor, gen, seen := e.cursor, e.gen, e.tokensSeen
	used := 0
	if gen != nil {
		used = gen.used
	}
	defer func() {
		if err != nil && e.step < step {
			e.cursor, e.gen, e.tokensSeen = cursor, gen, seen
			if gen != nil {
				gen.used = used
			}
		}
	}()
	t0 := time.Now()
	dropout := e.stepRNG(step, 2)
	for _, a := range e.modules {
		a.rng = dropout
	}
	roll, err := e.rollout(ctx, step)
	if err != nil {
		return err
	}
	loss, lossStats, aux, err := e.lossAndBackward(roll.batches)
	if err != nil {
		return err
	}
	upd, err := e.update(loss)
	if err != nil {
		return err
	}
	e.step = step
	metrics := e.stepMetrics(roll, loss, lossStats, upd, time.Since(t0).Seconds())
	e.observeEntropy(lossStats, metrics)
	aux.metrics(metrics)
	if err := e.evaluate(ctx, step, metrics); err != nil {
		return err
	}
	return e.publishStep(step, metrics, roll.batches, upd)
}

// stepRollout is what a step's rollout phase gathered over its micro-batches.
type stepRollout struct {
	batches  []*batch           // the micro-batch of each micro-step
	distinct []*batch           // those micro-batches, each once: the step's rewards and completions
	rewards  []float64          // every completion's total reward
	metrics  map[string]float64 // the reward functions' metrics, averaged over micro-batches
	zeroStd  float64            // share of groups whose rewards do not vary
	tokens   int                // completion tokens
	seconds  float64            // sampling, scoring and rewarding (0 when reusing a batch)
}

// rollout takes the micro-batch of each of the step's gradient_accumulation_steps
// micro-steps from the generation batch being served, drawing a new one (generated, scored,
// rewarded, with group advantages: generation.go) when it is used up. A generation batch
// served again reports its rewards again.
func (e *Engine) rollout(ctx context.Context, step int) (*stepRollout, error) {
	rng := e.stepRNG(step, 0)
	ga := max(1, e.cfg.GradientAccumulationSteps)
	out := &stepRollout{metrics: map[string]float64{}}
	for k := 0; k < ga; k++ {
		b, drew, err := e.nextMicroBatch(ctx, rng)
		if err != nil {
			return nil, err
		}
		if drew {
			for _, d := range e.gen.batches {
				out.seconds += d.seconds
			}
		}
		if !slices.Contains(out.distinct, b) {
			out.distinct = append(out.distinct, b)
		}
		out.batches = append(out.batches, b)
	}
	n := float64(len(out.distinct))
	for _, b := range out.distinct {
		for k, v := range b.rewardMetrics {
			out.metrics[k] += v / n
		}
		out.rewards = append(out.rewards, b.rewards...)
		out.zeroStd += b.zeroStd / n
		out.tokens += b.tokens
	}
	return out, nil
}

// lossAndBackward runs each micro-batch through the policy with its tape (adapters on), takes
// the GRPO loss of its completions (importance weights against logp_old where the generation
// batch kept it), plus NTL as an auxiliary loss when it is one (ntlloss.go), and propagates
// its gradient into the adapters.
func (e *Engine) lossAndBackward(batches []*batch) (float64, grpo.Stats, ntlAux, error) {
	ga := len(batches)
	if err := e.adapters.ZeroGrad(); err != nil {
		return 0, grpo.Stats{}, ntlAux{}, err
	}
	var loss float64
	var lossStats grpo.Stats
	var aux ntlAux
	if e.ntlLossWeight() > 0 {
		aux.positions = e.ntlPositions(batches)
	}
	tape := e.tape()
	for _, b := range batches {
		params := lossParams(e.cfg)
		params.Tokens, params.EntropyCoef = b.gen.tokens, e.entropyCoef()
		seqs := make([][]int, len(b.rollouts))
		first := make([]int, len(b.rollouts))
		for i, r := range b.rollouts {
			seqs[i] = append(append(make([]int, 0, len(r.prompt)+len(r.tokens)), r.prompt...), r.tokens...)
			first[i] = len(r.prompt) // the LM head runs on completion positions only
		}
		opts := model.TrainOptions{Temperature: float32(e.cfg.Temperature), Entropy: true, FirstScored: first, Adapters: model.AdaptersOn}
		if aux.positions > 0 {
			opts.Digits = e.ntlQuery(b)
		}
		if err := e.model.ForwardTrain(tape, seqs, opts); err != nil {
			return 0, lossStats, aux, err
		}
		gs := make([]grpo.Sequence, len(b.rollouts))
		for i, r := range b.rollouts {
			p := len(r.prompt)
			lp, ent := make([]float64, len(r.tokens)), make([]float64, len(r.tokens))
			for k := range r.tokens {
				lp[k], ent[k] = float64(tape.LogProbs[i][p+k]), float64(tape.Entropy[i][p+k])
			}
			gs[i] = grpo.Sequence{LogP: lp, OldLogP: r.oldLogP, RefLogP: r.refLogP, Entropy: ent, Advantage: r.adv, Truncated: r.cut, Mask: r.mask}
		}
		res, err := grpo.Loss(gs, params)
		if err != nil {
			return 0, lossStats, aux, err
		}
		if aux.positions > 0 {
			share, err := e.ntlLoss(tape, b, aux.positions, &aux)
			if err != nil {
				return 0, lossStats, aux, err
			}
			loss += share
		}
		// Token-mean losses of each micro-batch average over the accumulation (as the
		// Trainer divides by gradient_accumulation_steps); dapo is already normalised by
		// the tokens of the whole generation batch.
		scale := 1.0
		if !grpo.GlobalTokens(e.cfg.LossType) {
			scale = 1 / float64(ga)
		}
		loss += res.Loss * scale
		lossStats.Add(res.Stats)
		lossStats.Bonus += res.Bonus * scale
		dlogp := make([][]float32, len(seqs))
		for i, r := range b.rollouts {
			d := make([]float32, len(seqs[i]))
			p := len(r.prompt)
			for k, g := range res.Grad[i] {
				d[p+k] = float32(g * scale)
			}
			dlogp[i] = d
		}
		tape.EntropyGrad = nil
		if res.EntropyGrad != nil { // the entropy bonus: its gradient flows through the head too
			tape.EntropyGrad = make([][]float32, len(seqs))
			for i, r := range b.rollouts {
				d := make([]float32, len(seqs[i]))
				for k, g := range res.EntropyGrad[i] {
					d[len(r.prompt)+k] = float32(g * scale)
				}
				tape.EntropyGrad[i] = d
			}
		}
		if err := e.model.Backward(tape, dlogp, nil); err != nil {
			return 0, lossStats, aux, err
		}
	}
	return loss, lossStats, aux, nil
}

// newEntropyBonus is TRL's adaptive entropy controller for use_adaptive_entropy (nil
// otherwise: a fixed entropy_coef needs none), starting from entropy_coef with no bonus on
// the first step.
func newEntropyBonus(c *config.Config) *grpo.AdaptiveEntropy {
	if !c.UseAdaptiveEntropy {
		return nil
	}
	return &grpo.AdaptiveEntropy{Coef: c.EntropyCoef, Target: c.EntropyTarget, Min: c.EntropyCoefMin, Max: c.EntropyCoefMax,
		Delta: c.EntropyCoefDelta, Last: math.Inf(1)}
}

// entropyCoef is the entropy bonus's coefficient in the coming step's loss.
func (e *Engine) entropyCoef() float64 {
	if e.entropy != nil {
		return e.entropy.Applied()
	}
	return e.cfg.EntropyCoef
}

// observeEntropy updates the adaptive controller with the step's mean entropy over the loss
// tokens the bonus covers, and logs the coefficient (after the update) as entropy_coef and
// the loss without the bonus as policy_loss, as TRL does whenever the bonus is on.
func (e *Engine) observeEntropy(st grpo.Stats, metrics events.Metrics) {
	if e.entropy == nil && e.cfg.EntropyCoef == 0 {
		return
	}
	metrics["policy_loss"] = metrics["loss"] + st.Bonus // the loss without the bonus (NTL's share stays in)
	if e.entropy != nil {
		e.entropy.Observe(st.KeptEntropyMean())
		metrics["entropy_coef"] = e.entropy.Coef
	} else {
		metrics["entropy_coef"] = e.cfg.EntropyCoef
	}
}

// stepUpdate is what the update phase did.
type stepUpdate struct {
	gradNorm, lr float64
	finite       bool // false: the update was skipped
}

// update clips the gradient norm and applies AdamW at the scheduled rate, unless the loss or
// the gradient is not finite (the update is then skipped and counted).
func (e *Engine) update(loss float64) (stepUpdate, error) {
	norm, err := optim.ClipGradNorm(e.model.Backend(), e.params, e.cfg.MaxGradNorm)
	if err != nil {
		return stepUpdate{}, err
	}
	u := stepUpdate{gradNorm: norm, lr: e.cfg.LearningRate * e.sched.Factor(e.step)}
	u.finite = !math.IsNaN(loss) && !math.IsInf(loss, 0) && !math.IsNaN(u.gradNorm) && !math.IsInf(u.gradNorm, 0)
	if u.finite {
		if err := e.opt.Update(u.lr); err != nil {
			return u, err
		}
		e.badSteps = 0
	} else {
		e.badSteps++
	}
	return u, nil
}

// stepMetrics are the step's logged metrics under DESIGN §15's names.
func (e *Engine) stepMetrics(roll *stepRollout, loss float64, lossStats grpo.Stats, upd stepUpdate, stepSec float64) events.Metrics {
	metrics := events.Metrics{
		"loss": loss, "grad_norm": upd.gradNorm, "learning_rate": upd.lr,
		"frac_reward_zero_std": roll.zeroStd,
		"perf/step_seconds":    stepSec, "perf/rollout_seconds": roll.seconds,
		// TRL's names: the step's wall time, and the prompt and completion tokens sampled
		// since the run began.
		"step_time": stepSec, "num_tokens": float64(e.tokensSeen),
	}
	for k, v := range lossStats.Metrics() {
		metrics[k] = v
	}
	// An episode an environment failed is not applicable (NaN): left out of the mean, as TRL's
	// nanmean leaves out rewards that do not apply.
	var applicable []float64
	for _, r := range roll.rewards {
		if !math.IsNaN(r) {
			applicable = append(applicable, r)
		}
	}
	mean, std := stats.MeanStd(applicable)
	metrics["reward"], metrics["reward_std"] = mean, std
	for k, v := range roll.metrics {
		metrics[k] = v
	}
	var lengths, cut, all float64
	n := 0
	for _, b := range roll.distinct {
		for _, r := range b.rollouts {
			lengths += float64(r.modelTokens())
			if r.cut {
				cut++
			}
			n++
		}
	}
	for _, b := range roll.batches {
		all += float64(b.all)
	}
	metrics["completions/mean_length"] = lengths / float64(n)
	metrics["completions/clipped_ratio"] = cut / float64(n)
	episodeMetrics(roll.distinct, metrics)
	res := e.sampler.Sample(time.Now(), int64(roll.tokens))
	res.GPUBytes, res.GPUPeakBytes = deviceBytes(e.dev), devicePeakBytes(e.dev)
	for k, v := range res.Metrics() {
		metrics[k] = v
	}
	// Throughput counts every token the step processed (prompts and completions, each through
	// generation or prefill, the scorer and the policy's training pass) per second of the step.
	metrics["perf/tokens_per_second"] = all / stepSec
	if len(applicable) == 0 && len(roll.rewards) > 0 {
		// Every episode failed (reported as environment anomalies): the reward and token
		// statistics have nothing to average, which is not a broken step.
		for k, v := range metrics {
			if math.IsNaN(v) {
				delete(metrics, k)
			}
		}
	}
	return metrics
}

// publishStep emits the step's metrics, samples and the monitor's anomalies, writes them to
// TensorBoard, and stops the run after maxBadSteps skipped updates in a row.
func (e *Engine) publishStep(step int, metrics events.Metrics, batches []*batch, upd stepUpdate) error {
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
	for _, ev := range append(e.mon.Observe(step, metrics), e.mon.ObserveSamples(step, samples)...) {
		e.emit(ev)
		if name := monitor.StopOn(e.stopOn, ev); name != "" && e.stopWhy == "" {
			e.stopWhy = monitor.StopReason(name, ev)
		}
	}
	if !upd.finite {
		e.emit(events.Event{Type: events.Anomaly, Step: step, Rule: "non_finite_update", Metric: "loss", Severity: events.Critical,
			Message: fmt.Sprintf("non-finite loss or gradient (loss %v, grad norm %v): update skipped (%d in a row; %d stop the run)", metrics["loss"], upd.gradNorm, e.badSteps, maxBadSteps)})
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
		MaxCompletionLength: c.MaxCompletionLength, Delta: c.Delta, OffPolicyMaskThreshold: c.OffPolicyMaskThreshold}
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
		s := events.Sample{Prompt: r.promptTx, Completion: r.text, Answer: r.example.Answer,
			Reward: r.reward, Rewards: rw, Advantage: r.adv, Turns: turnsOf(r)}
		if r.ep != nil && r.ep.failed != "" {
			s.Failed = r.ep.failed
			s.Reward = 0 // not applicable: NaN is not JSON
		}
		out = append(out, s)
	}
	return out
}
