package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/rewards"
)

// A generation batch still being served is saved with the checkpoint (checkpoint.Generation)
// and read back on resume, so that the resumed run trains on the completions the
// uninterrupted one would have: they were sampled by a policy that no longer exists.

// savedGeneration is generation.json.
type savedGeneration struct {
	// The settings that shape a generation batch: a resume with others draws a new one.
	StepsPerGeneration int `json:"steps_per_generation"`
	NumIterations      int `json:"num_iterations"`
	Prompts            int `json:"per_device_train_batch_size"`
	NumGenerations     int `json:"num_generations"`

	Used    int          `json:"used"`
	Old     bool         `json:"old"`
	Tokens  int          `json:"tokens"`
	Batches []savedBatch `json:"batches"`
}

type savedBatch struct {
	Tokens        int            `json:"tokens"`
	All           int            `json:"all"`
	Seconds       float64        `json:"seconds"`
	RewardMetrics events.Metrics `json:"reward_metrics"`
	ZeroStd       float64        `json:"zero_std"`
	Rollouts      []savedRollout `json:"rollouts"`
}

type savedRollout struct {
	Answer     string         `json:"answer,omitempty"`
	Prompt     []int          `json:"prompt"`
	Tokens     []int          `json:"tokens"`
	Cut        bool           `json:"cut"`
	Text       string         `json:"text"`
	PromptText string         `json:"prompt_text"`
	RefLogP    floats         `json:"ref_logp"`
	OldLogP    floats         `json:"old_logp,omitempty"`
	Reward     float64        `json:"reward"`
	ByFunc     events.Metrics `json:"by_func"`
	Advantage  float64        `json:"advantage"`
	// AnswerDigits: NTL as a loss, [completion token index, target] pairs.
	AnswerDigits [][2]int `json:"answer_digits,omitempty"`
	// Mask: which tokens the model wrote, in a multi-turn episode.
	Mask []bool `json:"mask,omitempty"`
}

// floats is a []float64 in JSON with non-finite values as strings, as events.Metrics has them.
type floats []float64

func (f floats) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	for i, v := range f {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case math.IsNaN(v):
			b = append(b, `"NaN"`...)
		case math.IsInf(v, 1):
			b = append(b, `"+Inf"`...)
		case math.IsInf(v, -1):
			b = append(b, `"-Inf"`...)
		default:
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
		}
	}
	return append(b, ']'), nil
}

func (f *floats) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(floats, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err == nil {
			continue
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("%s is not a number", r)
		}
		switch s {
		case "NaN":
			out[i] = math.NaN()
		case "+Inf":
			out[i] = math.Inf(1)
		case "-Inf":
			out[i] = math.Inf(-1)
		default:
			return fmt.Errorf("%q is not a number", s)
		}
	}
	*f = out
	return nil
}

// servingGeneration reports whether the next micro-step trains on the current generation
// batch rather than drawing a new one: the batch must then be kept with a checkpoint.
func (e *Engine) servingGeneration() bool { return e.gen != nil && e.gen.used < e.uses() }

// marshalGeneration is generation.json for the batch being served, nil when none is.
func (e *Engine) marshalGeneration() ([]byte, error) {
	if !e.servingGeneration() {
		return nil, nil
	}
	g := e.gen
	s := savedGeneration{StepsPerGeneration: e.cfg.GenerationSteps(), NumIterations: e.cfg.NumIterations,
		Prompts: e.cfg.PerDeviceTrainBatchSize, NumGenerations: e.cfg.NumGenerations,
		Used: g.used, Old: g.old, Tokens: g.tokens}
	for _, b := range g.batches {
		sb := savedBatch{Tokens: b.tokens, All: b.all, Seconds: b.seconds, RewardMetrics: b.rewardMetrics, ZeroStd: b.zeroStd}
		for _, r := range b.rollouts {
			sr := savedRollout{Answer: r.example.Answer, Prompt: r.prompt, Tokens: r.tokens, Cut: r.cut,
				Text: r.text, PromptText: r.promptTx, RefLogP: r.refLogP, OldLogP: r.oldLogP, Reward: r.reward,
				ByFunc: r.byFunc, Advantage: r.adv, Mask: r.mask}
			for _, d := range r.answerDigits {
				sr.AnswerDigits = append(sr.AnswerDigits, [2]int{d.Pos, d.Target})
			}
			sb.Rollouts = append(sb.Rollouts, sr)
		}
		s.Batches = append(s.Batches, sb)
	}
	return json.Marshal(s)
}

// restoreGeneration makes the batch of a checkpoint's generation.json the one being served.
// One saved under other batch settings is dropped with a note (the next step draws anew).
func (e *Engine) restoreGeneration(path string, b []byte) error {
	if b == nil {
		return nil
	}
	var s savedGeneration
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if s.StepsPerGeneration != e.cfg.GenerationSteps() || s.NumIterations != e.cfg.NumIterations ||
		s.Prompts != e.cfg.PerDeviceTrainBatchSize || s.NumGenerations != e.cfg.NumGenerations {
		e.logf("%s: the generation batch in use was drawn with other batch settings; the next step draws a new one", path)
		return nil
	}
	if len(s.Batches) != s.StepsPerGeneration || s.Used < 0 || s.Used >= e.uses() {
		return fmt.Errorf("%s: %d micro-batches, %d used: not a generation batch of steps_per_generation %d, num_iterations %d",
			path, len(s.Batches), s.Used, s.StepsPerGeneration, s.NumIterations)
	}
	g := &generation{used: s.Used, old: s.Old, tokens: s.Tokens}
	for i, sb := range s.Batches {
		if len(sb.Rollouts) != s.Prompts*s.NumGenerations {
			return fmt.Errorf("%s: micro-batch %d holds %d completions, not %d", path, i, len(sb.Rollouts), s.Prompts*s.NumGenerations)
		}
		b := &batch{tokens: sb.Tokens, all: sb.All, seconds: sb.Seconds, rewardMetrics: sb.RewardMetrics, zeroStd: sb.ZeroStd, gen: g}
		for j, r := range sb.Rollouts {
			if len(r.RefLogP) != len(r.Tokens) || (r.OldLogP != nil && len(r.OldLogP) != len(r.Tokens)) || (s.Old && r.OldLogP == nil) {
				return fmt.Errorf("%s: micro-batch %d, completion %d: log-probs do not match its %d tokens", path, i, j, len(r.Tokens))
			}
			ro := &rollout{example: data.Example{Prompt: r.PromptText, Answer: r.Answer}, prompt: r.Prompt, tokens: r.Tokens, cut: r.Cut,
				text: r.Text, promptTx: r.PromptText, refLogP: r.RefLogP, oldLogP: r.OldLogP, reward: r.Reward,
				byFunc: r.ByFunc, adv: r.Advantage}
			if r.Mask != nil && len(r.Mask) == len(r.Tokens) {
				ro.mask = r.Mask
			}
			for _, d := range r.AnswerDigits {
				if d[0] < 0 || d[0] >= len(r.Tokens) || d[1] < 0 || d[1] > 9 {
					return fmt.Errorf("%s: micro-batch %d, completion %d: answer digit %v outside its %d tokens", path, i, j, d, len(r.Tokens))
				}
				ro.answerDigits = append(ro.answerDigits, rewards.AnswerDigit{Pos: d[0], Target: d[1]})
			}
			b.rollouts = append(b.rollouts, ro)
			b.rewards = append(b.rewards, r.Reward)
		}
		g.batches = append(g.batches, b)
	}
	e.gen = g
	return nil
}
