package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/rewards"
)

// rollout is one completion of a prompt, with what the rewards and the loss need.
type rollout struct {
	example  data.Example
	prompt   []int // prompt token ids (BOS included when the tokenizer adds one)
	tokens   []int // completion token ids, the stop token included
	cut      bool  // ended by max_completion_length, not a stop token
	text     string
	spans    []rewards.Span // bytes of each text token in text
	textIDs  []int          // the completion tokens that carry text (special tokens left out)
	textPos  []int          // textPos[k]: index in tokens of textIDs[k]
	refLogP  []float64      // reference (adapters off) log-probs under the temperature
	oldLogP  []float64      // the sampling policy's, when kept (generation.old); else nil
	nll      []float64      // scorer NLL of each text token (temperature 1)
	digits   [][]float32    // the policy's digit distribution p(0…9), per completion position
	reward   float64
	byFunc   map[string]float64
	adv      float64
	promptTx string

	// answerDigits are the answer's digits NTL as a loss trains (Pos: index in tokens).
	answerDigits []rewards.AnswerDigit

	// Multi-turn episodes (episode.go): mask[k] tells whether tokens[k] is the model's (in the
	// loss) or the environment's or template's (masked out); nil for single-turn rollouts.
	mask         []bool
	ep           *episode
	resetReq     map[string]any
	done         bool
	toolFailures int
	envMetrics   map[string]float64
}

// batch is one micro-batch: some prompts, G completions each.
type batch struct {
	rollouts []*rollout
	tokens   int // completion tokens
	all      int // prompt + completion tokens

	gen           *generation        // the generation batch it belongs to
	rewards       []float64          // each rollout's reward
	rewardMetrics map[string]float64 // the reward functions' metrics over it
	zeroStd       float64            // share of its groups whose rewards all agree
	seconds       float64            // sampling, scoring and rewarding it took
}

// nextPrompts takes the next n prompts of the epoch order (a fresh shuffle, from the seed and
// the epoch, each time the data wraps).
func (e *Engine) nextPrompts(n int) []data.Example {
	out := make([]data.Example, n)
	for i := range out {
		epoch := e.cursor / len(e.prompts)
		if e.order == nil || e.orderOf != epoch {
			e.order = e.stepRNG(epoch, 7).Perm(len(e.prompts))
			e.orderOf = epoch
		}
		out[i] = e.prompts[e.order[e.cursor%len(e.prompts)]]
		e.cursor++
	}
	return out
}

// encodePrompt tokenizes a prompt as the model sees it (EncodePrompt), keeping its last
// max_prompt_length tokens (the BOS kept in front) and leaving room for the completion in the
// context.
func (e *Engine) encodePrompt(x data.Example) []int {
	ids := EncodePrompt(e.model, e.tok, x.Prompt, Conversational(x))
	limit := promptRoom(&e.model.Config, e.cfg)
	if limit > 0 && len(ids) > limit {
		bos := e.model.Config.BOS
		if bos >= 0 && len(ids) > 0 && ids[0] == bos {
			ids = append([]int{bos}, ids[len(ids)-limit+1:]...)
		} else {
			ids = ids[len(ids)-limit:]
		}
	}
	return ids
}

// generate samples G completions for each prompt with the policy (adapters on).
func (e *Engine) generate(ctx context.Context, prompts []data.Example, seed uint64) (*batch, error) {
	return e.generateWith(ctx, prompts, e.cfg.NumGenerations, float32(e.cfg.Temperature), seed)
}

// generateWith samples g completions for each prompt at temperature t (0: greedy).
func (e *Engine) generateWith(ctx context.Context, prompts []data.Example, g int, t float32, seed uint64) (*batch, error) {
	b := &batch{}
	var inputs [][]int
	for _, p := range prompts {
		ids := e.encodePrompt(p)
		for j := 0; j < g; j++ {
			b.rollouts = append(b.rollouts, &rollout{example: p, prompt: ids, promptTx: p.Prompt})
			inputs = append(inputs, ids)
		}
	}
	if len(e.envs) > 0 {
		if err := e.generateEpisodes(ctx, b, t, seed); err != nil {
			return nil, err
		}
		for _, r := range b.rollouts {
			e.textOf(r)
			b.tokens += r.modelTokens()
			b.all += len(r.prompt) + len(r.tokens)
		}
		return b, nil
	}
	o := model.GenerateOptions{MaxNewTokens: e.cfg.MaxCompletionLength, Temperature: t,
		TopK: e.cfg.TopK, TopP: float32(e.cfg.TopP), MinP: float32(e.cfg.MinP), RepetitionPenalty: float32(e.cfg.RepetitionPenalty),
		Seed: seed, Adapters: model.AdaptersOn}
	if e.digits != nil { // NTL's digit distributions, formed on the backend
		o.Digits = &model.DigitTokens{IDs: e.digits.IDs, Values: e.digits.Digits}
		o.OnDigits = func(seq, step int, probs []float32) {
			r := b.rollouts[seq]
			for len(r.digits) <= step {
				r.digits = append(r.digits, nil)
			}
			r.digits[step] = slices.Clone(probs)
		}
	}
	gen, err := e.model.Generate(inputs, o)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i, r := range b.rollouts {
		r.tokens, r.cut = gen.Tokens[i], gen.Cut[i]
		e.textOf(r)
		b.tokens += len(r.tokens)
		b.all += len(r.prompt) + len(r.tokens)
	}
	return b, nil
}

