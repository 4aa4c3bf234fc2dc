package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/lora"
	"rlhfstation/rewards"
)

// snapshotLoRA copies the adapters' weights.
func snapshotLoRA(set *lora.Set) map[string]refLoRA {
	out := map[string]refLoRA{}
	for _, l := range set.Layers {
		out[l.Module] = refLoRA{R: l.R, In: l.In, Out: l.Out, Scale: l.Scale,
			A: append([]float32(nil), l.A.F32()...), B: append([]float32(nil), l.B.F32()...)}
	}
	return out
}

// offPolicyStep is one trainStep of an engine run with its reference case.
type offPolicyStep struct {
	name    string
	got     stepResult
	ref     refModel
	sc      stepCase
	metrics events.Metrics
	drew    bool // the step drew a new generation batch
}

// runOffPolicySteps runs steps trainSteps of an engine made for c (rewards replaced by
// nllReward) and returns each with the reference case of what it trained on: the generation
// batch's micro-batches (those not served in the step marked skip), the adapters before the
// step as the policy, and the adapters that sampled the batch as logp_old's when the engine
// kept it. Every step must train on micro-batches of one generation batch, each once.
func runOffPolicySteps(t *testing.T, name string, c *config.Config, steps int, prep func(e *Engine)) []offPolicyStep {
	t.Helper()
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, c.Preset)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	e.funcs = []rewards.Weighted{{Func: nllReward{}, Weight: 1}}
	if prep != nil {
		prep(e)
	}
	var out []offPolicyStep
	var sampler map[string]refLoRA // the adapters that drew the generation batch in use
	for s := 1; s <= steps; s++ {
		before := snapshotLoRA(e.adapters)
		prev, usedBefore := e.gen, 0
		if prev != nil {
			usedBefore = prev.used
		}
		if err := e.trainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
		pendingEvents(e)
		g := e.gen
		drew := g != prev
		if drew {
			sampler, usedBefore = before, 0
		}
		spg := len(g.batches)
		served := map[int]bool{}
		for k := usedBefore; k < g.used; k++ {
			if served[k%spg] {
				t.Fatalf("%s step %d serves micro-batch %d twice: the reference cannot express it", name, s, k%spg)
			}
			served[k%spg] = true
		}
		sc := stepCase{Model: fmt.Sprintf("%s-step%d", name, s), Temperature: c.Temperature, LossType: c.LossType,
			ScaleRewards: c.ScaleRewards, Beta: c.Beta, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh,
			MaxCompletionLength: c.MaxCompletionLength, NumGenerations: c.NumGenerations,
			ImportanceSamplingLevel: c.ImportanceSamplingLevel, MaskTruncatedCompletions: c.MaskTruncatedCompletions,
			TopEntropyQuantile: c.TopEntropyQuantile, SAPOTemperaturePos: c.SAPOTemperaturePos, SAPOTemperatureNeg: c.SAPOTemperatureNeg,
			VESPOKPos: c.VESPOKPos, VESPOLambdaPos: c.VESPOLambdaPos, VESPOKNeg: c.VESPOKNeg, VESPOLambdaNeg: c.VESPOLambdaNeg}
		if g.old {
			sc.OldLoRA = sampler
		}
		if lw := e.ntlLossWeight(); lw > 0 {
			sc.NTL = &refNTL{LossWeight: lw, Loss: string(e.preset.NTL.Loss), DigitIDs: e.digits.IDs, DigitValues: e.digits.Digits}
		}
		for k, b := range g.batches {
			var m microBatch
			for _, r := range b.rollouts {
				m.Prompts = append(m.Prompts, r.prompt)
				m.Completions = append(m.Completions, r.tokens)
				m.Rewards = append(m.Rewards, r.reward)
				m.Truncated = append(m.Truncated, r.cut)
				var pos [][2]int
				for _, d := range r.answerDigits {
					pos = append(pos, [2]int{d.Pos, d.Target})
				}
				m.NTLPositions = append(m.NTLPositions, pos)
			}
			m.Skip = !served[k]
			sc.MicroBatches = append(sc.MicroBatches, m)
		}
		out = append(out, offPolicyStep{name: sc.Model, got: stepResult{Loss: e.lastStep["loss"], Grads: layerGrads(e.adapters)},
			ref: refModel{Dir: tinyModelDir(t), LoRA: before}, sc: sc, metrics: e.lastStep, drew: drew})
	}
	return out
}

