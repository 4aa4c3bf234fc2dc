package rewards

import (
	"fmt"
	"math"

	"rlhfstation/internal/stats"
)

// notApplicable is the value of a reward function that does not apply to a sample.
var notApplicable = math.NaN()

// NotApplicable reports whether a reward value means "not applicable" (NaN).
func NotApplicable(r float64) bool { return math.IsNaN(r) }

// Sample is one completion with everything a reward function may need. Functions read only
// the fields they use; the engine fills what its preset's functions need.
type Sample struct {
	Prompt     string
	Completion string
	Answer     string // the dataset's answer (ground truth); "" when it has none
	IDs        []int  // completion token ids
	Spans      []Span // their bytes in Completion, in order
	NLL        []float64
	// DigitLogits and DigitProbs: see NTLInput.
	DigitLogits func(pos int) []float32
	DigitProbs  func(pos int) []float32
	// CompletionIDs are every generated token id, the stop token included (TRL's
	// completion_ids); IDs leave out tokens without text. Command rewards receive them.
	CompletionIDs []int
	// Columns are the dataset entry's other columns (data.Example.Extra).
	Columns map[string]any
	// Step is the training step the batch belongs to (0 outside a run).
	Step int
}

// Func is a named reward function over a batch. Score returns one value per sample (NaN where
// it does not apply) and the function's own batch metrics (e.g. "ppl/word").
type Func interface {
	Name() string
	Score(samples []Sample) (values []float64, metrics map[string]float64, err error)
}

// Weighted is a reward function with its weight w_f.
type Weighted struct {
	Func   Func
	Weight float64
}

// Result is a scored batch.
type Result struct {
	Total   []float64            // r = Σ_f w_f r_f, NaN-safe: functions that do not apply add nothing
	ByFunc  map[string][]float64 // each function's values (NaN: not applicable)
	Metrics map[string]float64   // rewards/<name>/mean and /std, and the functions' own metrics
}

// Compose scores samples with every function and sums them with their weights (DESIGN §5).
func Compose(funcs []Weighted, samples []Sample) (Result, error) {
	res := Result{
		Total:   make([]float64, len(samples)),
		ByFunc:  map[string][]float64{},
		Metrics: map[string]float64{},
	}
	for _, wf := range funcs {
		name := wf.Func.Name()
		if _, dup := res.ByFunc[name]; dup {
			return Result{}, fmt.Errorf("rewards: reward function %q used twice", name)
		}
		values, metrics, err := wf.Func.Score(samples)
		if err != nil {
			return Result{}, fmt.Errorf("reward %s: %w", name, err)
		}
		if len(values) != len(samples) {
			return Result{}, fmt.Errorf("reward %s: %d values for %d samples", name, len(values), len(samples))
		}
		res.ByFunc[name] = values
		for i, v := range values {
			if !NotApplicable(v) {
				res.Total[i] += wf.Weight * v
			}
		}
		for k, v := range metrics {
			res.Metrics[k] = v
		}
		// After the function's own metrics, so that a command's cannot replace these. A
		// function that applies to no sample of the batch (perplexity without baselines of its
		// kind, correctness without answers) logs none: NaN would read as broken numbers.
		if mean, std := stats.NaNMeanStd(values); !math.IsNaN(mean) {
			res.Metrics["rewards/"+name+"/mean"] = mean
			res.Metrics["rewards/"+name+"/std"] = std
		}
	}
	return res, nil
}

// PPL is the multi-level perplexity reward (DESIGN §6.1), named "ppl".
type PPL struct {
	Weights    Weights
	Baselines  Levels
	Shape      Shape
	Thresholds Thresholds
	Text       PPLText // what is measured; "" is CompletionText
	// Inapplicable says why there are no baselines of the measured kind of text (reasoning
	// asked of data whose answers are bare numbers): every value is then NaN, not applicable,
	// and Baselines are not read.
	Inapplicable string
}

// PPLScore is one completion's multi-level perplexity and reward.
type PPLScore struct {
	Words       []Word  `json:"-"`
	Levels      Levels  `json:"levels"`
	Aggregate   float64 `json:"aggregate"`
	Improvement float64 `json:"improvement"`
	Reward      float64 `json:"reward"`
	Empty       bool    `json:"empty"` // no word: reward 0
}

// Validate checks the weights, baselines, shape and thresholds.
func (p PPL) Validate() error {
	if err := p.Weights.Validate(); err != nil {
		return err
	}
	if _, err := ParsePPLText(string(p.Text)); err != nil {
		return err
	}
	b := p.Baselines
	if p.Inapplicable == "" && (!positiveFinite(b.Word) || !positiveFinite(b.Phrase) || !positiveFinite(b.Sentence)) {
		return fmt.Errorf("perplexity baselines %+v must be finite numbers above 0", b)
	}
	if _, err := ParseShape(string(p.Shape)); err != nil {
		return err
	}
	return p.Thresholds.Validate()
}

// ScoreText scores one completion given its token spans and the scorer's per-token NLLs.
// An Inapplicable PPL gives the levels with a NaN improvement and reward.
func (p PPL) ScoreText(text string, spans []Span, nll []float64) (PPLScore, error) {
	words, err := p.Text.Words(text, spans, nll)
	if err != nil {
		return PPLScore{}, err
	}
	l, ok := MultiLevel(words)
	if !ok {
		sc := PPLScore{Levels: l, Aggregate: math.NaN(), Improvement: math.NaN(), Reward: 0, Empty: true}
		if p.Inapplicable != "" {
			sc.Reward = notApplicable
		}
		return sc, nil
	}
	sc := PPLScore{Words: words, Levels: l, Aggregate: Aggregate(l, p.Weights), Improvement: math.NaN(), Reward: notApplicable}
	if p.Inapplicable == "" {
		sc.Improvement = Improvement(l, p.Baselines, p.Weights)
		sc.Reward = p.Shape.Reward(sc.Improvement, p.Thresholds)
	}
	return sc, nil
}

