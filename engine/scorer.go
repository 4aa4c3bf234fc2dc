package engine

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// Scorer gives a preset's rewards to (prompt, completion) pairs outside a run — what
// `serve-reward` answers and `score --preset` prints. The model is the scorer a run uses (no
// adapters): each completion is conditioned on its prompt, and the perplexity rewards read its
// per-token NLL. NTL, which in a run reads the policy's logits at sampling time, reads this
// model's logits at each completion position. Score may be called from several goroutines;
// batches run one at a time.
type Scorer struct {
	model  *model.Model
	tok    *tokenizer.Tokenizer
	funcs  []rewards.Weighted
	digits *rewards.DigitVocab
	mu     sync.Mutex
}

// Text is one completion to score.
type Text struct {
	Prompt string
	// Rendered marks a prompt made by a chat template: it is encoded without adding special
	// tokens again (EncodePrompt).
	Rendered   bool
	Completion string
	Answer     string         // ground truth (already normalised, see rewards.GroundTruth); "" for none
	Columns    map[string]any // passed to command rewards
}

// NewScorer builds the preset's reward functions over m and tok (command rewards are started:
// Close ends them). baselines are needed when the preset has a perplexity reward.
func NewScorer(m *model.Model, tok *tokenizer.Tokenizer, p presets.Preset, baselines rewards.Levels) (*Scorer, error) {
	s := &Scorer{model: m, tok: tok}
	if p.NTL != nil && p.NTL.Weight > 0 {
		var err error
		if s.digits, err = rewards.FindDigitTokens(usableVocab(m, tok), tok.TokenBytes, tok.IsSpecial); err != nil {
			return nil, fmt.Errorf("preset %s uses NTL: %w", p.Name, err)
		}
	}
	funcs, err := p.Funcs(baselines, s.digits)
	if err != nil {
		return nil, err
	}
	if err := rewards.StartCommands(funcs); err != nil {
		return nil, err
	}
	s.funcs = funcs
	return s, nil
}

// Funcs are the weighted reward functions, in the order of the preset.
func (s *Scorer) Funcs() []rewards.Weighted { return s.funcs }

// Close ends the command rewards' processes.
func (s *Scorer) Close() { rewards.CloseCommands(s.funcs) }

// Score scores a batch: one pass of the model over every prompt + completion.
func (s *Scorer) Score(texts []Text) (rewards.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(texts) == 0 {
		return rewards.Result{ByFunc: map[string][]float64{}, Metrics: map[string]float64{}}, nil
	}
	samples := make([]rewards.Sample, len(texts))
	seqs := make([][]int, len(texts))
	first := make([]int, len(texts)) // where each sequence's completion starts
	for i, t := range texts {
		seqs[i], first[i], samples[i] = s.prepare(t)
	}
	lps, digits, err := s.logProbs(seqs, first)
	if err != nil {
		return rewards.Result{}, err
	}
	for i := range samples {
		smp := &samples[i]
		// Only tokens with a context have an NLL (and digit logits): the first token of a
		// completion with an empty prompt and no BOS is left out, as `score` leaves it out.
		var ids []int
		var spans []rewards.Span
		var nll []float64
		var dl [][]float32
		for k, id := range smp.IDs {
			pos := first[i] + k
			if pos == 0 {
				continue
			}
			ids = append(ids, id)
			spans = append(spans, smp.Spans[k])
			nll = append(nll, -float64(lps[i][pos]))
			if digits != nil {
				dl = append(dl, digits[i][k])
			}
		}
		smp.IDs, smp.Spans, smp.NLL = ids, spans, nll
		if digits != nil {
			smp.DigitLogits = func(pos int) []float32 {
				if pos < len(dl) {
					return dl[pos]
				}
				return nil
			}
		}
	}
	return rewards.Compose(s.funcs, samples)
}

// PromptContext is what completions of a plain-text prompt are conditioned on: its tokens
// with the tokenizer's special tokens, as a run encodes plain prompts (EncodePrompt).
func PromptContext(m *model.Model, tok *tokenizer.Tokenizer, prompt string) []int {
	return EncodePrompt(m, tok, prompt, false)
}

