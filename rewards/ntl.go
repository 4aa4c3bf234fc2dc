package rewards

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// ErrNoDigitTokens is returned for a vocabulary without single-digit tokens.
var ErrNoDigitTokens = errors.New("this tokenizer has no single-digit tokens: NTL needs them")

// DigitVocab lists a vocabulary's digit tokens (DESIGN §6.2): entries whose text, stripped of
// leading spaces, is exactly one ASCII digit. Several tokens may share a digit ("7" and " 7").
// Per-position digit logits are given in the order of IDs.
type DigitVocab struct {
	IDs    []int // vocabulary ids of the digit tokens, ascending
	Digits []int // Digits[k] is the digit value of IDs[k]
	index  map[int]int
}

// FindDigitTokens scans ids 0..vocabSize-1. tokenBytes gives a token's decoded bytes (what it
// adds to the text, e.g. " 7" for GPT-2's "Ġ7"); special, when not nil, marks special tokens,
// which never count.
func FindDigitTokens(vocabSize int, tokenBytes func(id int) []byte, special func(id int) bool) (*DigitVocab, error) {
	v := &DigitVocab{index: map[int]int{}}
	for id := 0; id < vocabSize; id++ {
		if special != nil && special(id) {
			continue
		}
		b := strings.TrimLeft(string(tokenBytes(id)), " ")
		if len(b) == 1 && b[0] >= '0' && b[0] <= '9' {
			v.index[id] = len(v.IDs)
			v.IDs = append(v.IDs, id)
			v.Digits = append(v.Digits, int(b[0]-'0'))
		}
	}
	if len(v.IDs) == 0 {
		return nil, ErrNoDigitTokens
	}
	return v, nil
}

// NewDigitVocab builds a DigitVocab from known ids and their digits (tests, saved state).
func NewDigitVocab(ids, digits []int) (*DigitVocab, error) {
	if len(ids) != len(digits) {
		return nil, fmt.Errorf("rewards: %d digit token ids but %d digits", len(ids), len(digits))
	}
	if len(ids) == 0 {
		return nil, ErrNoDigitTokens
	}
	v := &DigitVocab{IDs: append([]int(nil), ids...), Digits: append([]int(nil), digits...), index: map[int]int{}}
	for k, id := range v.IDs {
		if v.Digits[k] < 0 || v.Digits[k] > 9 {
			return nil, fmt.Errorf("rewards: digit token %d has digit %d", id, v.Digits[k])
		}
		if _, dup := v.index[id]; dup {
			return nil, fmt.Errorf("rewards: digit token %d listed twice", id)
		}
		v.index[id] = k
	}
	return v, nil
}

// Index gives the position of a token id in IDs, or false when it is not a digit token.
func (v *DigitVocab) Index(id int) (int, bool) {
	k, ok := v.index[id]
	return k, ok
}

// Gather copies the digit tokens' logits out of a full vocabulary row into dst (grown as
// needed) and returns it: what the engine keeps per position instead of the whole row.
func (v *DigitVocab) Gather(dst, row []float32) []float32 {
	dst = append(dst[:0], make([]float32, len(v.IDs))...)
	for k, id := range v.IDs {
		dst[k] = row[id]
	}
	return dst
}

// DigitProbs is p(d) of DESIGN §6.2: the softmax over the digit-token logits (in IDs order),
// summed per digit value.
func (v *DigitVocab) DigitProbs(logits []float32) ([10]float64, error) {
	var p [10]float64
	if len(logits) != len(v.IDs) {
		return p, fmt.Errorf("rewards: %d digit logits for %d digit tokens", len(logits), len(v.IDs))
	}
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l))
	}
	if math.IsNaN(maxL) || math.IsInf(maxL, 0) {
		return p, fmt.Errorf("rewards: non-finite digit logits")
	}
	sum := 0.0
	for k, l := range logits {
		e := math.Exp(float64(l) - maxL)
		p[v.Digits[k]] += e
		sum += e
	}
	for d := range p {
		p[d] /= sum
	}
	return p, nil
}

