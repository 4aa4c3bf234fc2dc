package engine

// Multi-turn, tool-calling rollouts (DESIGN §17): each completion of a batch is an episode of
// an environment. Every assistant turn of every episode still running is generated together
// by the model's one batched generation (model.GenerateOn, on a key/value cache the episodes
// keep across their turns), stopping at the end-of-turn token;
// its tool calls are parsed in the chat template's format and sent to the environment, whose
// messages are rendered incrementally and appended as tokens the loss masks out.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"rlhfstation/engine/chat"
	"rlhfstation/engine/env"
	"rlhfstation/engine/events"
	"rlhfstation/engine/model"
	"rlhfstation/internal/stats"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// envRun is one of the run's environments with how its episodes are rendered.
type envRun struct {
	spec   presets.Environment
	env    env.Env
	render *env.Renderer
	format env.Format
}

// turn is one message of an episode, for the samples.
type turn struct {
	role, text string // an assistant turn's text without its tool calls
	model      bool   // written by the model (in the loss)
	calls      []env.Call
}

// episode is a rollout's multi-turn state.
type episode struct {
	id     string
	run    *envRun
	msgs   []map[string]any
	tools  []any
	turns  []turn
	calls  int
	failed string // why the environment failed it ("" when it did not)
	envRew map[string]float64
	steps  float64 // the sum of its step rewards
	stepRw bool    // the environment gave step rewards
}

// startEnvironments makes the run's environments: their processes started, the chat template
// (the model's, else env.PlainTemplate) and the tool-call format each uses.
func (e *Engine) startEnvironments() error {
	if len(e.preset.Environments) == 0 {
		return nil
	}
	c, err := ChatTemplate(e.opts.ModelDir, e.cfg.Data.ChatTemplate, `set [data] chat_template = "FILE"`)
	if err != nil {
		return err
	}
	if len(e.model.Config.EOS) == 0 {
		return fmt.Errorf("environments need an end-of-turn token: the model %s has no eos_token_id", e.opts.ModelDir)
	}
	eot := e.tok.Token(e.model.Config.EOS[0])
	tmpl := c.Template
	if tmpl == nil {
		if tmpl, err = chat.Parse(env.PlainTemplate, "rlhfstation's plain template", chat.Tokens{Named: map[string]string{"eos_token": eot}}); err != nil {
			return err
		}
		e.logf("environments: the model has no chat template: turns are rendered with the plain template (tool calls as <tool_call>{json}</tool_call>, results as <tool_response>…</tool_response>, turns ended by %s)", eot)
	}
	for _, spec := range e.preset.Environments {
		r := &envRun{spec: spec, render: &env.Renderer{Template: tmpl, Kwargs: c.Kwargs, EndOfTurn: eot}}
		r.format = env.Format(spec.ToolFormat)
		if r.format == "" {
			if r.format = env.DetectFormat(tmpl.Text); r.format == "" {
				return fmt.Errorf("environment %s: the chat template (%s) shows no tool-call format: set tool_format", spec.Name, tmpl.Source)
			}
		}
		switch spec.Kind {
		case "calculator":
			r.env = env.NewCalculator()
		default:
			cl, err := env.New(spec.Name, spec.Command, spec.Timeout)
			if err != nil {
				return err
			}
			cl.OnFailure = e.envFailed
			if err := cl.Start(); err != nil {
				return err
			}
			r.env = cl
		}
		e.envs = append(e.envs, r)
		e.logf("environment %s (%s): tool calls in the %s format, at most %d turns and %d tokens an episode", spec.Name, spec.Kind, r.format, spec.MaxTurns, e.envTokens(spec))
	}
	return nil
}

// envTokens is an episode's token budget: max_tokens, else max_completion_length.
func (e *Engine) envTokens(s presets.Environment) int {
	if s.MaxTokens > 0 {
		return s.MaxTokens
	}
	return e.cfg.MaxCompletionLength
}

// closeEnvironments ends the environments' processes.
func (e *Engine) closeEnvironments() {
	for _, r := range e.envs {
		r.env.Close()
	}
	e.envs = nil
}

// envFailed reports an environment's failure as an anomaly.
func (e *Engine) envFailed(f env.Failure) {
	e.emit(events.Event{Type: events.Anomaly, Step: e.step + 1, Rule: "environment", Metric: "env/" + f.Env, Severity: events.Warning, Message: f.Message()})
}

// envFor is the environment of an example: the one its "environment" column names, else the first.
func (e *Engine) envFor(extra map[string]any) *envRun {
	if name, ok := extra["environment"].(string); ok {
		for _, r := range e.envs {
			if r.spec.Name == name {
				return r
			}
		}
	}
	return e.envs[0]
}

