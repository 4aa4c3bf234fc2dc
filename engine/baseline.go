package engine

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"rlhfstation/engine/chat"
	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/rewards"
)

// BaselineChunkTokens is DESIGN §6.1's largest baseline sample, in tokens.
const BaselineChunkTokens = 256

// baselineBatch is how many samples go through the scorer per progress update.
const baselineBatch = 8

// BaselineOptions control ComputeBaselines.
type BaselineOptions struct {
	Format      data.Format           // how the examples were read (answers after prompts, documents…)
	Separator   string                // between a prompt and its answer: "\n" for GSM8K/JSONL files, "" for a run, whose completions follow their prompt directly
	ChunkTokens int                   // largest sample, in tokens; 0 for BaselineChunkTokens
	MaxSamples  int                   // 0: all
	Progress    func(done, total int) // may be nil
	// Text is what is measured, as the preset's perplexity reward measures completions:
	// with rewards.ReasoningText each sample's final `####` line is left out, and texts that
	// are answers alone are no reference (ErrNoReasoning when nothing is left).
	Text rewards.PPLText
}

// ErrNoReasoning is ComputeBaselines' error when reasoning baselines are asked of examples
// that hold no reasoning text: answers that are bare numbers or `#### N` lines alone.
var ErrNoReasoning = errors.New("no reference text has reasoning to measure (answers are bare numbers or `#### N` lines alone): the perplexity of the reasoning does not apply to this data")

// ComputeBaselines scores reference examples with the scorer (m with adapters off) and
// aggregates the samples' levels into baselines (DESIGN §6.1) of the text o.Text asks for. The caller fills the model and
// tokenizer hashes, the time and the source.
func ComputeBaselines(m *model.Model, tok *tokenizer.Tokenizer, examples []data.Example, o BaselineOptions) (rewards.Baselines, error) {
	chunk := o.ChunkTokens
	if chunk <= 0 {
		chunk = BaselineChunkTokens
	}
	text, err := rewards.ParsePPLText(string(o.Text))
	if err != nil {
		return rewards.Baselines{}, err
	}
	if text == rewards.ReasoningText {
		examples = worked(examples)
	}
	samples := BaselineSamples(tok, m.Config.BOS, m.Config.MaxPos, examples, o.Format, o.Separator, chunk, o.MaxSamples)
	if len(samples) == 0 && text == rewards.ReasoningText {
		return rewards.Baselines{}, ErrNoReasoning
	}
	if len(samples) == 0 {
		return rewards.Baselines{}, fmt.Errorf("no reference text to score")
	}
	levels, err := BaselineLevels(m, samples, text, o.Progress)
	if err != nil {
		return rewards.Baselines{}, err
	}
	if text == rewards.ReasoningText && !anyWords(levels) {
		return rewards.Baselines{}, ErrNoReasoning
	}
	b, err := rewards.ComputeBaselines(levels)
	b.Text = text
	var se *rewards.SampleError
	if errors.As(err, &se) {
		text := []rune(samples[se.Sample].Text)
		if len(text) > 60 {
			text = append(text[:60], '…')
		}
		return b, fmt.Errorf("baseline text %q: %w", string(text), err)
	}
	return b, err
}

// worked keeps the examples whose reference text holds reasoning (a worked solution, a
// document): an answer that is only a number, or a prompt without an answer, holds none.
func worked(examples []data.Example) []data.Example {
	var out []data.Example
	for _, x := range examples {
		if rewards.HasReasoning(x.Text) {
			out = append(out, x)
		}
	}
	return out
}

func anyWords(levels []rewards.Levels) bool {
	for _, l := range levels {
		if !math.IsNaN(l.Word) {
			return true
		}
	}
	return false
}

// BaselinesOfFile computes the baselines of the reference texts in the file dataPath (GSM8K,
// JSONL with prompt and answer or text, plain text) with the model folder modelDir, stamped
// with the folder's hashes, the time and the file. The file decides o's Format and Separator.
func BaselinesOfFile(modelDir, dataPath string, o BaselineOptions) (rewards.Baselines, error) {
	modelHash, tokHash, err := rewards.FolderHashes(modelDir)
	if err != nil {
		return rewards.Baselines{}, err
	}
	m, tok, err := LoadModel(modelDir)
	if err != nil {
		return rewards.Baselines{}, err
	}
	examples, format, err := data.ReadDocuments(dataPath)
	if err != nil {
		return rewards.Baselines{}, err
	}
	// Conversational prompts are rendered as a run renders them by default (chat_template auto).
	c, err := ChatTemplate(modelDir, "auto", "add a "+chat.TemplateFile+" to the model folder")
	if err != nil {
		return rewards.Baselines{}, err
	}
	if _, err := c.Render(examples); err != nil {
		return rewards.Baselines{}, err
	}
	o.Format, o.Separator = format, "\n"
	b, err := ComputeBaselines(m, tok, examples, o)
	if err != nil {
		return rewards.Baselines{}, fmt.Errorf("%s: %w", dataPath, err)
	}
	b.ModelHash, b.TokenizerHash = modelHash, tokHash
	b.Created = time.Now().UTC().Truncate(time.Second)
	if abs, err := filepath.Abs(dataPath); err == nil {
		b.Source = abs
	} else {
		b.Source = dataPath
	}
	return b, nil
}