// CostGrad is loss l at a position with target digit y, from the digit-token logits there (in
// IDs order), and adds its derivative with respect to each logit to grad. Through the softmax
// over the digit tokens, ∂cost/∂z_k = p_k·(g(d_k) − Σ_j p_j·g(d_j)) with g(d) = ∂cost/∂p(d):
// 2(m − y)·d for mse (m = Σ_d d·p(d)), |d − y| for wasserstein. NTL as an auxiliary loss
// (DESIGN §6.2) sends this into the LM head.
func (v *DigitVocab) CostGrad(l NTLLoss, logits []float32, y int, grad []float64) (float64, error) {
	p, err := v.DigitProbs(logits)
	if err != nil {
		return 0, err
	}
	if len(grad) != len(logits) {
		return 0, fmt.Errorf("rewards: %d gradient slots for %d digit logits", len(grad), len(logits))
	}
	var g [10]float64
	for d := range g {
		if l == MSE {
			mean := 0.0
			for e, pe := range p {
				mean += float64(e) * pe
			}
			g[d] = 2 * (mean - float64(y)) * float64(d)
		} else {
			g[d] = math.Abs(float64(d - y))
		}
	}
	// Per-token probabilities, as DigitProbs forms them.
	maxL := math.Inf(-1)
	for _, z := range logits {
		maxL = math.Max(maxL, float64(z))
	}
	pk := make([]float64, len(logits))
	sum := 0.0
	for k, z := range logits {
		pk[k] = math.Exp(float64(z) - maxL)
		sum += pk[k]
	}
	avg := 0.0
	for k := range pk {
		pk[k] /= sum
		avg += pk[k] * g[v.Digits[k]]
	}
	for k := range pk {
		grad[k] += pk[k] * (g[v.Digits[k]] - avg)
	}
	return l.Cost(p, y), nil
}

// NTLMode chooses the positions NTL scores.
type NTLMode string

// The NTL modes of DESIGN §6.2.
const (
	FinalAnswerMode NTLMode = "final_answer" // the answer's digits against the ground truth
	AllTokensMode   NTLMode = "all_tokens"   // every digit token against the sampled digit
	// HybridMode mixes the two: the answer's digits against the ground truth, and every other
	// digit token of the completion against its sampled digit as a confidence term,
	// ntl_loss = (1 − w)·answer + w·confidence with w = NTL.ConfidenceWeight.
	HybridMode NTLMode = "hybrid"
)

// NTLLoss is the per-position distance between p(d) and a target digit.
type NTLLoss string

// The NTL losses of DESIGN §6.2.
const (
	MSE         NTLLoss = "mse"
	Wasserstein NTLLoss = "wasserstein"
)

// ParseNTLMode and ParseNTLLoss check names from presets.
func ParseNTLMode(s string) (NTLMode, error) {
	switch NTLMode(s) {
	case FinalAnswerMode, AllTokensMode, HybridMode:
		return NTLMode(s), nil
	}
	return "", fmt.Errorf("unknown NTL mode %q (want \"final_answer\", \"all_tokens\" or \"hybrid\")", s)
}

// ParseNTLLoss checks an NTL loss name.
func ParseNTLLoss(s string) (NTLLoss, error) {
	switch NTLLoss(s) {
	case MSE, Wasserstein:
		return NTLLoss(s), nil
	}
	return "", fmt.Errorf("unknown NTL loss %q (want \"mse\" or \"wasserstein\")", s)
}

// Cost is the loss at one position with target digit y.
func (l NTLLoss) Cost(p [10]float64, y int) float64 {
	if l == MSE {
		return ntlMSE(p, y)
	}
	return ntlWasserstein(p, y)
}

// Max is the cost of a target digit the completion lacks: 81 for mse, 9 for wasserstein.
func (l NTLLoss) Max() float64 {
	if l == MSE {
		return 81
	}
	return 9
}

// ntlMSE is (Σ_d d·p(d) − y)².
func ntlMSE(p [10]float64, y int) float64 {
	mean := 0.0
	for d, pd := range p {
		mean += float64(d) * pd
	}
	return (mean - float64(y)) * (mean - float64(y))
}

// ntlWasserstein is Σ_d p(d)·|d − y|.
func ntlWasserstein(p [10]float64, y int) float64 {
	w := 0.0
	for d, pd := range p {
		w += pd * math.Abs(float64(d-y))
	}
	return w
}

