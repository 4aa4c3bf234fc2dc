package cli

import (
	"fmt"
	"io"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/model"
)

func init() {
	register(command{name: "generate", summary: "continue a prompt with a model (greedy or sampled)", order: 60, run: runGenerate})
}

const generateHelp = `generate [--model DIR] [--adapter CKPT] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--max-new-tokens N] [--chat [--chat-template FILE] [--chat-template-kwargs JSON]] [--json] PROMPT...

Continues PROMPT (the words joined with single spaces; - reads standard input) and prints the
new text. The prompt is encoded with the tokenizer's special tokens (a BOS where its
post-processor adds one). With --chat, PROMPT is rendered as one user message with the model's
chat template and its generation prompt, and encoded without adding special tokens again: the
model answers it as a chat model. Generation stops at the model's EOS ids or after N new tokens.
--temperature 0 is greedy; otherwise temperature, top-k and top-p are applied in that order,
seeded: the same seed gives the same text. Sampling flags not given take the values of the
folder's generation_config.json, as transformers' generate does.`

func runGenerate(s streams, args []string) error {
	fs := newFlagSet("generate", generateHelp, s.stderr)
	mf := addModelFlags(fs)
	temp := fs.Float64("temperature", 1, "sampling temperature `T`; 0 for greedy decoding")
	topK := fs.Int("top-k", 0, "sample among the `K` most likely tokens; 0 for all")
	topP := fs.Float64("top-p", 1, "sample from the smallest set of tokens whose probability reaches `P`; 1 for all")
	seed := fs.Uint64("seed", 0, "random `seed`")
	maxNew := fs.Int("max-new-tokens", 64, "at most `N` new tokens")
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
	}
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
	g, err := m.Generate([][]int{ids}, model.GenerateOptions{MaxNewTokens: *maxNew, Temperature: float32(*temp),
		TopK: *topK, TopP: float32(*topP), Seed: *seed})
	if err != nil {
		return err
	}
	newIDs := g.Tokens[0]
	text := tok.Decode(newIDs, true)
	if !*asJSON {
		_, err := fmt.Fprintln(s.stdout, text)
		return err
	}
	doc := struct {
		Prompt    string    `json:"prompt"`
		PromptIDs []int     `json:"prompt_ids"`
		Text      string    `json:"text"`
		IDs       []int     `json:"ids"`
		Tokens    []string  `json:"tokens"`
		LogProbs  []float32 `json:"logprobs"`
		Cut       bool      `json:"cut"`
	}{Prompt: prompt, PromptIDs: ids, Text: text, IDs: newIDs, Tokens: make([]string, len(newIDs)),
		LogProbs: g.LogProbs[0], Cut: g.Cut[0]}
	if doc.IDs == nil {
		doc.IDs, doc.LogProbs = []int{}, []float32{}
	}
	for i, id := range newIDs {
		doc.Tokens[i] = tok.Token(id)
	}
	return writeJSON(s.stdout, false, doc)
}