// BaselineSample is a text to score with the tokens that condition it.
type BaselineSample struct {
	Context []int // BOS, prompt, earlier tokens of the document: conditioning only
	IDs     []int // the scored tokens
	Text    string
	Spans   []rewards.Span // bytes of ids in text
}

// BaselineSamples turns reference examples into baseline samples, as the scorer sees
// completions: answers conditioned on their prompt (prompt, then a newline), texts on the
// model's BOS and the document before them. A document is cut into chunks of at most chunk
// tokens. When the model has no BOS and nothing precedes a text, its first token only
// conditions the rest: it has no context to be scored in.
func BaselineSamples(tok *tokenizer.Tokenizer, bos, maxPos int, examples []data.Example, format data.Format, sep string, chunk, maxSamples int) []BaselineSample {
	if maxPos > 1 {
		chunk = min(chunk, maxPos-1) // leave room for at least one token of context
	}
	var out []BaselineSample
	for _, ex := range examples {
		var context []int
		text := ex.Text
		switch {
		case Conversational(ex) && text != "":
			// A prompt rendered by a chat template ends where the reply starts and writes
			// its own special tokens: the answer follows it as a completion does in a run.
			context = tok.Encode(ex.Prompt, false).IDs
		case Conversational(ex):
			text = ex.Messages[len(ex.Messages)-1].Content // the conversation's words, not the template's markup
		case ex.Prompt != "" && text != "" && (format == data.GSM8K || format == data.PromptJSONL):
			context = tok.Encode(ex.Prompt+sep, false).IDs
		case text == "":
			text = ex.Prompt // a prompt file without answers: the prompts are the reference
		}
		if bos >= 0 && !(Conversational(ex) && ex.Text != "") {
			context = append([]int{bos}, context...)
		}
		enc := tok.Encode(text, false)
		spans := make([]rewards.Span, len(enc.IDs))
		for i, o := range enc.Offsets {
			spans[i] = rewards.Span{Start: o[0], End: o[1]}
		}
		ids := enc.IDs
		if len(context) == 0 && len(ids) > 1 {
			context, ids, spans = ids[:1], ids[1:], spans[1:]
		}
		if len(ids) == 0 {
			continue
		}
		prefix := len(context) // the tokens before the document's scored tokens
		all := append(append([]int(nil), context...), ids...)
		for _, c := range rewards.SplitChunks(text, spans, chunk) {
			// Condition on up to chunk tokens before it, within the model's context.
			keep := min(prefix+c.Start, chunk, max(maxPos-(c.End-c.Start), 0))
			ctx := all[prefix+c.Start-keep : prefix+c.Start]
			if bos >= 0 && keep > 0 && ctx[0] != bos && keep < prefix+c.Start {
				ctx = append([]int{bos}, ctx[1:]...)
			}
			lo, hi := spans[c.Start].Start, spans[c.End-1].End
			sub := make([]rewards.Span, c.End-c.Start)
			for i := range sub {
				s := spans[c.Start+i]
				sub[i] = rewards.Span{Start: min(max(s.Start-lo, 0), hi-lo), End: min(max(s.End-lo, 0), hi-lo)}
			}
			out = append(out, BaselineSample{Context: ctx, IDs: ids[c.Start:c.End], Text: text[lo:hi], Spans: sub})
			if maxSamples > 0 && len(out) == maxSamples {
				return out
			}
		}
	}
	return out
}

// BaselineLevels runs the scorer (the model, adapters off) over samples in batches and gives
// each sample's three levels (NaN levels for a sample without words).
func BaselineLevels(m *model.Model, samples []BaselineSample, text rewards.PPLText, progress func(done, total int)) ([]rewards.Levels, error) {
	levels := make([]rewards.Levels, 0, len(samples))
	for lo := 0; lo < len(samples); lo += baselineBatch {
		batch := samples[lo:min(lo+baselineBatch, len(samples))]
		nlls, err := BaselineNLL(m, batch)
		if err != nil {
			return nil, err
		}
		for i, s := range batch {
			words, err := text.Words(s.Text, s.Spans, nlls[i])
			if err != nil {
				return nil, err
			}
			l, _ := rewards.MultiLevel(words)
			levels = append(levels, l)
		}
		if progress != nil {
			progress(lo+len(batch), len(samples))
		}
	}
	return levels, nil
}

// baselineNLL is nll_i = −log p(t_i | context, t_<i) for each text's tokens.
func BaselineNLL(m *model.Model, texts []BaselineSample) ([][]float64, error) {
	seqs := make([][]int, len(texts))
	for i, s := range texts {
		seqs[i] = append(append(make([]int, 0, len(s.Context)+len(s.IDs)), s.Context...), s.IDs...)
	}
	logp, err := m.LogProbs(seqs, 1, model.AdaptersOff) // the scorer: the frozen base
	if err != nil {
		return nil, err
	}
	out := make([][]float64, len(texts))
	for i, s := range texts {
		out[i] = make([]float64, len(s.IDs))
		for j := range s.IDs {
			out[i][j] = -float64(logp[i][len(s.Context)+j])
		}
	}
	return out, nil
}