// TestOffPolicyStepsMatchTorch runs the engine's trainStep with num_iterations > 1 and
// steps_per_generation ≠ gradient_accumulation_steps and checks each step's loss and LoRA
// gradients against PyTorch, logp_old being the log-probs under the adapters that sampled
// the batch: GSPO and token level, dapo's normalisation over the generation batch, grpo's
// average over the micro-batches trained on, a batch-wide reward std.
func TestOffPolicyStepsMatchTorch(t *testing.T) {
	type setup struct {
		loss, level, scale  string
		iters, spg, ga      int
		beta, temp, epsilon float64
	}
	var all []offPolicyStep
	for i, s := range []setup{
		{grpo.LossDAPO, grpo.LevelToken, grpo.ScaleGroup, 2, 0, 1, 0.04, 0.9, 0.05},
		{grpo.LossGRPO, grpo.LevelSequence, grpo.ScaleBatch, 2, 2, 2, 0, 1, 3e-4},
		{grpo.LossDAPO, grpo.LevelSequence, grpo.ScaleGroup, 1, 2, 1, 0.04, 1, 0.05},
		{grpo.LossBNPO, grpo.LevelToken, grpo.ScaleBatch, 2, 2, 1, 0, 1.2, 0.1},
	} {
		c := tinyConfig(t, "story", 10)
		c.Quant.Type = "none"
		c.LoRA.InitLoRAWeights = false // random B: dA ≠ 0 and policy ≠ reference
		c.MaxGradNorm = 0              // the raw gradients stay in the adapters
		c.LearningRate = 2e-2          // updates large enough that the ratios leave the clip range
		c.LossType, c.ImportanceSamplingLevel, c.ScaleRewards = s.loss, s.level, s.scale
		c.NumIterations, c.StepsPerGeneration, c.GradientAccumulationSteps = s.iters, s.spg, s.ga
		c.Beta, c.Temperature, c.Epsilon, c.EpsilonHigh = s.beta, s.temp, s.epsilon, s.epsilon*4/3
		c.RunName = fmt.Sprintf("run%d", i)
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%s-%s-%s-mu%d-spg%d-ga%d", s.loss, s.level, s.scale, s.iters, c.GenerationSteps(), s.ga)
		steps := runOffPolicySteps(t, name, c, 3, nil)
		// Which steps draw and which reuse follows TRL: every steps_per_generation ×
		// num_iterations micro-steps.
		uses := c.GenerationSteps() * s.iters
		for k, st := range steps {
			if want := (k*s.ga)%uses == 0 || uses < s.ga; st.drew != want {
				t.Errorf("%s: step %d drew a batch: %v, want %v", st.name, k+1, st.drew, want)
			}
		}
		all = append(all, steps...)
	}
	models := map[string]refModel{}
	var cases []stepCase
	for _, st := range all {
		models[st.sc.Model] = st.ref
		cases = append(cases, st.sc)
	}
	want := runStepReference(t, models, cases)
	offPolicy := 0
	for i, st := range all {
		if st.sc.OldLoRA != nil && !st.drew {
			offPolicy++
		}
		if err, where := stepError(st.got, want[i]); !(err <= stepTol) {
			t.Errorf("%s: trainStep's %s differs from PyTorch by %.3g relative (tolerance %g): loss %.9g, torch %.9g",
				st.name, where, err, stepTol, st.got.Loss, want[i].Loss)
		} else {
			t.Logf("%s: worst relative error %.3g (%s); loss %.6g; clip region %.3g", st.name, err, where, st.got.Loss,
				st.metrics["clip_ratio/region_mean"])
		}
	}
	if offPolicy < 4 {
		t.Errorf("only %d steps trained on a batch sampled before an update", offPolicy)
	}
}

