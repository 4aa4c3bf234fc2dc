package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/stats"
	"rlhfstation/rewards"
)

func init() {
	register(command{name: "eval", summary: "answer correctness of a model or checkpoint on held-out prompts", order: 65, run: runEval})
}

const evalHelp = `eval [--model DIR] [--adapter CKPT] [--data FILE] [--prompts N] [--samples K] [--temperature T] [--max-new-tokens N] [--seed S] [--quant nf4|fp4|none] [--extraction flexible|strict] [--json]

Measures how often a model, with or without a LoRA adapter, answers right: for each prompt it
samples K completions at temperature T and one greedy completion, and compares each answer
with the ground truth as the correctness reward does (DESIGN §6.3). It prints the share of
right answers, sampled and greedy, as a mean over prompts with its standard error; the share
of completions that answer at once (start with "####") instead of working the problem; and the
mean completion length.

The prompts are the first N of FILE that have an answer (JSONL with prompt and answer, or
GSM8K), or N built-in math problems drawn with --seed: seeds other than a run's own give
problems that run never trained on. The base is quantized as a run quantizes it (--quant).`

// evalResult is eval's report; the JSON document of --json.
type evalResult struct {
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

func runEval(s streams, args []string) error {
	fs := newFlagSet("eval", evalHelp, s.stderr)
	mf := addModelFlags(fs)
	dataPath := fs.String("data", "", "prompts `FILE` with answers (JSONL prompt/answer or GSM8K); default: built-in math problems")
	n := fs.Int("prompts", 256, "evaluate `N` prompts")
	k := fs.Int("samples", 8, "sampled completions `K` per prompt")
	temp := fs.Float64("temperature", 1, "sampling temperature `T` (> 0)")
	maxNew := fs.Int("max-new-tokens", 48, "at most `N` new tokens a completion")
	seed := fs.Uint64("seed", 1000, "`seed` of the built-in problems and of sampling")
	quant := fs.String("quant", "nf4", "quantize the base's linears: `nf4`, fp4 or none")
	extraction := fs.String("extraction", "flexible", "how an answer is found: `flexible` (the last number) or strict (the last #### N)")
	asJSON := fs.Bool("json", false, `print one JSON document {"prompts", "samples", "temperature", "sampled_correct", "sampled_correct_se", "greedy_correct", "greedy_correct_se", "answered_at_once", "mean_completion_tokens"}`)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usagef("eval takes no positional arguments (got %q)", rest[0])
	case *n < 1 || *k < 1 || *temp <= 0 || *maxNew < 1:
		return usagef("eval: need --prompts ≥ 1, --samples ≥ 1, --temperature > 0, --max-new-tokens ≥ 1")
	case *quant != "nf4" && *quant != "fp4" && *quant != "none":
		return usagef("eval: --quant must be nf4, fp4 or none (got %q)", *quant)
	case *extraction != string(rewards.Flexible) && *extraction != string(rewards.Strict):
		return usagef("eval: --extraction must be flexible or strict (got %q)", *extraction)
	}
	examples, source, err := evalPrompts(*dataPath, *n, int64(*seed))
	if err != nil {
		return err
	}
	if err := checkDevice(*mf.device, s.stderr); err != nil {
		return err
	}
	dir, err := resolveModelDir(*mf.model)
	if err != nil {
		return err
	}
	m, tok, err := loadModel(dir, s.stderr)
	if err != nil {
		return err
	}
	if *quant != "none" {
		q := config.Default().Quant
		q.Type = *quant
		if _, _, err := engine.QuantizeLinears(m, q); err != nil {
			return err
		}
	}
	if *mf.adapter != "" {
		if _, err := engine.AttachAdapter(m, *mf.adapter); err != nil {
			return err
		}
	}
	o := evalOptions{samples: *k, temperature: *temp, maxNew: *maxNew, seed: *seed, extraction: rewards.Extraction(*extraction)}
	if !*asJSON {
		o.progress = s.stderr
	}
	r, err := evaluate(m, tok, examples, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(s.stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	}
	what := "the model"
	if *mf.adapter != "" {
		what = "the adapter " + *mf.adapter
	}
	fmt.Fprintf(s.stdout, "%s on %d %s, base %s\n", what, r.Prompts, source, *quant)
	row := func(name, format string, a ...any) {
		fmt.Fprintf(s.stdout, "  %-30s "+format+"\n", append([]any{name}, a...)...)
	}
	row(fmt.Sprintf("sampled (%d a prompt, T=%g)", r.Samples, r.Temperature), "right %.3f ± %.3f", r.SampledCorrect, r.SampledSE)
	row("greedy", "right %.3f ± %.3f", r.GreedyCorrect, r.GreedySE)
	row("answered at once (####)", "%.1f%% of sampled completions", 100*r.AnsweredAtOnce)
	row("mean completion length", "%.1f tokens", r.MeanTokens)
	return nil
}

// evalPrompts reads the first n prompts with answers of path, or makes n built-in math
// problems of seed; it also says what they are, for the report.
func evalPrompts(path string, n int, seed int64) ([]data.Example, string, error) {
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
		if x.Prompt != "" && x.Answer != "" && len(out) < n {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("%s: no prompt with an answer (eval needs JSONL with prompt and answer, or GSM8K)", path)
	}
	return out, "prompts of " + path, nil
}

type evalOptions struct {
	samples     int
	temperature float64
	maxNew      int
	seed        uint64
	extraction  rewards.Extraction
	progress    io.Writer // a count of prompts done; nil for none
}

// evaluate samples and greedily decodes every prompt and scores the answers.
func evaluate(m *model.Model, tok *tokenizer.Tokenizer, examples []data.Example, o evalOptions) (evalResult, error) {
	r := evalResult{Prompts: len(examples), Samples: o.samples, Temperature: o.temperature}
	sampled := make([]float64, len(examples))
	greedy := make([]float64, len(examples))
	atOnce, tokens := 0, 0
	for i, x := range examples {
		ids := tok.Encode(x.Prompt, true).IDs
		if len(ids) == 0 {
			return r, fmt.Errorf("prompt %d (line %d) encodes to no tokens", i+1, x.Line)
		}
		batch := make([][]int, o.samples)
		for j := range batch {
			batch[j] = ids
		}
		g, err := m.Generate(batch, model.GenerateOptions{MaxNewTokens: o.maxNew, Temperature: float32(o.temperature),
			Seed: o.seed, Stream: uint64(i * o.samples)})
		if err != nil {
			return r, err
		}
		for j := range batch {
			c := tok.Decode(g.Tokens[j], true)
			sampled[i] += rewards.CorrectnessReward(c, x.Answer, o.extraction) / float64(o.samples)
			if strings.HasPrefix(strings.TrimSpace(c), "####") {
				atOnce++
			}
			tokens += len(g.Tokens[j])
		}
		gg, err := m.Generate([][]int{ids}, model.GenerateOptions{MaxNewTokens: o.maxNew})
		if err != nil {
			return r, err
		}
		greedy[i] = rewards.CorrectnessReward(tok.Decode(gg.Tokens[0], true), x.Answer, o.extraction)
		if o.progress != nil && ((i+1)%32 == 0 || i+1 == len(examples)) {
			fmt.Fprintf(o.progress, "eval: %d/%d prompts\n", i+1, len(examples))
		}
	}
	r.SampledCorrect, r.SampledSE = stats.MeanSE(sampled)
	r.GreedyCorrect, r.GreedySE = stats.MeanSE(greedy)
	all := float64(len(examples) * o.samples)
	r.AnsweredAtOnce, r.MeanTokens = float64(atOnce)/all, float64(tokens)/all
	return r, nil
}