func argmaxDigit(p [10]float64) int {
	best := 0
	for d := 1; d < 10; d++ {
		if p[d] > p[best] {
			best = d
		}
	}
	return best
}

// NTL scores number tokens (DESIGN §6.2).
type NTL struct {
	Vocab *DigitVocab
	Mode  NTLMode
	Loss  NTLLoss
	Tau   float64 // ntl_reward = exp(−ntl_loss / tau)
	// ConfidenceWeight is hybrid mode's weight w of the confidence term, in [0, 1].
	ConfidenceWeight float64
	// Schedule, when set, moves Tau over the run (At gives the NTL of a point of the run).
	Schedule *TauSchedule
}

// NTLInput is one completion as NTL needs it.
type NTLInput struct {
	Text   string
	IDs    []int  // token ids of the completion
	Spans  []Span // their bytes in Text
	Answer string // ground truth (final_answer mode); "" when the data has none
	// DigitLogits gives the policy's logits over Vocab.IDs at completion position pos (the
	// distribution token pos was sampled from). It is called only at positions whose token
	// is a digit token, so the engine may keep just those rows.
	DigitLogits func(pos int) []float32
	// DigitProbs, when set, gives p(d) for d = 0…9 at pos instead, as the generator formed
	// it from the same logits on its device (only 10 values a position cross to the host).
	DigitProbs func(pos int) []float32
}

// DigitRows adapts per-position rows (nil where not kept) to NTLInput.DigitLogits.
func DigitRows(rows [][]float32) func(pos int) []float32 {
	return func(pos int) []float32 {
		if pos < 0 || pos >= len(rows) {
			return nil
		}
		return rows[pos]
	}
}

// NTLResult is one completion's NTL. Applicable is false (and the values NaN) when there is
// nothing to score: no ground truth in final_answer and hybrid modes, no digit token in
// all_tokens mode. In hybrid mode Total and Correct count the answer's positions, and
// AnswerLoss and ConfidenceLoss are the two terms (ConfidenceLoss NaN without other digits,
// and then Loss = AnswerLoss); in the other modes both are NaN.
type NTLResult struct {
	Loss           float64 `json:"loss"`
	Reward         float64 `json:"reward"`
	Total          int     `json:"total_digits"`   // scored positions
	Correct        int     `json:"correct_digits"` // positions whose argmax digit is the target
	Applicable     bool    `json:"applicable"`
	AnswerLoss     float64 `json:"-"`
	ConfidenceLoss float64 `json:"-"`
}

// Accuracy is Correct / Total.
func (r NTLResult) Accuracy() float64 {
	if r.Total == 0 {
		return math.NaN()
	}
	return float64(r.Correct) / float64(r.Total)
}

// Validate checks the configuration.
func (n NTL) Validate() error {
	if n.Vocab == nil {
		return errors.New("NTL has no digit vocabulary")
	}
	if _, err := ParseNTLMode(string(n.Mode)); err != nil {
		return err
	}
	if _, err := ParseNTLLoss(string(n.Loss)); err != nil {
		return err
	}
	if !(n.Tau > 0) || math.IsInf(n.Tau, 0) {
		return fmt.Errorf("NTL tau = %v: it must be a finite number above 0", n.Tau)
	}
	if !(n.ConfidenceWeight >= 0 && n.ConfidenceWeight <= 1) {
		return fmt.Errorf("NTL confidence_weight = %v: it must be in [0, 1]", n.ConfidenceWeight)
	}
	if n.Schedule != nil {
		return n.Schedule.Validate()
	}
	return nil
}

// At is the NTL of a point of the run (progress 0 at the first step, 1 at the last): its
// tau from the schedule. Without a schedule it is n itself.
func (n NTL) At(progress float64) Func {
	if n.Schedule != nil {
		n.Tau = n.Schedule.At(progress)
	}
	return n
}

// digitPos is one scored position: the distribution there and its target.
type digitPos struct {
	p      [10]float64
	target int
	absent bool // a target digit the completion lacks
}