// With num_iterations = 2 each generation batch is trained on twice: the first pass is the
// on-policy step (every weight 1, nothing clipped), the second sees the policy one update
// later through logp_old, and clips. num_tokens counts the sampled tokens once per draw.
func TestNumIterationsClipsAfterFirstPass(t *testing.T) {
	c := tinyConfig(t, "story", 6)
	c.NumIterations = 2
	c.LearningRate = 2e-2
	c.Epsilon, c.EpsilonHigh = 0.05, 0.05
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	evs, _, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	m := stepMetrics(evs)
	if len(m) != 6 {
		t.Fatalf("%d steps", len(m))
	}
	for s := 1; s <= 6; s++ {
		region, low, high := m[s]["clip_ratio/region_mean"], m[s]["clip_ratio/low_mean"], m[s]["clip_ratio/high_mean"]
		t.Logf("step %d: clip region %.4f low %.4f (min %.4f) high %.4f (max %.4f), reward %.4f, num_tokens %v",
			s, region, low, m[s]["clip_ratio/low_min"], high, m[s]["clip_ratio/high_max"], m[s]["reward"], m[s]["num_tokens"])
		if s%2 == 1 { // a fresh batch: on-policy
			if region != 0 || low != 0 || high != 0 {
				t.Errorf("step %d trains on a fresh batch but clips (region %v, low %v, high %v)", s, region, low, high)
			}
			continue
		}
		// The second pass over the batch of step s−1: the same completions and rewards.
		if m[s]["reward"] != m[s-1]["reward"] || m[s]["completions/mean_length"] != m[s-1]["completions/mean_length"] {
			t.Errorf("step %d reward %v, length %v: not the batch of step %d (%v, %v)", s, m[s]["reward"],
				m[s]["completions/mean_length"], s-1, m[s-1]["reward"], m[s-1]["completions/mean_length"])
		}
		if !(region > 0) || region != low+high || !(m[s]["clip_ratio/high_max"] >= high) {
			t.Errorf("step %d: clip region %v (low %v + high %v, high_max %v): want clipping after an update", s, region, low, high, m[s]["clip_ratio/high_max"])
		}
		if m[s]["num_tokens"] != m[s-1]["num_tokens"] {
			t.Errorf("num_tokens %v at step %d, %v at step %d: a reused batch samples nothing", m[s]["num_tokens"], s, m[s-1]["num_tokens"], s-1)
		}
	}
	if !(m[3]["num_tokens"] > m[1]["num_tokens"] && m[1]["num_tokens"] > 0) {
		t.Errorf("num_tokens %v, %v at steps 1 and 3: want it growing", m[1]["num_tokens"], m[3]["num_tokens"])
	}
}

