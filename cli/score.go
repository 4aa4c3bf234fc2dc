package cli

import (
	"fmt"
	"io"
	"math"
	"slices"

	"rlhfstation/engine"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

func init() {
	register(command{name: "score", summary: "per-token log-probabilities and perplexity of texts under a model", order: 50, run: runScore})
}

const scoreHelp = `score [--model DIR] [--adapter CKPT] [--prompt PROMPT [--chat [--chat-template FILE] [--chat-template-kwargs JSON]]] [--preset P] [--baselines FILE] [--answer A] [--json] TEXT...

Scores each TEXT separately: every token's log-probability given the text before it, the
mean negative log-likelihood (NLL) over the scored tokens and the token-level perplexity
exp(mean NLL). The first token is conditioned on the special tokens the tokenizer's
post-processor puts in front (a BOS), else on the config's bos_token_id; a model with
neither cannot score a text's first token, which is then shown without a log-probability
and left out of the mean. With --prompt each TEXT is a completion of PROMPT, conditioned on
its tokens as a run's scorer conditions completions; with --chat, PROMPT is first rendered as one
user message with the model's chat template and its generation prompt (encoded without adding
special tokens again), so each TEXT is scored as the model's reply. With --preset or --baselines it also
shows the multi-level perplexity (word, phrase, sentence), the aggregate, the improvement over
the baselines and the reward the preset's perplexity reward gives each text; with baselines
(or a preset without a perplexity reward) also every reward function's value and their
weighted sum, the reward serve-reward answers (--answer is the ground truth of correctness
and NTL).`

func runScore(s streams, args []string) error {
	fs := newFlagSet("score", scoreHelp, s.stderr)
	mf := addModelFlags(fs)
	rf := addScoreRewardFlags(fs)
	prompt := fs.String("prompt", "", "score each TEXT as a completion of `PROMPT`")
	asJSON := fs.Bool("json", false, `print one JSON document {"model", "texts": [{"text", "context", "ids", "tokens", "logprobs", "mean_nll", "perplexity"}]}, with "prompt" (the rendered prompt) under --chat`)
	cf := addChatFlags(fs)
	texts, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(texts) == 0 {
		return usagef("score needs at least one TEXT")
	}
	if err := cf.check("score"); err != nil {
		return err
	}
	if *cf.on && *prompt == "" {
		return usagef("score: --chat renders the --prompt, which each TEXT answers: give --prompt")
	}
	dir, m, tok, err := mf.load(s.stderr, "")
	if err != nil {
		return err
	}
	promptText, rendered, err := cf.prompt(dir, *prompt)
	if err != nil {
		return err
	}
	rs, err := rf.open(dir, m, tok, s.stderr)
	if err != nil {
		return err
	}
	if rs != nil {
		defer rs.close()
	}
	results, err := scoreTexts(m, tok, promptText, rendered, texts)
	if err != nil {
		return err
	}
	if rs != nil {
		for i := range results {
			if results[i].Rewards, err = rs.score(tok, results[i].Text, results[i].LogProbs); err != nil {
				return err
			}
		}
		if err := rs.scoreAll(promptText, rendered, results); err != nil {
			return err
		}
	}
	if *asJSON {
		doc := struct {
			Model  string      `json:"model"`
			Prompt *string     `json:"prompt,omitempty"`
			Texts  []textScore `json:"texts"`
		}{Model: dir, Texts: results}
		if rendered {
			doc.Prompt = &promptText
		}
		return writeJSON(s.stdout, false, doc)
	}
	if rendered {
		fmt.Fprintf(s.stdout, "prompt rendered with the chat template:\n%s\n\n", promptText)
	}
	return printScores(s.stdout, tok, results)
}

// textScore is one text's result; log-probabilities are null where a token has no
// context, means are null without a scored token.
type textScore struct {
	Text       string     `json:"text"`
	Context    []int      `json:"context"` // ids the first token is conditioned on
	IDs        []int      `json:"ids"`
	Tokens     []string   `json:"tokens"`
	LogProbs   []*float64 `json:"logprobs"`
	MeanNLL    *float64   `json:"mean_nll"`
	Perplexity *float64   `json:"perplexity"`
	// Rewards are the preset's multi-level perplexity and reward (--preset, --baselines).
	Rewards *textRewards `json:"rewards,omitempty"`
}

// scoringContext returns the text's ids and what precedes them: the post-processor's
// leading special tokens, else the config's BOS, else nothing.
func scoringContext(m *model.Model, tok *tokenizer.Tokenizer, text string) (ctx, ids []int) {
	ids = tok.Encode(text, false).IDs
	full := tok.Encode(text, true).IDs
	for k := 0; k+len(ids) <= len(full); k++ {
		if k > 0 && slices.Equal(full[k:k+len(ids)], ids) {
			return full[:k], ids
		}
	}
	if m.Config.BOS >= 0 {
		return []int{m.Config.BOS}, ids
	}
	return nil, ids
}

// scoreTexts scores each text, conditioned on prompt when it is not "" (a chat template's
// rendering when rendered).
func scoreTexts(m *model.Model, tok *tokenizer.Tokenizer, prompt string, rendered bool, texts []string) ([]textScore, error) {
	seqs := make([][]int, len(texts))
	ctxLen := make([]int, len(texts))
	results := make([]textScore, len(texts))
	for i, text := range texts {
		ctx, ids := scoringContext(m, tok, text)
		if prompt != "" {
			ctx = engine.EncodePrompt(m, tok, prompt, rendered)
		}
		seqs[i] = append(slices.Clone(ctx), ids...)
		if err := engine.CheckPromptIDs(m, tok, seqs[i]); err != nil {
			return nil, fmt.Errorf("text %d: %w", i+1, err)
		}
		ctxLen[i] = len(ctx)
		r := textScore{Text: text, Context: ctx, IDs: ids, Tokens: make([]string, len(ids)), LogProbs: make([]*float64, len(ids))}
		if r.Context == nil {
			r.Context = []int{}
		}
		for j, id := range ids {
			r.Tokens[j] = tok.Token(id)
		}
		results[i] = r
	}
	lps, err := m.LogProbs(seqs, 1, model.AdaptersOn)
	if err != nil {
		return nil, err
	}
	for i := range results {
		r := &results[i]
		var sum float64
		n := 0
		for j := range r.IDs {
			k := ctxLen[i] + j
			if k == 0 {
				continue // no context for the very first token
			}
			v := float64(lps[i][k])
			r.LogProbs[j] = &v
			sum -= v
			n++
		}
		if n > 0 {
			nll := sum / float64(n)
			ppl := math.Exp(nll)
			r.MeanNLL, r.Perplexity = &nll, &ppl
		}
	}
	return results, nil
}

func printScores(w io.Writer, tok *tokenizer.Tokenizer, results []textScore) error {
	for i, r := range results {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "text %d: %q\n", i+1, r.Text)
		if len(r.Context) > 0 {
			fmt.Fprintf(w, "  context:")
			for _, id := range r.Context {
				fmt.Fprintf(w, " %s", readableToken(tok, id))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  %8s  %10s  %s\n", "id", "log-prob", "token")
		for j, id := range r.IDs {
			lp := "-"
			if r.LogProbs[j] != nil {
				lp = fmt.Sprintf("%.4f", *r.LogProbs[j])
			}
			fmt.Fprintf(w, "  %8d  %10s  %s\n", id, lp, readableToken(tok, id))
		}
		if r.MeanNLL == nil {
			fmt.Fprintf(w, "  no scored token\n")
			continue
		}
		scored := 0
		for _, lp := range r.LogProbs {
			if lp != nil {
				scored++
			}
		}
		fmt.Fprintf(w, "  mean NLL %.4f  perplexity %.3f  (%d tokens)\n", *r.MeanNLL, *r.Perplexity, scored)
		if r.Rewards != nil {
			printTextRewards(w, r.Rewards)
		}
	}
	return nil
}