// ScoreCompletion computes one completion's NTL.
func (n NTL) ScoreCompletion(in NTLInput) (NTLResult, error) {
	nan := NTLResult{Loss: math.NaN(), Reward: math.NaN(), AnswerLoss: math.NaN(), ConfidenceLoss: math.NaN()}
	if len(in.IDs) != len(in.Spans) {
		return nan, fmt.Errorf("rewards: %d token ids but %d spans", len(in.IDs), len(in.Spans))
	}
	var pos, conf []digitPos
	var err error
	switch n.Mode {
	case AllTokensMode:
		pos, err = n.allTokens(in, Span{})
	case HybridMode:
		var answer Span
		if pos, answer, err = n.finalAnswer(in); err == nil && len(pos) > 0 {
			conf, err = n.allTokens(in, answer)
		}
	default:
		pos, _, err = n.finalAnswer(in)
	}
	if err != nil || len(pos) == 0 {
		return nan, err
	}
	r := nan
	r.Applicable, r.Total = true, len(pos)
	r.Loss, r.Correct = n.cost(pos)
	if n.Mode == HybridMode {
		r.AnswerLoss = r.Loss
		if len(conf) > 0 {
			r.ConfidenceLoss, _ = n.cost(conf)
			r.Loss = (1-n.ConfidenceWeight)*r.AnswerLoss + n.ConfidenceWeight*r.ConfidenceLoss
		}
	}
	r.Reward = math.Exp(-r.Loss / n.Tau)
	return r, nil
}

// cost is the mean loss over the positions and the number whose argmax digit is the target.
func (n NTL) cost(pos []digitPos) (loss float64, correct int) {
	for _, q := range pos {
		if q.absent {
			loss += n.Loss.Max()
			continue
		}
		loss += n.Loss.Cost(q.p, q.target)
		if argmaxDigit(q.p) == q.target {
			correct++
		}
	}
	return loss / float64(len(pos)), correct
}

// allTokens: every position whose token is a digit token, against the digit sampled there,
// leaving out tokens that overlap the bytes skip (the answer, in hybrid mode).
func (n NTL) allTokens(in NTLInput, skip Span) ([]digitPos, error) {
	var pos []digitPos
	for i, id := range in.IDs {
		k, ok := n.Vocab.Index(id)
		if !ok || in.Spans[i].Start < skip.End && skip.Start < in.Spans[i].End {
			continue
		}
		p, err := n.probsAt(in, i)
		if err != nil {
			return nil, err
		}
		pos = append(pos, digitPos{p: p, target: n.Vocab.Digits[k]})
	}
	return pos, nil
}

// slot is one aligned position of the final answer: the byte of the completion's digit there
// (−1 when the completion lacks it) and the target digit.
type slot struct{ b, target int }

// align lines the answer's digits up with the ground truth's, right-aligned on the units (and
// left-aligned after the decimal point). Target digits the completion lacks have no byte;
// digits the completion has beyond the target's are compared with 0, the value the target
// has there. The sign is not compared (correctness does that). It also returns the answer's
// bytes (empty when the completion has no number); ok is false without a numeric ground truth.
func align(in NTLInput) (slots []slot, span Span, ok bool) {
	truth, ok := normalizeNumber(GroundTruth(in.Answer))
	if !ok {
		return nil, Span{}, false
	}
	tInt, tFrac := splitDigits(truth)
	ans, found := FinalAnswer(in.Text)
	if !found {
		for k := 0; k < len(tInt)+len(tFrac); k++ {
			slots = append(slots, slot{b: -1})
		}
		return slots, Span{}, true
	}
	span = Span{ans.Start, ans.End}
	// The answer's digits with their byte offsets, integer and fraction parts.
	var aInt, aFrac []int
	dot := strings.LastIndexByte(in.Text[ans.Start:ans.End], '.')
	for b := ans.Start; b < ans.End; b++ {
		if c := in.Text[b]; c >= '0' && c <= '9' {
			if dot >= 0 && b > ans.Start+dot {
				aFrac = append(aFrac, b)
			} else {
				aInt = append(aInt, b)
			}
		}
	}
	// Integer part, from the units leftwards.
	for k := 0; k < max(len(aInt), len(tInt)); k++ {
		s := slot{b: -1}
		if k < len(aInt) {
			s.b = aInt[len(aInt)-1-k]
		}
		if k < len(tInt) {
			s.target = tInt[len(tInt)-1-k]
		}
		slots = append(slots, s)
	}
	// Fraction part, from the tenths rightwards.
	for k := 0; k < max(len(aFrac), len(tFrac)); k++ {
		s := slot{b: -1}
		if k < len(aFrac) {
			s.b = aFrac[k]
		}
		if k < len(tFrac) {
			s.target = tFrac[k]
		}
		slots = append(slots, s)
	}
	return slots, span, true
}

