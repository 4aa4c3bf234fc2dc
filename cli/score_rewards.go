package cli

// The preset rewards of `rlhfstation score --preset P --baselines F` (issue 5): for each
// scored text, P_word, P_phrase, P_sentence, the aggregate, the improvement over the
// baselines and the reward the preset's perplexity reward gives it, plus per-word NLLs.
//
// Wiring into score.go:
//
//	rf := addScoreRewardFlags(fs)                 // --preset, --baselines, --accept-baselines
//	...after loading the model folder dir:
//	rs, err := rf.open(dir, stderr)               // nil, nil when neither flag is given
//	...for each text, with the textScore's LogProbs (nil where a token has no context):
//	r, err := rs.score(tok, text, logProbs)       // *textRewards, JSON field "rewards"
//	printTextRewards(w, r)                        // the human lines

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"rlhfstation/engine/tokenizer"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// scoreRewardFlags are the score command's reward flags.
type scoreRewardFlags struct {
	preset, baselines *string
	accept            *bool
}

func addScoreRewardFlags(fs *flag.FlagSet) scoreRewardFlags {
	return scoreRewardFlags{
		preset:    fs.String("preset", "", "also show the perplexity levels, aggregate, improvement and reward under preset `P` (story, technical, code, math or a user preset); default story when --baselines is given"),
		baselines: fs.String("baselines", "", "baselines.json `FILE` (from rlhfstation baseline) for the improvement and reward"),
		accept:    fs.Bool("accept-baselines", false, "use baselines made with another model or tokenizer"),
	}
}

// open loads the preset and baselines for the model folder dir; nil when neither was asked.
// Warnings go to stderr.
func (f scoreRewardFlags) open(dir string, stderr io.Writer) (*scoreRewards, error) {
	if *f.preset == "" && *f.baselines == "" {
		return nil, nil
	}
	return newScoreRewards(dir, *f.preset, *f.baselines, *f.accept, stderr)
}

// scoreRewards scores texts under a preset's perplexity reward.
type scoreRewards struct {
	preset    presets.Preset
	baselines *rewards.Baselines // nil: levels and aggregate only
	ppl       rewards.PPL
}

// newScoreRewards loads preset name (default story) and, when baselinesPath is set, the
// baselines, refusing ones made with another model or tokenizer unless accept; warnings go
// to stderr.
func newScoreRewards(modelDir, name, baselinesPath string, accept bool, stderr io.Writer) (*scoreRewards, error) {
	if name == "" {
		name = presets.Default
	}
	p, err := presets.Load(name)
	if err != nil {
		return nil, err
	}
	if p.PPL == nil {
		return nil, fmt.Errorf("preset %s has no perplexity reward ([ppl]) to score texts with", name)
	}
	s := &scoreRewards{preset: p, ppl: rewards.PPL{Weights: p.PPL.Levels, Shape: p.PPL.Shape, Thresholds: p.PPL.Thresholds}}
	if baselinesPath == "" {
		return s, nil
	}
	b, err := rewards.LoadBaselines(baselinesPath)
	if err != nil {
		return nil, err
	}
	modelHash, tokHash, err := rewards.FolderHashes(modelDir)
	if err != nil {
		return nil, err
	}
	warning, err := b.Check(modelHash, tokHash, accept)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", baselinesPath, err)
	}
	if warning != "" {
		fmt.Fprintln(stderr, "rlhfstation: warning:", warning)
	}
	s.baselines = &b
	s.ppl.Baselines = b.Levels
	return s, nil
}

// textRewards is one text's multi-level perplexity under the preset. Values are null where
// they do not exist: every level of a text without words, the improvement and the reward
// without baselines.
type textRewards struct {
	Preset      string    `json:"preset"`
	Word        *float64  `json:"p_word"`
	Phrase      *float64  `json:"p_phrase"`
	Sentence    *float64  `json:"p_sentence"`
	Aggregate   *float64  `json:"aggregate"`
	Improvement *float64  `json:"improvement"`
	Reward      *float64  `json:"reward"`
	Empty       bool      `json:"empty"` // no word: reward 0
	Words       []wordNLL `json:"words"`
}

// wordNLL is one word and NLL(w), the sum of its tokens' NLLs.
type wordNLL struct {
	Word   string  `json:"word"`
	NLL    float64 `json:"nll"`
	Tokens int     `json:"tokens"`
}

// score computes a text's rewards from its tokens' log-probabilities as the score command
// has them: logProbs[i] = log p(token i | everything before it) for the ids of
// tok.Encode(text, false), nil for a token without context (left out: its bytes still
// belong to their word, with no NLL).
func (s *scoreRewards) score(tok *tokenizer.Tokenizer, text string, logProbs []*float64) (*textRewards, error) {
	enc := tok.Encode(text, false)
	if len(enc.IDs) != len(logProbs) {
		return nil, fmt.Errorf("%d log-probabilities for %d tokens of %q", len(logProbs), len(enc.IDs), text)
	}
	var spans []rewards.Span
	var nll []float64
	for i, lp := range logProbs {
		if lp == nil {
			continue
		}
		spans = append(spans, rewards.Span{Start: enc.Offsets[i][0], End: enc.Offsets[i][1]})
		nll = append(nll, -*lp)
	}
	sc, err := s.ppl.ScoreText(text, spans, nll)
	if err != nil {
		return nil, err
	}
	r := &textRewards{Preset: s.preset.Name, Empty: sc.Empty, Words: []wordNLL{}}
	for _, w := range sc.Words {
		r.Words = append(r.Words, wordNLL{Word: text[w.Start:w.End], NLL: w.NLL, Tokens: w.Tokens})
	}
	if sc.Empty {
		if s.baselines != nil {
			r.Reward = finite(0)
		}
		return r, nil
	}
	r.Word, r.Phrase, r.Sentence = finite(sc.Levels.Word), finite(sc.Levels.Phrase), finite(sc.Levels.Sentence)
	r.Aggregate = finite(sc.Aggregate)
	if s.baselines != nil {
		r.Improvement, r.Reward = finite(sc.Improvement), finite(sc.Reward)
	}
	return r, nil
}

// finite points at x, or is nil for NaN and ±Inf (which JSON cannot hold).
func finite(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// printTextRewards writes the human lines of one text's rewards.
func printTextRewards(w io.Writer, r *textRewards) {
	if r == nil {
		return
	}
	show := func(p *float64, format string) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf(format, *p)
	}
	if r.Empty {
		fmt.Fprintf(w, "preset %s: no word to score (reward %s)\n", r.Preset, show(r.Reward, "%.2f"))
		return
	}
	fmt.Fprintf(w, "preset %s: P_word %s  P_phrase %s  P_sentence %s  aggregate %s",
		r.Preset, show(r.Word, "%.4g"), show(r.Phrase, "%.4g"), show(r.Sentence, "%.4g"), show(r.Aggregate, "%.4g"))
	if r.Reward != nil {
		imp := "—"
		if r.Improvement != nil {
			imp = fmt.Sprintf("%+.2f%%", 100**r.Improvement)
		}
		fmt.Fprintf(w, "  improvement %s  reward %s", imp, show(r.Reward, "%.2f"))
	} else {
		fmt.Fprint(w, "  (no --baselines: no improvement or reward)")
	}
	fmt.Fprintln(w)
	parts := make([]string, len(r.Words))
	for i, wd := range r.Words {
		parts[i] = fmt.Sprintf("%s:%.2f", wd.Word, wd.NLL)
	}
	fmt.Fprintf(w, "word NLLs: %s\n", strings.Join(parts, " "))
}