// textOf sets the completion's text from the tokens the model wrote (special tokens and the
// environment's tokens left out), with each text token's bytes and position.
func (e *Engine) textOf(r *rollout) {
	var text strings.Builder
	for k, id := range r.tokens {
		tb := e.tok.TokenBytes(id)
		if tb == nil || (r.mask != nil && !r.mask[k]) {
			continue // special tokens (the stop token) carry no text
		}
		r.spans = append(r.spans, rewards.Span{Start: text.Len(), End: text.Len() + len(tb)})
		text.Write(tb)
		r.textIDs = append(r.textIDs, id)
		r.textPos = append(r.textPos, k)
	}
	r.text = text.String()
}

// score runs the frozen base (adapters off) over prompt + completion: the reference log-probs
// under the sampling temperature for the KL term, and the NLL at temperature 1 for the
// perplexity rewards (the same pass when the temperature is 1).
func (e *Engine) score(b *batch) error {
	seqs := make([][]int, len(b.rollouts))
	for i, r := range b.rollouts {
		seqs[i] = append(append(make([]int, 0, len(r.prompt)+len(r.tokens)), r.prompt...), r.tokens...)
	}
	t := float32(e.cfg.Temperature)
	ref, err := e.model.LogProbs(seqs, t, model.AdaptersOff)
	if err != nil {
		return err
	}
	nll := ref
	if t != 1 && t != 0 {
		if nll, err = e.model.LogProbs(seqs, 1, model.AdaptersOff); err != nil {
			return err
		}
	}
	for i, r := range b.rollouts {
		p := len(r.prompt)
		r.refLogP = make([]float64, len(r.tokens))
		for k := range r.tokens {
			r.refLogP[k] = float64(ref[i][p+k])
		}
		r.nll = make([]float64, len(r.textIDs))
		for k, pos := range r.textPos {
			r.nll[k] = -float64(nll[i][p+pos])
		}
	}
	return nil
}

// reward scores every rollout with the preset's functions; trainStep turns the rewards into
// advantages (update.go).
func (e *Engine) reward(b *batch) (map[string]float64, error) {
	samples := make([]rewards.Sample, len(b.rollouts))
	for i, r := range b.rollouts {
		r := r
		s := rewards.Sample{Prompt: r.promptTx, Completion: r.text, Answer: r.example.Answer,
			IDs: r.textIDs, Spans: r.spans, NLL: r.nll,
			CompletionIDs: r.tokens, Columns: r.example.Extra, Step: e.step + 1}
		if r.digits != nil {
			s.DigitProbs = func(pos int) []float32 {
				k := r.textPos[pos]
				if k < len(r.digits) {
					return r.digits[k]
				}
				return nil
			}
		}
		samples[i] = s
	}
	// Scheduled rewards (NTL's tau) take their value for the step being made.
	res, err := rewards.Compose(rewards.AtProgress(e.funcs, rewards.Progress(e.step+1, e.cfg.MaxSteps)), samples)
	if err != nil {
		return nil, err
	}
	if len(e.envs) > 0 {
		e.envRewards(b, &res)
	}
	for i, r := range b.rollouts {
		r.reward = res.Total[i]
		r.byFunc = map[string]float64{}
		for name, vals := range res.ByFunc {
			r.byFunc[name] = vals[i]
		}
		if math.IsNaN(r.reward) && (r.ep == nil || r.ep.failed == "") {
			return nil, fmt.Errorf("reward of completion %d is NaN", i)
		}
	}
	return res.Metrics, nil
}