// A run with num_iterations = 2 that ends at step 3 (its last checkpoint taken in the
// middle of a generation batch, which it keeps) and is resumed to step 6 gives the metrics
// and weights of the run that went to step 6 at once (a constant learning rate, so that the
// shorter run's schedule is the same).
func TestResumeMidGenerationIsExact(t *testing.T) {
	cfg := func(steps int) *config.Config {
		c := tinyConfig(t, "story", steps)
		c.NumIterations, c.StepsPerGeneration, c.GradientAccumulationSteps = 2, 2, 1
		c.SaveSteps, c.LRSchedulerType = 0, "constant"
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	evsA, eA, err := run(t, cfg(6), "", "story")
	if err != nil {
		t.Fatal(err)
	}
	half := cfg(3)
	_, eB, err := run(t, half, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(filepath.Join(eB.RunDir(), "checkpoints", "step-000003"))
	if err != nil {
		t.Fatal(err)
	}
	// Steps 1–4 serve one generation batch (2 micro-batches × 2 passes), 5–8 the next.
	if ck.Generation == nil {
		t.Fatal("the checkpoint of step 3, inside a generation batch, does not keep it")
	}
	more := cfg(6)
	more.OutputDir = half.OutputDir
	evsB, _, err := run(t, more, eB.RunDir(), "story")
	if err != nil {
		t.Fatal(err)
	}
	a, b := stepMetrics(evsA), stepMetrics(evsB)
	if len(b) != 3 {
		t.Fatalf("the resumed run made %d steps, want 3", len(b))
	}
	for s := 4; s <= 6; s++ {
		if !reflect.DeepEqual(a[s], b[s]) {
			t.Errorf("step %d differs after resume:\nstraight %v\nresumed  %v", s, a[s], b[s])
		}
	}
	ca, err := checkpoint.Load(filepath.Join(eA.RunDir(), "checkpoints", "step-000006"))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := checkpoint.Load(filepath.Join(eB.RunDir(), "checkpoints", "step-000006"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ca.Tensors, cb.Tensors) || !reflect.DeepEqual(ca.Optimizer.ExpAvgSq, cb.Optimizer.ExpAvgSq) {
		t.Error("adapter or optimizer state differs after resume")
	}
}

// A step interrupted while drawing a new generation batch gives back its prompts, its
// tokens and the batch it was serving, as they were before it.
func TestInterruptedDrawGivesTheBatchBack(t *testing.T) {
	c := tinyConfig(t, "story", 4)
	c.NumIterations = 2
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	for s := 0; s < 2; s++ { // draw, then reuse
		if err := e.trainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
		pendingEvents(e)
	}
	gen, used, cursor, seen := e.gen, e.gen.used, e.cursor, e.tokensSeen
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.trainStep(ctx); err == nil {
		t.Fatal("a step with a cancelled context drew a batch")
	}
	if e.gen != gen || e.gen.used != used || e.cursor != cursor || e.tokensSeen != seen || e.step != 2 {
		t.Errorf("after the interrupted step: batch kept %v, used %d (was %d), cursor %d (was %d), tokens %d (was %d), step %d",
			e.gen == gen, e.gen.used, used, e.cursor, cursor, e.tokensSeen, seen, e.step)
	}
}

// NTL as an auxiliary loss ([ntl] loss_weight): the engine's loss and LoRA gradients with
// λ·NTL at the aligned answer digits added, against PyTorch autograd through the softmax over
// the digit tokens; mse and wasserstein, on- and off-policy, with truncated completions
// masked. The comparison must reject the same steps without the term.
func TestNTLLossMatchesTorch(t *testing.T) {
	type setup struct {
		loss                string
		lambda              float64
		iters, ga           int
		mask                bool
		lossType, scaleAdv  string
		maxCompletionLength int
	}
	var all []offPolicyStep
	for i, s := range []setup{
		{"wasserstein", 0.5, 1, 2, false, grpo.LossDAPO, grpo.ScaleGroup, 12},
		{"mse", 0.05, 2, 1, true, grpo.LossGRPO, grpo.ScaleBatch, 160}, // long enough that some stop
	} {
		c := tinyConfig(t, "math", 10)
		c.Quant.Type = "none"
		c.LoRA.InitLoRAWeights = false
		c.MaxGradNorm = 0
		c.LearningRate = 1e-2
		c.LossType, c.ScaleRewards, c.Beta = s.lossType, s.scaleAdv, 0.04
		c.NumIterations, c.GradientAccumulationSteps = s.iters, s.ga
		c.MaskTruncatedCompletions, c.MaxCompletionLength = s.mask, s.maxCompletionLength
		c.RunName = fmt.Sprintf("ntl%d", i)
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("ntl-%s-lambda%g-mu%d-ga%d-mask%v", s.loss, s.lambda, s.iters, s.ga, s.mask)
		steps := runOffPolicySteps(t, name, c, 2, func(e *Engine) {
			e.preset.NTL.LossWeight, e.preset.NTL.Loss = s.lambda, rewards.NTLLoss(s.loss)
		})
		positions := 0.0
		for _, st := range steps {
			positions += st.metrics["ntl/aux_positions"]
			t.Logf("%s: ntl/aux_loss %.4g over %v positions", st.name, st.metrics["ntl/aux_loss"], st.metrics["ntl/aux_positions"])
		}
		if positions == 0 {
			t.Fatalf("%s: no answer digit to train: the test needs some", name)
		}
		all = append(all, steps...)
	}
	models := map[string]refModel{}
	var cases []stepCase
	for _, st := range all {
		models[st.sc.Model] = st.ref
		cases = append(cases, st.sc)
	}
	// Negative control: the first step with aligned digits, without the NTL term in PyTorch.
	control := -1
	for i, st := range all {
		if control < 0 && st.metrics["ntl/aux_positions"] > 0 {
			control = i
			c := st.sc
			c.NTL = nil
			cases = append(cases, c)
		}
	}
	want := runStepReference(t, models, cases)
	for i, st := range all {
		if err, where := stepError(st.got, want[i]); !(err <= stepTol) {
			t.Errorf("%s: trainStep's %s differs from PyTorch by %.3g relative (tolerance %g): loss %.9g, torch %.9g",
				st.name, where, err, stepTol, st.got.Loss, want[i].Loss)
		} else {
			t.Logf("%s: worst relative error %.3g (%s); loss %.6g", st.name, err, where, st.got.Loss)
		}
	}
	if err, where := stepError(all[control].got, want[len(all)]); err <= 100*stepTol {
		t.Errorf("%s without the NTL term in PyTorch: error %.3g at %s, want a mismatch", all[control].name, err, where)
	}
}
