package engine

import (
	"fmt"
	"strings"

	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/stats"
	"rlhfstation/rewards"
)

// EvalResult is what Evaluate measured (the eval command's --json document).
type EvalResult struct {
	Prompts        int     `json:"prompts"`
	Samples        int     `json:"samples"`
	Temperature    float64 `json:"temperature"`
	SampledCorrect float64 `json:"sampled_correct"`
	SampledSE      float64 `json:"sampled_correct_se"`
	GreedyCorrect  float64 `json:"greedy_correct"`
	GreedySE       float64 `json:"greedy_correct_se"`
	AnsweredAtOnce float64 `json:"answered_at_once"` // share of sampled completions starting with ####
	MeanTokens     float64 `json:"mean_completion_tokens"`
}

// EvalPrompts reads the first n prompts with answers of path, or makes n built-in math
// problems of seed; it also says what they are, for the report. Conversational prompts are
// left for a Chat to render.
func EvalPrompts(path string, n int, seed int64) ([]data.Example, string, error) {
	if path == "" {
		ps, err := synth.Prompts("math", seed, n)
		if err != nil {
			return nil, "", err
		}
		out := make([]data.Example, len(ps))
		for i, p := range ps {
			out[i] = data.Example{Prompt: p.Prompt, Answer: p.Answer}
		}
		return out, fmt.Sprintf("built-in math problems (seed %d)", seed), nil
	}
	ex, _, err := data.Read(path)
	if err != nil {
		return nil, "", err
	}
	var out []data.Example
	for _, x := range ex {
		if (x.Prompt != "" || Conversational(x)) && x.Answer != "" && len(out) < n {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("%s: no prompt with an answer (eval needs prompts with answers; see the README, Data)", path)
	}
	return out, "prompts of " + path, nil
}

// EvalOptions say how Evaluate decodes and scores.
type EvalOptions struct {
	Samples      int     // sampled completions per prompt
	Temperature  float64 // of the sampled completions
	TopP         float64 // nucleus sampling of the sampled completions; 0 or 1: off
	TopK         int     // the K most likely tokens; 0: all
	MaxNewTokens int
	Seed         uint64
	Extraction   rewards.Extraction
	Progress     func(done, total int) // after each prompt; may be nil
}

// Evaluate samples and greedily decodes every prompt and scores the answers against the
// ground truth as the correctness reward does (DESIGN §6.3).
func Evaluate(m *model.Model, tok *tokenizer.Tokenizer, examples []data.Example, o EvalOptions) (EvalResult, error) {
	r := EvalResult{Prompts: len(examples), Samples: o.Samples, Temperature: o.Temperature}
	sampled := make([]float64, len(examples))
	greedy := make([]float64, len(examples))
	atOnce, tokens := 0, 0
	for i, x := range examples {
		ids := EncodePrompt(m, tok, x.Prompt, Conversational(x))
		if err := CheckPromptIDs(m, tok, ids); err != nil {
			return r, fmt.Errorf("prompt %d (line %d): %w", i+1, x.Line, err)
		}
		if len(ids) == 0 {
			return r, fmt.Errorf("prompt %d (line %d) encodes to no tokens", i+1, x.Line)
		}
		batch := make([][]int, o.Samples)
		for j := range batch {
			batch[j] = ids
		}
		g, err := m.Generate(batch, model.GenerateOptions{MaxNewTokens: o.MaxNewTokens, Temperature: float32(o.Temperature),
			TopP: float32(o.TopP), TopK: o.TopK, Seed: o.Seed, Stream: uint64(i * o.Samples)})
		if err != nil {
			return r, err
		}
		for j := range batch {
			c := tok.Decode(g.Tokens[j], true)
			sampled[i] += rewards.CorrectnessReward(c, x.Answer, o.Extraction) / float64(o.Samples)
			if strings.HasPrefix(strings.TrimSpace(c), "####") {
				atOnce++
			}
			tokens += len(g.Tokens[j])
		}
		gg, err := m.Generate([][]int{ids}, model.GenerateOptions{MaxNewTokens: o.MaxNewTokens})
		if err != nil {
			return r, err
		}
		greedy[i] = rewards.CorrectnessReward(tok.Decode(gg.Tokens[0], true), x.Answer, o.Extraction)
		if o.Progress != nil {
			o.Progress(i+1, len(examples))
		}
	}
	r.SampledCorrect, r.SampledSE = stats.MeanSE(sampled)
	r.GreedyCorrect, r.GreedySE = stats.MeanSE(greedy)
	all := float64(len(examples) * o.Samples)
	r.AnsweredAtOnce, r.MeanTokens = float64(atOnce)/all, float64(tokens)/all
	return r, nil
}