// Name is "ppl".
func (PPL) Name() string { return "ppl" }

// Score gives each sample its reward, and the batch metrics: ppl/word, ppl/phrase,
// ppl/sentence and ppl/aggregate are geometric means over the non-empty completions (as the
// baselines aggregate their samples, and so that one wild completion does not swamp the
// batch), ppl/improvement is the improvement of those batch levels over the baselines, and
// rewards/ppl/empty counts the completions without a word. An Inapplicable PPL gives NaN
// values and no metrics.
func (p PPL) Score(samples []Sample) ([]float64, map[string]float64, error) {
	values := make([]float64, len(samples))
	if p.Inapplicable != "" {
		for i := range values {
			values[i] = notApplicable
		}
		return values, nil, nil
	}
	var logs [3][]float64
	empty := 0
	for i, s := range samples {
		sc, err := p.ScoreText(s.Completion, s.Spans, s.NLL)
		if err != nil {
			return nil, nil, fmt.Errorf("sample %d: %w", i, err)
		}
		values[i] = sc.Reward
		if sc.Empty {
			empty++
			continue
		}
		for k, v := range []float64{sc.Levels.Word, sc.Levels.Phrase, sc.Levels.Sentence} {
			logs[k] = append(logs[k], math.Log(v))
		}
	}
	metrics := map[string]float64{"rewards/ppl/empty": float64(empty)}
	if len(logs[0]) == 0 {
		// No completion has a word (an untrained model sampling ids the tokenizer has no
		// text for, say): the levels have nothing to measure, which is not a NaN to alert on.
		return values, metrics, nil
	}
	var batch Levels
	for k, dst := range []*float64{&batch.Word, &batch.Phrase, &batch.Sentence} {
		m, _ := stats.NaNMeanStd(logs[k])
		*dst = math.Exp(m)
	}
	metrics["ppl/word"], metrics["ppl/phrase"], metrics["ppl/sentence"] = batch.Word, batch.Phrase, batch.Sentence
	metrics["ppl/aggregate"] = Aggregate(batch, p.Weights)
	metrics["ppl/improvement"] = Improvement(batch, p.Baselines, p.Weights)
	return values, metrics, nil
}

// Name is "ntl".
func (NTL) Name() string { return "ntl" }

// Score gives each sample its ntl_reward (NaN where not applicable), and the batch metrics
// ntl/loss and ntl/reward (means over applicable samples), ntl/total_digits,
// ntl/correct_digits (sums), ntl/digit_accuracy (their ratio), ntl/temperature (tau), and in
// hybrid mode ntl/answer_loss and ntl/confidence_loss (means where present).
func (n NTL) Score(samples []Sample) ([]float64, map[string]float64, error) {
	values := make([]float64, len(samples))
	losses := make([]float64, len(samples))
	answer, confidence := make([]float64, len(samples)), make([]float64, len(samples))
	total, correct := 0, 0
	for i, s := range samples {
		r, err := n.ScoreCompletion(NTLInput{Text: s.Completion, IDs: s.IDs, Spans: s.Spans, Answer: s.Answer, DigitLogits: s.DigitLogits, DigitProbs: s.DigitProbs})
		if err != nil {
			return nil, nil, fmt.Errorf("sample %d: %w", i, err)
		}
		values[i], losses[i] = r.Reward, r.Loss
		answer[i], confidence[i] = r.AnswerLoss, r.ConfidenceLoss
		total += r.Total
		correct += r.Correct
	}
	metrics := map[string]float64{
		"ntl/total_digits":   float64(total),
		"ntl/correct_digits": float64(correct),
		"ntl/temperature":    n.Tau,
	}
	if total > 0 {
		metrics["ntl/digit_accuracy"] = float64(correct) / float64(total)
	}
	metrics["ntl/loss"], _ = stats.NaNMeanStd(losses)
	metrics["ntl/reward"], _ = stats.NaNMeanStd(values)
	if n.Mode == HybridMode {
		metrics["ntl/answer_loss"], _ = stats.NaNMeanStd(answer)
		metrics["ntl/confidence_loss"], _ = stats.NaNMeanStd(confidence)
	}
	for k, v := range metrics {
		if math.IsNaN(v) { // no sample it applies to: absent, not a NaN the monitor alerts on
			delete(metrics, k)
		}
	}
	return values, metrics, nil
}

// Correctness is the answer-correctness reward (DESIGN §6.3), named "correctness".
type Correctness struct{ Extraction Extraction }

// Name is "correctness".
func (Correctness) Name() string { return "correctness" }

// Score is 1 for an exact numeric match with the sample's ground truth, else 0; NaN for
// samples without an answer.
func (c Correctness) Score(samples []Sample) ([]float64, map[string]float64, error) {
	values := make([]float64, len(samples))
	for i, s := range samples {
		values[i] = CorrectnessReward(s.Completion, GroundTruth(s.Answer), c.Extraction)
	}
	return values, nil, nil
}

// Format is the `#### N` format reward, named "format".
type Format struct{}

// Name is "format".
func (Format) Name() string { return "format" }

// Score is 1 for a completion with a well-formed `#### N` line, else 0.
func (Format) Score(samples []Sample) ([]float64, map[string]float64, error) {
	values := make([]float64, len(samples))
	for i, s := range samples {
		values[i] = FormatReward(s.Completion)
	}
	return values, nil, nil
}
