package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"rlhfstation/engine"
	"rlhfstation/engine/backend/cuda"
	"rlhfstation/engine/model"
)

func init() {
	register(command{name: "generate", summary: "continue a prompt with a model (greedy or sampled)", order: 60, run: runGenerate})
}

const generateHelp = `generate [--model DIR] [--adapter CKPT] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--max-new-tokens N] [--num-sequences N] [--ignore-eos] [--chat [--chat-template FILE] [--chat-template-kwargs JSON]] [--json] [-v] PROMPT...

Continues PROMPT (the words joined with single spaces; - reads standard input) and prints the
new text. The prompt is encoded with the tokenizer's special tokens (a BOS where its
post-processor adds one). With --chat, PROMPT is rendered as one user message with the model's
chat template and its generation prompt, and encoded without adding special tokens again: the
model answers it as a chat model. Generation stops at the model's EOS ids or after N new tokens.
--temperature 0 is greedy; otherwise temperature, top-k and top-p are applied in that order,
seeded: the same seed gives the same text. Sampling flags not given take the values of the
folder's generation_config.json, as transformers' generate does.

--num-sequences N decodes N completions of the prompt together, as a run decodes a prompt's
group (sequence i draws from its own generator seeded (S, i), as in a run), and prints them
one after another, each under a "--- sequence i" line; with --json the documents come as a
list. --ignore-eos generates exactly --max-new-tokens tokens (vLLM's name), so that a
decode's cost can be measured. -v prints how long the generation took and, on a CUDA device,
its device calls (the ledger: launches, graph replays, cuBLAS calls, copies, syncs) on stderr.`

func runGenerate(s streams, args []string) error {
	fs := newFlagSet("generate", generateHelp, s.stderr)
	mf := addModelFlags(fs)
	temp := fs.Float64("temperature", 1, "sampling temperature `T`; 0 for greedy decoding")
	topK := fs.Int("top-k", 0, "sample among the `K` most likely tokens; 0 for all")
	topP := fs.Float64("top-p", 1, "sample from the smallest set of tokens whose probability reaches `P`; 1 for all")
	seed := fs.Uint64("seed", 0, "random `seed`")
	maxNew := fs.Int("max-new-tokens", 64, "at most `N` new tokens")
	numSeqs := fs.Int("num-sequences", 1, "decode `N` completions of the prompt together (a run's group); --json prints a list")
	ignoreEOS := fs.Bool("ignore-eos", false, "do not stop at the model's EOS ids: exactly --max-new-tokens tokens")
	verbose := fs.Bool("v", false, "print the generation's time and, on a CUDA device, its device calls on stderr")
	asJSON := fs.Bool("json", false, `print one JSON document {"prompt", "prompt_ids", "text", "ids", "tokens", "logprobs", "cut"}; logprobs are under softmax(logits/T) (T=1 when greedy); "prompt" is the rendered prompt with --chat`)
	cf := addChatFlags(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check("generate"); err != nil {
		return err
	}
	switch {
	case len(rest) == 0:
		return usagef("generate needs a PROMPT (or - to read standard input)")
	case *temp < 0 || *topK < 0 || *topP <= 0 || *topP > 1 || *maxNew < 0:
		return usagef("generate: need --temperature ≥ 0, --top-k ≥ 0, 0 < --top-p ≤ 1, --max-new-tokens ≥ 0")
	case *numSeqs < 1 || *numSeqs > maxNumSequences:
		return usagef("generate: --num-sequences must be from 1 to %d, not %d", maxNumSequences, *numSeqs)
	}
	list := false
	fs.Visit(func(f *flag.Flag) { list = list || f.Name == "num-sequences" })
	prompt := strings.Join(rest, " ")
	if len(rest) == 1 && rest[0] == "-" {
		b, err := io.ReadAll(s.stdin)
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		prompt = string(b)
	}
	dir, m, tok, err := mf.load(s.stderr, "")
	if err != nil {
		return err
	}
	if err := applyGenDefaults(fs, dir, s.stderr, temp, topP, topK); err != nil {
		return err
	}
	prompt, rendered, err := cf.prompt(dir, prompt)
	if err != nil {
		return err
	}
	ids := engine.EncodePrompt(m, tok, prompt, rendered)
	if err := engine.CheckPromptIDs(m, tok, ids); err != nil {
		return err
	}
	if len(ids) == 0 {
		if m.Config.BOS < 0 {
			return usagef("generate: the prompt is empty and the model has no BOS token to start from")
		}
		ids = []int{m.Config.BOS}
	}
	prompts := make([][]int, *numSeqs)
	for i := range prompts {
		prompts[i] = ids
	}
	led, _ := m.Backend().(ledgered)
	var before cuda.Ledger
	if *verbose && led != nil {
		before = led.Ledger()
	}
	start := time.Now()
	g, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: *maxNew, Temperature: float32(*temp),
		TopK: *topK, TopP: float32(*topP), Seed: *seed, NoEOS: *ignoreEOS})
	if err != nil {
		return err
	}
	if *verbose {
		n := 0
		for _, t := range g.Tokens {
			n += len(t)
		}
		secs := time.Since(start).Seconds()
		fmt.Fprintf(s.stderr, "generated %d tokens in %d sequences in %.3fs (%.1f tokens/s)\n", n, len(prompts), secs, float64(n)/secs)
		if led != nil {
			led.Ledger().Sub(before).Print(s.stderr)
		}
	}
	type doc struct {
		Prompt    string    `json:"prompt"`
		PromptIDs []int     `json:"prompt_ids"`
		Text      string    `json:"text"`
		IDs       []int     `json:"ids"`
		Tokens    []string  `json:"tokens"`
		LogProbs  []float32 `json:"logprobs"`
		Cut       bool      `json:"cut"`
	}
	docs := make([]doc, len(prompts))
	for i, newIDs := range g.Tokens {
		text := tok.Decode(newIDs, true)
		if !*asJSON {
			if len(prompts) > 1 {
				if _, err := fmt.Fprintf(s.stdout, "--- sequence %d\n", i+1); err != nil {
					return err
				}
			}
			if _, err := fmt.Fprintln(s.stdout, text); err != nil {
				return err
			}
			continue
		}
		d := doc{Prompt: prompt, PromptIDs: ids, Text: text, IDs: newIDs, Tokens: make([]string, len(newIDs)),
			LogProbs: g.LogProbs[i], Cut: g.Cut[i]}
		if d.IDs == nil {
			d.IDs, d.LogProbs = []int{}, []float32{}
		}
		for k, id := range newIDs {
			d.Tokens[k] = tok.Token(id)
		}
		docs[i] = d
	}
	switch {
	case !*asJSON:
		return nil
	case list:
		return writeJSON(s.stdout, false, docs)
	}
	return writeJSON(s.stdout, false, docs[0])
}

// maxNumSequences bounds --num-sequences (a run's largest group is far smaller).
const maxNumSequences = 4096

// ledgered is a backend that counts its device calls (the CUDA backend).
type ledgered interface{ Ledger() cuda.Ledger }
