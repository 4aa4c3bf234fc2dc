package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/rewards"
)

// setupEval picks the prompts evaluation during training runs on (eval_steps, TRL's
// eval_strategy "steps"): [eval] data, else a held-out share of the training prompts, else
// built-in prompts of another seed than the training ones.
func (e *Engine) setupEval() error {
	on, every := e.cfg.Evaluates()
	if !on {
		return nil
	}
	ev := e.cfg.Eval
	var out []data.Example
	switch {
	case ev.Data != "":
		ex, _, err := data.Read(ev.Data)
		if err != nil {
			return &ConfigError{fmt.Errorf("[eval] data: %w", err)}
		}
		for _, x := range ex {
			if x.Prompt != "" || Conversational(x) {
				out = append(out, x)
			}
		}
		if len(out) == 0 {
			return fmt.Errorf("[eval] data %s: no prompts", ev.Data)
		}
		if err := e.applyChatTemplate(out); err != nil {
			return err
		}
	case ev.Holdout > 0:
		n := int(math.Ceil(ev.Holdout * float64(len(e.prompts))))
		if n >= len(e.prompts) {
			return &ConfigError{fmt.Errorf("eval.holdout = %g leaves none of the %d training prompts to train on", ev.Holdout, len(e.prompts))}
		}
		// A fixed draw of the seed, so that a resumed run holds out the same prompts.
		perm := rand.New(rand.NewPCG(uint64(e.cfg.Seed), 0xe7a1)).Perm(len(e.prompts))
		held := map[int]bool{}
		for _, i := range perm[:n] {
			held[i] = true
			out = append(out, e.prompts[i])
		}
		var train []data.Example
		for i, x := range e.prompts {
			if !held[i] {
				train = append(train, x)
			}
		}
		e.prompts = train
	case e.cfg.Data.Path == "" && len(e.opts.Prompts) == 0:
		ps, err := builtinPrompts(e.preset.Root, e.cfg.Seed+1)
		if err != nil {
			return err
		}
		out = ps
	default:
		return &ConfigError{fmt.Errorf("eval_steps = %d: say what to evaluate on: [eval] data = FILE (--eval.data) or [eval] holdout = 0.1 (--eval.holdout)", every)}
	}
	if len(out) > ev.Prompts {
		out = out[:ev.Prompts]
	}
	e.evalPrompts = out
	e.logf("evaluating every %d steps on %d prompts", every, len(out))
	return nil
}

// evaluate adds the eval/* metrics to a step due for evaluation: the preset's rewards over
// num_generations sampled completions of each eval prompt (eval/reward,
// eval/rewards/<func>/mean…) and over the greedy one (eval/greedy/…), and, where the prompts
// have answers, the share answered correctly (eval/correct_sampled, eval/correct_greedy).
// The sampling seed is the same at every evaluation, so that the curve follows the policy,
// not the draws.
func (e *Engine) evaluate(ctx context.Context, step int, metrics events.Metrics) error {
	on, every := e.cfg.Evaluates()
	if !on || len(e.evalPrompts) == 0 || step%every != 0 {
		return nil
	}
	t0 := time.Now()
	seed := uint64(e.cfg.Seed)*0x9e3779b9 + 0xe7a1
	var extract rewards.Extraction
	if e.preset.Correctness != nil {
		extract = e.preset.Correctness.Extraction
	}
	answered := false
	for _, x := range e.evalPrompts {
		answered = answered || x.Answer != ""
	}
	for _, mode := range []struct {
		prefix string
		g      int
		t      float32
	}{{"eval/", e.cfg.NumGenerations, float32(e.cfg.Temperature)}, {"eval/greedy/", 1, 0}} {
		b, err := e.generateWith(ctx, e.evalPrompts, mode.g, mode.t, seed)
		if err != nil {
			return fmt.Errorf("evaluation: %w", err)
		}
		if err := e.score(b); err != nil {
			return fmt.Errorf("evaluation: %w", err)
		}
		m, err := e.reward(b)
		if err != nil {
			return fmt.Errorf("evaluation: %w", err)
		}
		for k, v := range m {
			if strings.HasPrefix(k, "rewards/") {
				metrics[mode.prefix+k] = v
			}
		}
		var total, correct, length float64
		for _, r := range b.rollouts {
			total += r.reward
			length += float64(len(r.tokens))
			if answered {
				correct += rewards.CorrectnessReward(r.text, r.example.Answer, extract)
			}
		}
		n := float64(len(b.rollouts))
		metrics[mode.prefix+"reward"] = total / n
		metrics[mode.prefix+"completions/mean_length"] = length / n
		if answered {
			name := "eval/correct_sampled"
			if mode.g == 1 {
				name = "eval/correct_greedy"
			}
			metrics[name] = correct / n
		}
	}
	metrics["eval/seconds"] = time.Since(t0).Seconds()
	return nil
}