// finalAnswer scores the aligned positions of align: a target digit the completion lacks
// costs the maximum.
func (n NTL) finalAnswer(in NTLInput) ([]digitPos, Span, error) {
	slots, span, ok := align(in)
	if !ok {
		return nil, Span{}, nil // no numeric ground truth: not applicable
	}
	pos := make([]digitPos, len(slots))
	for k, s := range slots {
		pos[k].target = s.target
		if s.b < 0 {
			pos[k].absent = true
			continue
		}
		p, err := n.probsAtByte(in, s.b)
		if err != nil {
			return nil, span, err
		}
		pos[k].p = p
	}
	return pos, span, nil
}

// AnswerDigit is one digit of a completion's final answer that sits on a digit token of its
// own, with the ground truth's digit it is aligned with.
type AnswerDigit struct {
	Pos    int // index of its token in NTLInput.IDs
	Target int
}

// AnswerDigits are the aligned answer positions of final_answer mode that have a distribution
// over digits: what NTL as an auxiliary loss trains (a digit inside a longer token, or one the
// completion lacks, has none). nil without a numeric ground truth or an answer. DigitLogits
// is not read.
func (n NTL) AnswerDigits(in NTLInput) []AnswerDigit {
	slots, _, _ := align(in)
	var out []AnswerDigit
	for _, s := range slots {
		if s.b < 0 {
			continue
		}
		if i, ok := n.tokenAt(in, s.b); ok {
			out = append(out, AnswerDigit{Pos: i, Target: s.target})
		}
	}
	return out
}

// tokenAt is the index of the token holding byte b, when that token is a digit token.
func (n NTL) tokenAt(in NTLInput, b int) (int, bool) {
	i := sort.Search(len(in.Spans), func(i int) bool { return in.Spans[i].End > b })
	if i < len(in.Spans) && in.Spans[i].Start <= b {
		if _, ok := n.Vocab.Index(in.IDs[i]); ok {
			return i, true
		}
	}
	return 0, false
}

// splitDigits gives the digit values of a normalised number's integer and fraction parts.
func splitDigits(num string) (intPart, frac []int) {
	num = strings.TrimPrefix(num, "-")
	i, f, _ := strings.Cut(num, ".")
	for _, c := range i {
		intPart = append(intPart, int(c-'0'))
	}
	for _, c := range f {
		frac = append(frac, int(c-'0'))
	}
	return intPart, frac
}

// probsAtByte is p(d) for the digit character at byte b of the text. When the token holding
// it is a digit token, its distribution; when the character sits in a longer token (GPT-2's
// "72"), that token has no digit distribution of its own and the character counts as certain.
func (n NTL) probsAtByte(in NTLInput, b int) ([10]float64, error) {
	if i, ok := n.tokenAt(in, b); ok {
		return n.probsAt(in, i)
	}
	var p [10]float64
	p[in.Text[b]-'0'] = 1
	return p, nil
}

func (n NTL) probsAt(in NTLInput, pos int) ([10]float64, error) {
	if in.DigitProbs != nil {
		var p [10]float64
		row := in.DigitProbs(pos)
		if len(row) != 10 {
			return p, fmt.Errorf("rewards: no digit probabilities at completion position %d (a digit token)", pos)
		}
		for d, v := range row {
			p[d] = float64(v)
		}
		return p, nil
	}
	var row []float32
	if in.DigitLogits != nil {
		row = in.DigitLogits(pos)
	}
	if row == nil {
		return [10]float64{}, fmt.Errorf("rewards: no digit logits at completion position %d (a digit token)", pos)
	}
	return n.Vocab.DigitProbs(row)
}
