package cli

// The preset rewards of `rlhfstation score --preset P --baselines F` (issue 5): for each
// scored text, P_word, P_phrase, P_sentence, the aggregate, the improvement over the
// baselines and the reward the preset's perplexity reward gives it, plus per-word NLLs; with
// baselines (or a preset without a perplexity reward) also every reward function's value and
// the weighted total, from engine.Scorer as serve-reward computes them (issue 17).
//
// Wiring into score.go:
//
//	rf := addScoreRewardFlags(fs)              // --preset, --baselines, --answer, --accept-baselines
//	rs, err := rf.open(dir, m, tok, stderr)    // nil, nil when neither --preset nor --baselines
//	defer rs.close()
//	r, err := rs.score(tok, text, logProbs)    // per text: *textRewards, JSON field "rewards"
//	err = rs.scoreAll(prompt, rendered, results)         // sets each text's total and functions
//	printTextRewards(w, r)                     // the human lines

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

// scoreRewardFlags are the score command's reward flags.
type scoreRewardFlags struct {
	preset, baselines, answer *string
	accept                    *bool
}

func addScoreRewardFlags(fs *flag.FlagSet) scoreRewardFlags {
	return scoreRewardFlags{
		preset:    fs.String("preset", "", "also show the perplexity levels, aggregate, improvement and reward under preset `P` (story, technical, code, math or a user preset); default story when --baselines is given"),
		baselines: fs.String("baselines", "", "baselines.json `FILE` (from rlhfstation baseline) for the improvement and reward"),
		answer:    fs.String("answer", "", "ground truth `A` of the correctness and NTL rewards (a number, or text ending in #### N)"),
		accept:    fs.Bool("accept-baselines", false, "use baselines made with another model or tokenizer"),
	}
}

// open loads the preset and baselines for the model folder dir; nil when neither was asked.
// Warnings go to stderr.
func (f scoreRewardFlags) open(dir string, m *model.Model, tok *tokenizer.Tokenizer, stderr io.Writer) (*scoreRewards, error) {
	if *f.preset == "" && *f.baselines == "" {
		return nil, nil
	}
	s, err := newScoreRewards(dir, *f.preset, *f.baselines, *f.accept, stderr)
	if err != nil {
		return nil, err
	}
	s.answer = rewards.GroundTruth(*f.answer)
	// Every function's value needs the baselines when the preset has a perplexity reward.
	if s.baselines != nil || s.preset.PPL == nil || s.preset.PPL.Weight == 0 {
		var levels rewards.Levels
		if s.baselines != nil {
			levels = s.baselines.Levels
		}
		if s.scorer, err = engine.NewScorer(m, tok, s.preset, levels); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// scoreRewards scores texts under a preset's rewards.
type scoreRewards struct {
	preset    presets.Preset
	baselines *rewards.Baselines // nil: levels and aggregate only
	ppl       rewards.PPL
	scorer    *engine.Scorer // every function of the preset; nil without baselines
	answer    string
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
	s := &scoreRewards{preset: p}
	if p.PPL != nil {
		s.ppl = rewards.PPL{Weights: p.PPL.Levels, Shape: p.PPL.Shape, Thresholds: p.PPL.Thresholds, Text: p.PPL.Text}
	}
	if baselinesPath == "" {
		return s, nil
	}
	b, err := loadBaselines(modelDir, baselinesPath, p, accept, stderr)
	if err != nil {
		return nil, err
	}
	s.baselines = b
	s.ppl.Baselines = b.Levels
	return s, nil
}

// loadBaselines reads a baselines.json, refusing baselines made with another model or
// tokenizer than the folder's unless accept; a warning goes to stderr.
func loadBaselines(modelDir, path string, p presets.Preset, accept bool, stderr io.Writer) (*rewards.Baselines, error) {
	b, err := rewards.LoadBaselines(path)
	if err != nil {
		return nil, err
	}
	modelHash, tokHash, err := rewards.FolderHashes(modelDir)
	if err != nil {
		return nil, err
	}
	warning, err := b.Check(modelHash, tokHash, accept)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if warning != "" {
		fmt.Fprintln(stderr, "rlhfstation: warning:", warning)
	}
	if p.PPL != nil {
		if warning, err = b.CheckText(p.PPL.Text, accept); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		} else if warning != "" {
			fmt.Fprintln(stderr, "rlhfstation: warning:", warning)
		}
	}
	return &b, nil
}

func (s *scoreRewards) close() {
	if s.scorer != nil {
		s.scorer.Close()
	}
}

// scoreAll gives each result the preset's total reward and every function's value, as
// serve-reward computes them for the same prompt and texts.
func (s *scoreRewards) scoreAll(prompt string, rendered bool, results []textScore) error {
	if s.scorer == nil {
		return nil
	}
	texts := make([]engine.Text, len(results))
	for i, r := range results {
		texts[i] = engine.Text{Prompt: prompt, Rendered: rendered, Completion: r.Text, Answer: s.answer}
	}
	res, err := s.scorer.Score(texts)
	if err != nil {
		return err
	}
	for i := range results {
		r := results[i].Rewards
		r.Total = finite(res.Total[i])
		r.Functions = map[string]*float64{}
		for _, f := range s.scorer.Funcs() {
			r.Functions[f.Func.Name()] = finite(res.ByFunc[f.Func.Name()][i])
		}
		r.weights = s.scorer.Funcs()
	}
	return nil
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
	// Total is the preset's reward r = Σ_f w_f r_f and Functions each function's r_f (null:
	// not applicable), present with baselines or for a preset without a perplexity reward.
	Total     *float64            `json:"total,omitempty"`
	Functions map[string]*float64 `json:"functions,omitempty"`
	weights   []rewards.Weighted
	noPPL     bool // the preset has no perplexity reward
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
	if s.preset.PPL == nil {
		return &textRewards{Preset: s.preset.Name, Words: []wordNLL{}, noPPL: true}, nil
	}
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
	defer func() {
		if r.Total == nil {
			return
		}
		parts := make([]string, len(r.weights))
		for i, f := range r.weights {
			parts[i] = fmt.Sprintf("%s %s ×%s", f.Func.Name(), show(r.Functions[f.Func.Name()], "%.4g"), num(f.Weight))
		}
		fmt.Fprintf(w, "preset %s reward %.4g = %s\n", r.Preset, *r.Total, strings.Join(parts, " + "))
	}()
	if r.noPPL {
		return
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