// generateEpisodes plays one episode per completion of b (its rollouts made, prompts unset),
// sampling every turn at temperature t (0: greedy, as evaluation's greedy pass asks).
func (e *Engine) generateEpisodes(ctx context.Context, b *batch, t float32, seed uint64) error {
	eps := make([]*episode, len(b.rollouts))
	byRun := map[*envRun][]int{}
	for i, r := range b.rollouts {
		e.episodeSeq++
		ex := map[string]any{"prompt": r.example.Prompt, "answer": r.example.Answer}
		for k, v := range r.example.Extra {
			ex[k] = v
		}
		if len(r.example.Messages) > 0 {
			msgs := make([]any, len(r.example.Messages))
			for k, m := range r.example.Messages {
				msgs[k] = map[string]any{"role": m.Role, "content": m.Content}
			}
			ex["messages"] = msgs
		}
		eps[i] = &episode{id: fmt.Sprintf("%d-%d", e.step+1, e.episodeSeq), run: e.envFor(r.example.Extra), envRew: map[string]float64{}}
		eps[i].turns = nil
		byRun[eps[i].run] = append(byRun[eps[i].run], i)
		r.ep = eps[i]
		r.resetReq = ex
	}
	// reset
	if err := e.envBatch(byRun, eps, func(i int) env.Request {
		return env.Request{Op: "reset", ID: eps[i].id, Example: b.rollouts[i].resetReq}
	}, func(i int, rep env.Reply) {
		ep, r := eps[i], b.rollouts[i]
		ep.msgs, ep.tools = rep.Messages, rep.Tools
		if len(ep.msgs) == 0 {
			ep.msgs = []map[string]any{{"role": "user", "content": r.example.Prompt}}
		}
		text, err := ep.run.render.Prompt(ep.msgs, ep.tools)
		if err != nil {
			ep.failed = err.Error()
			return
		}
		r.prompt = EncodePrompt(e.model, e.tok, text, true)
		r.promptTx = text
		for _, m := range ep.msgs {
			c, _ := m["content"].(string)
			role, _ := m["role"].(string)
			ep.turns = append(ep.turns, turn{role: role, text: c})
		}
	}); err != nil {
		return err
	}
	for i, r := range b.rollouts {
		if eps[i].failed != "" && r.prompt == nil {
			r.prompt = e.encodePrompt(r.example) // a failed reset: no episode; the prompt for the logs
		}
	}
	// One cache for the batch's episodes, kept across their turns: each turn prefills only the
	// previous turn's last token and the environment's tokens appended since.
	capacity := 0
	for i, r := range b.rollouts {
		capacity = max(capacity, len(r.prompt)+e.envTokens(eps[i].run.spec))
	}
	cache := e.model.NewCache(len(b.rollouts), capacity)
	defer cache.Free()
	for turnNo := 0; ; turnNo++ {
		var live []int
		for i, ep := range eps {
			r := b.rollouts[i]
			if ep.failed == "" && !r.done && r.modelTokens() < e.envTokens(ep.run.spec) {
				live = append(live, i)
			}
		}
		if len(live) == 0 || ctx.Err() != nil {
			break
		}
		inputs := make([][]int, len(live))
		most := 0
		for k, i := range live {
			r := b.rollouts[i]
			inputs[k] = append(append(make([]int, 0, len(r.prompt)+len(r.tokens)), r.prompt...), r.tokens...)
			most = max(most, e.envTokens(eps[i].run.spec)-len(r.tokens))
		}
		start := make([]int, len(live))
		for k, i := range live {
			start[k] = len(b.rollouts[i].tokens)
		}
		o := model.GenerateOptions{MaxNewTokens: most, Temperature: t, TopK: e.cfg.TopK,
			TopP: float32(e.cfg.TopP), MinP: float32(e.cfg.MinP), RepetitionPenalty: float32(e.cfg.RepetitionPenalty),
			Seed: seed, Stream: uint64(turnNo) << 32, Adapters: model.AdaptersOn}
		if e.digits != nil { // NTL's digit distributions, formed on the backend
			o.Digits = &model.DigitTokens{IDs: e.digits.IDs, Values: e.digits.Digits}
			o.OnDigits = func(seq, step int, probs []float32) {
				r := b.rollouts[live[seq]]
				at := start[seq] + step
				for len(r.digits) <= at {
					r.digits = append(r.digits, nil)
				}
				r.digits[at] = slices.Clone(probs)
			}
		}
		if e.rePrefill {
			cache.Reset()
		}
		gen, err := e.model.GenerateOn(cache, live, inputs, o)
		if err != nil {
			return err
		}
		e.prefilled += gen.Prefilled
		var stepping []int
		for k, i := range live {
			r, ep := b.rollouts[i], eps[i]
			budget := e.envTokens(ep.run.spec) - len(r.tokens)
			toks, cut := gen.Tokens[k], gen.Cut[k]
			if len(toks) > budget {
				toks, cut = toks[:budget], true
			}
			r.tokens = append(r.tokens, toks...)
			for range toks {
				r.mask = append(r.mask, true)
			}
			text := e.tok.Decode(toks, true)
			content, calls, perr := env.Parse(ep.run.format, text)
			if perr != nil {
				r.toolFailures++
			}
			ep.calls += len(calls)
			ep.turns = append(ep.turns, turn{role: "assistant", text: content, model: true, calls: calls})
			ep.msgs = append(ep.msgs, env.Message(content, calls, func(j int) string { return fmt.Sprintf("call%05d", (ep.calls-len(calls)+j)%100000) }))
			if cut {
				r.done, r.cut = true, true
				continue
			}
			stepping = append(stepping, i)
		}
		if len(stepping) == 0 {
			continue
		}
		sub := map[*envRun][]int{}
		for _, i := range stepping {
			sub[eps[i].run] = append(sub[eps[i].run], i)
		}
		if err := e.envBatch(sub, eps, func(i int) env.Request {
			return env.Request{Op: "step", ID: eps[i].id, Message: eps[i].msgs[len(eps[i].msgs)-1]}
		}, func(i int, rep env.Reply) {
			r, ep := b.rollouts[i], eps[i]
			if rep.Reward != nil {
				ep.steps += *rep.Reward
				ep.stepRw = true
			}
			for k, v := range rep.Metrics {
				if k == "tool_failures" {
					r.toolFailures += int(v)
					continue
				}
				r.envMetrics = addMetric(r.envMetrics, "env/"+ep.run.spec.Name+"/"+k, v)
			}
			if rep.Done || len(rep.Messages) == 0 {
				r.done = true
				return
			}
			if turnNo+1 >= ep.run.spec.MaxTurns { // max_turns reached with the episode going on
				r.done, r.cut = true, true
				return
			}
			next, err := ep.run.render.Next(ep.msgs, rep.Messages, ep.tools)
			if err != nil {
				ep.failed = err.Error()
				return
			}
			ids := e.tok.Encode(next, false).IDs
			if len(r.tokens)+len(ids) >= e.envTokens(ep.run.spec) || len(r.prompt)+len(r.tokens)+len(ids) >= e.model.Config.Context() {
				r.done, r.cut = true, true // no room for another turn
				return
			}
			r.tokens = append(r.tokens, ids...)
			for range ids {
				r.mask = append(r.mask, false)
			}
			ep.msgs = append(ep.msgs, rep.Messages...)
			for _, m := range rep.Messages {
				c, _ := m["content"].(string)
				role, _ := m["role"].(string)
				ep.turns = append(ep.turns, turn{role: role, text: c})
			}
		}); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, r := range b.rollouts {
		if eps[i].failed == "" && !r.done {
			r.cut = true // the token budget ran out
		}
	}
	// reward: one request per environment for its episodes that did not fail.
	for run, idx := range byRun {
		var ids []string
		var ok []int
		for _, i := range idx {
			if eps[i].failed == "" {
				ids, ok = append(ids, eps[i].id), append(ok, i)
			}
		}
		if len(ids) == 0 {
			continue
		}
		rid := fmt.Sprintf("reward-%d-%d", e.step+1, e.episodeSeq)
		reps, err := run.env.Do([]env.Request{{Op: "reward", ID: rid, IDs: ids}})
		if err != nil {
			return err
		}
		rep := reps[rid]
		if rep.Error != "" {
			for _, i := range ok {
				eps[i].failed = rep.Error
			}
			continue
		}
		for name, vals := range rep.Rewards {
			if len(vals) != len(ids) {
				for _, i := range ok {
					eps[i].failed = fmt.Sprintf("the reward %q has %d values for %d episodes", name, len(vals), len(ids))
				}
				break
			}
			for k, i := range ok {
				v := math.NaN()
				if vals[k] != nil {
					v = *vals[k]
				}
				eps[i].envRew[name] = v
			}
		}
	}
	for i, r := range b.rollouts {
		if eps[i].stepRw {
			eps[i].envRew["steps"] = eps[i].steps
		}
		if r.mask == nil {
			r.mask = []bool{}
		}
	}
	return nil
}

// envBatch sends one request per episode of idx (grouped by environment) and hands each reply
// to use; an episode whose request failed is marked failed. An environment that failed twice
// in a row stops the run (the error).
func (e *Engine) envBatch(byRun map[*envRun][]int, eps []*episode, req func(i int) env.Request, use func(i int, rep env.Reply)) error {
	for run, idx := range byRun {
		var reqs []env.Request
		var which []int
		for _, i := range idx {
			if eps[i].failed == "" {
				reqs, which = append(reqs, req(i)), append(which, i)
			}
		}
		reps, err := run.env.Do(reqs)
		if err != nil {
			return err
		}
		for _, i := range which {
			rep := reps[eps[i].id]
			if rep.Error != "" {
				eps[i].failed = rep.Error
				continue
			}
			use(i, rep)
		}
	}
	return nil
}

func addMetric(m map[string]float64, k string, v float64) map[string]float64 {
	if m == nil {
		m = map[string]float64{}
	}
	m[k] += v
	return m
}

// modelTokens counts the completion tokens the model wrote.
func (r *rollout) modelTokens() int {
	if r.mask == nil {
		return len(r.tokens)
	}
	n := 0
	for _, m := range r.mask {
		if m {
			n++
		}
	}
	return n
}

// envRewards adds the environments' rewards to a scored batch: each weighted into the total
// (NaN-safe), logged as rewards/ENV.NAME/mean and std; an episode the environment failed is
// not applicable to any reward (its total NaN, its advantage 0).
func (e *Engine) envRewards(b *batch, res *rewards.Result) {
	names := map[string]bool{}
	for _, r := range b.rollouts {
		if r.ep == nil {
			continue
		}
		for k := range r.ep.envRew {
			names[r.ep.run.spec.Name+"."+k] = true
		}
	}
	for name := range names {
		res.ByFunc[name] = make([]float64, len(b.rollouts))
		for i := range b.rollouts {
			res.ByFunc[name][i] = math.NaN()
		}
	}
	for i, r := range b.rollouts {
		if r.ep == nil {
			continue
		}
		if r.ep.failed != "" {
			res.Total[i] = math.NaN()
			for name := range res.ByFunc {
				res.ByFunc[name][i] = math.NaN()
			}
			continue
		}
		for k, v := range r.ep.envRew {
			name := r.ep.run.spec.Name + "." + k
			res.ByFunc[name][i] = v
			if !math.IsNaN(v) {
				res.Total[i] += r.ep.run.spec.Weight(k) * v
			}
		}
	}
	for name := range names {
		var vals []float64
		for _, v := range res.ByFunc[name] {
			if !math.IsNaN(v) {
				vals = append(vals, v)
			}
		}
		if len(vals) > 0 {
			m, s := meanStd(vals)
			res.Metrics["rewards/"+name+"/mean"], res.Metrics["rewards/"+name+"/std"] = m, s
		}
	}
}

// episodeMetrics are the environments' metrics over a step's episodes, with TRL's names:
// tools/call_frequency (tool calls per episode), tools/failure_frequency (failed calls per
// call), turns/mean (assistant turns per episode), env/<name>/… (the environments' own
// metrics, means per episode; failed and truncated shares).
func episodeMetrics(bs []*batch, out events.Metrics) {
	var n, calls, fails, turns float64
	per := map[string]float64{}
	count := map[string]float64{}
	for _, b := range bs {
		for _, r := range b.rollouts {
			if r.ep == nil {
				continue
			}
			n++
			name := r.ep.run.spec.Name
			count[name]++
			calls += float64(r.ep.calls)
			fails += float64(r.toolFailures)
			for _, t := range r.ep.turns {
				if t.model {
					turns++
				}
			}
			if r.ep.failed != "" {
				per["env/"+name+"/failed"]++
			}
			if r.cut {
				per["env/"+name+"/truncated"]++
			}
			for k, v := range r.envMetrics {
				per[k] += v
			}
		}
	}
	if n == 0 {
		return
	}
	out["tools/call_frequency"] = calls / n
	out["tools/failure_frequency"] = 0
	if calls > 0 {
		out["tools/failure_frequency"] = fails / calls
	}
	out["turns/mean"] = turns / n
	for name, c := range count {
		for _, k := range []string{"failed", "truncated"} {
			out["env/"+name+"/"+k] = per["env/"+name+"/"+k] / c
		}
	}
	for k, v := range per {
		if _, done := out[k]; !done {
			env := strings.SplitN(strings.TrimPrefix(k, "env/"), "/", 2)[0]
			out[k] = v / count[env]
		}
	}
}

// turnsOf are an episode's turns for the samples event.
func turnsOf(r *rollout) []events.Turn {
	if r.ep == nil {
		return nil
	}
	out := make([]events.Turn, len(r.ep.turns))
	for i, t := range r.ep.turns {
		out[i] = events.Turn{Role: t.role, Content: t.text, Masked: !t.model}
		for _, c := range t.calls {
			out[i].Calls = append(out[i].Calls, events.ToolCall{Name: c.Name, Arguments: c.Arguments})
		}
	}
	return out
}

func meanStd(x []float64) (float64, float64) { return stats.MeanStd(x) }
