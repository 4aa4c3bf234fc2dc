package cli

import (
	"fmt"

	"rlhfstation/engine"
	"rlhfstation/rewards"
)

func init() {
	register(command{name: "eval", summary: "answer correctness of a model or checkpoint on held-out prompts", order: 65, run: runEval})
}

const evalHelp = `eval [--model DIR] [--adapter CKPT] [--data FILE] [--prompts N] [--samples K] [--temperature T] [--max-new-tokens N] [--seed S] [--quant nf4|fp4|none] [--extraction flexible|strict] [--chat] [--chat-template FILE] [--chat-template-kwargs JSON] [--json]

Measures how often a model, with or without a LoRA adapter, answers right: for each prompt it
samples K completions at temperature T and one greedy completion, and compares each answer
with the ground truth as the correctness reward does (DESIGN §6.3). It prints the share of
right answers, sampled and greedy, as a mean over prompts with its standard error; the share
of completions that answer at once (start with "####") instead of working the problem; and the
mean completion length.

The prompts are the first N of FILE that have an answer (JSONL with prompt and answer, or
GSM8K), or N built-in math problems drawn with --seed: seeds other than a run's own give
problems that run never trained on. The base is quantized as a run quantizes it (--quant).

Conversational prompts (lists of messages) are rendered with the model's chat template (or
--chat-template) as a run renders them; --chat renders plain prompts too, each as one user
message, so a chat model is asked as it expects.`

func runEval(s streams, args []string) error {
	fs := newFlagSet("eval", evalHelp, s.stderr)
	mf := addModelFlags(fs)
	dataPath := fs.String("data", "", "prompts `FILE` with answers (JSONL prompt/answer or GSM8K); default: built-in math problems")
	n := fs.Int("prompts", 256, "evaluate `N` prompts")
	k := fs.Int("samples", 8, "sampled completions `K` per prompt")
	temp := fs.Float64("temperature", 1, "sampling temperature `T` (> 0); default: generation_config.json's, else 1")
	topP := fs.Float64("top-p", 1, "nucleus sampling: keep the smallest set of tokens whose probability reaches `P` (1 = off); default: generation_config.json's")
	topK := fs.Int("top-k", 0, "sample among the `K` most likely tokens (0 = all); default: generation_config.json's")
	maxNew := fs.Int("max-new-tokens", 48, "at most `N` new tokens a completion")
	seed := fs.Uint64("seed", 1000, "`seed` of the built-in problems and of sampling")
	quant := fs.String("quant", "nf4", "quantize the base's linears: `nf4`, fp4 or none")
	extraction := fs.String("extraction", "flexible", "how an answer is found: `flexible` (the last number) or strict (the last #### N)")
	asJSON := fs.Bool("json", false, `print one JSON document {"prompts", "samples", "temperature", "sampled_correct", "sampled_correct_se", "greedy_correct", "greedy_correct_se", "answered_at_once", "mean_completion_tokens"}`)
	cf := addChatFlags(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(rest) > 0:
		return usagef("eval takes no positional arguments (got %q)", rest[0])
	case *n < 1 || *k < 1 || *temp <= 0 || *maxNew < 1 || *topK < 0 || *topP <= 0 || *topP > 1:
		return usagef("eval: need --prompts ≥ 1, --samples ≥ 1, --temperature > 0, --top-k ≥ 0, 0 < --top-p ≤ 1, --max-new-tokens ≥ 1")
	case *quant != "nf4" && *quant != "fp4" && *quant != "none":
		return usagef("eval: --quant must be nf4, fp4 or none (got %q)", *quant)
	case *extraction != string(rewards.Flexible) && *extraction != string(rewards.Strict):
		return usagef("eval: --extraction must be flexible or strict (got %q)", *extraction)
	}
	examples, source, err := engine.EvalPrompts(*dataPath, *n, int64(*seed))
	if err != nil {
		return err
	}
	q := *quant
	if q == "none" {
		q = ""
	}
	dir, m, tok, err := mf.load(s.stderr, q)
	if err != nil {
		return err
	}
	if err := applyGenDefaults(fs, dir, s.stderr, temp, topP, topK); err != nil {
		return err
	}
	if *temp <= 0 {
		// do_sample false: transformers decodes greedily, which eval reports beside; its
		// sampled completions keep temperature 1.
		*temp = 1
		fmt.Fprintln(s.stderr, "eval: generation_config.json decodes greedily (do_sample false); the sampled completions use temperature 1")
	}
	c, err := cf.load(dir)
	if err != nil {
		return err
	}
	if *cf.on {
		engine.AsUserMessages(examples)
	}
	if n, err := c.Render(examples); err != nil {
		return err
	} else if n > 0 {
		fmt.Fprintf(s.stderr, "eval: %d prompts rendered with the chat template of %s\n", n, c.Template.Source)
	}
	o := engine.EvalOptions{Samples: *k, Temperature: *temp, TopP: *topP, TopK: *topK, MaxNewTokens: *maxNew, Seed: *seed, Extraction: rewards.Extraction(*extraction)}
	if !*asJSON {
		o.Progress = func(done, total int) {
			if done%32 == 0 || done == total {
				fmt.Fprintf(s.stderr, "eval: %d/%d prompts\n", done, total)
			}
		}
	}
	r, err := engine.Evaluate(m, tok, examples, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, false, r)
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