// prepare tokenizes a text as a run sees it: the prompt with the tokenizer's special tokens
// (the config's BOS when the tokenizer adds none), then the completion's tokens. Special
// tokens in the completion (an end-of-text a trainer left in) carry no text, as in a run;
// a sequence longer than the model's context loses prompt tokens from its front (the BOS
// kept), then completion tokens from its end.
func (s *Scorer) prepare(t Text) (seq []int, first int, smp rewards.Sample) {
	prompt := EncodePrompt(s.model, s.tok, t.Prompt, t.Rendered)
	all := s.tok.Encode(t.Completion, false).IDs
	limit := s.model.Config.Context()
	if len(all) > limit-1 {
		all = all[:limit-1]
	}
	if room := limit - len(all); len(prompt) > room {
		bos := s.model.Config.BOS
		if bos >= 0 && prompt[0] == bos && room > 1 {
			prompt = append([]int{bos}, prompt[len(prompt)-room+1:]...)
		} else {
			prompt = prompt[len(prompt)-room:]
		}
	}
	var text strings.Builder
	var ids []int
	var spans []rewards.Span
	for _, id := range all {
		b := s.tok.TokenBytes(id)
		if b == nil {
			continue
		}
		spans = append(spans, rewards.Span{Start: text.Len(), End: text.Len() + len(b)})
		text.Write(b)
		ids = append(ids, id)
	}
	// Keep only text tokens in the sequence too, so that position k of the completion is
	// text token k (special tokens between text tokens would shift the context otherwise).
	seq = append(append(make([]int, 0, len(prompt)+len(ids)), prompt...), ids...)
	return seq, len(prompt), rewards.Sample{Prompt: t.Prompt, Completion: text.String(), Answer: t.Answer,
		IDs: ids, Spans: spans, CompletionIDs: all, Columns: t.Columns}
}

// logProbs runs the model once over the sequences: the log-probability of every token and,
// when NTL is used, the logits over the digit tokens that predicted each completion token.
func (s *Scorer) logProbs(seqs [][]int, first []int) ([][]float32, [][][]float32, error) {
	if s.digits == nil {
		lps, err := s.model.LogProbs(seqs, 1, model.AdaptersOn)
		return lps, nil, err
	}
	digits := make([][][]float32, len(seqs))
	for i := range seqs {
		digits[i] = make([][]float32, len(seqs[i])-first[i])
	}
	lps, err := s.model.LogProbsSeeing(seqs, 1, model.AdaptersOn, func(i, pos int, logits []float32) {
		// The logits after token pos predict token pos+1: completion token pos+1-first.
		if k := pos + 1 - first[i]; k >= 0 && k < len(digits[i]) {
			digits[i][k] = s.digits.Gather(nil, logits)
		}
	})
	return lps, digits, err
}

// BuiltinBaselines are the perplexity baselines a run without data computes: over the
// reference texts of the built-in prompts of the preset's domain (with the default seed).
func BuiltinBaselines(m *model.Model, tok *tokenizer.Tokenizer, modelDir string, p presets.Preset, progress func(done, total int)) (rewards.Baselines, error) {
	ps, err := builtinPrompts(p.Root, config.Default().Seed)
	if err != nil {
		return rewards.Baselines{}, err
	}
	b, err := ComputeBaselines(m, tok, referenceTexts(ps, p.PPL.Text), BaselineOptions{Format: data.PromptJSONL, ChunkTokens: BaselineChunkTokens, MaxSamples: 512, Progress: progress, Text: p.PPL.Text})
	if err != nil {
		return rewards.Baselines{}, fmt.Errorf("computing baselines: %w", err)
	}
	if b.ModelHash, b.TokenizerHash, err = rewards.FolderHashes(modelDir); err != nil {
		return rewards.Baselines{}, err
	}
	b.Created = time.Now().UTC().Truncate(time.Second)
	b.Source = "built-in " + p.Root + " references"
	return b, nil
}
