package rewards

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// A made-up vocabulary: plain digits, space-prefixed digits for 1 and 7, a multi-digit token,
// a special token whose text is a digit, and words.
var testVocab = []string{
	"<s>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", // ids 0..10; "<s>" special
	" 7", " 1", "72", "####", " ", "The", " answer", "\n", "5", // "5" at id 19 is special
}

func testDigitVocab(t *testing.T) *DigitVocab {
	t.Helper()
	v, err := FindDigitTokens(len(testVocab), func(id int) []byte { return []byte(testVocab[id]) },
		func(id int) bool { return id == 0 || id == 19 })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFindDigitTokens(t *testing.T) {
	v := testDigitVocab(t)
	wantIDs := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	wantDigits := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7, 1}
	if len(v.IDs) != len(wantIDs) {
		t.Fatalf("digit tokens %v, want %v", v.IDs, wantIDs)
	}
	for k := range wantIDs {
		if v.IDs[k] != wantIDs[k] || v.Digits[k] != wantDigits[k] {
			t.Errorf("digit token %d: id %d digit %d, want id %d digit %d", k, v.IDs[k], v.Digits[k], wantIDs[k], wantDigits[k])
		}
	}
	if _, ok := v.Index(13); ok {
		t.Error(`"72" counted as a digit token`)
	}
	_, err := FindDigitTokens(3, func(id int) []byte { return []byte([]string{"a", "12", " x"}[id]) }, nil)
	if !errors.Is(err, ErrNoDigitTokens) || !strings.Contains(err.Error(), "no single-digit tokens") {
		t.Errorf("no digit tokens: err = %v", err)
	}
}

// logitsFor returns digit logits (in v.IDs order) giving the per-token probabilities in probs
// (token id → probability); other digit tokens get −∞.
func logitsFor(v *DigitVocab, probs map[int]float64) []float32 {
	row := make([]float32, len(v.IDs))
	for k, id := range v.IDs {
		row[k] = float32(math.Inf(-1))
		if p, ok := probs[id]; ok {
			row[k] = float32(math.Log(p))
		}
	}
	return row
}

func TestDigitProbsSeveralTokensPerDigit(t *testing.T) {
	v := testDigitVocab(t)
	// "7" (id 8) and " 7" (id 11) share digit 7.
	p, err := v.DigitProbs(logitsFor(v, map[int]float64{8: 0.25, 11: 0.25, 9: 0.5}))
	if err != nil {
		t.Fatal(err)
	}
	// float32 logits: within 1e-6.
	if math.Abs(p[7]-0.5) > 1e-6 || math.Abs(p[8]-0.5) > 1e-6 || p[0] != 0 {
		t.Errorf("p = %v, want p(7) = p(8) = 0.5", p)
	}
	// Equal logits: the softmax is uniform over the 12 tokens, so digit 1 and 7 get 2/12.
	p, _ = v.DigitProbs(make([]float32, len(v.IDs)))
	near(t, "uniform p(1)", p[1], 2.0/12)
	near(t, "uniform p(0)", p[0], 1.0/12)
	if _, err := v.DigitProbs(make([]float32, 3)); err == nil {
		t.Error("short logits row accepted")
	}
	full := make([]float32, len(testVocab))
	for id := range full {
		full[id] = float32(id)
	}
	g := v.Gather(nil, full)
	if len(g) != len(v.IDs) || g[10] != 11 || g[11] != 12 {
		t.Errorf("Gather = %v", g)
	}
}

func TestNTLCosts(t *testing.T) {
	var p [10]float64
	p[6], p[7], p[8] = 0.25, 0.5, 0.25
	// Mean 7: mse to 7 is 0, to 8 is 1; wasserstein to 7 is 0.25+0.25, to 8 is 0.5+0.25·2.
	near(t, "mse(7)", MSE.Cost(p, 7), 0)
	near(t, "mse(8)", MSE.Cost(p, 8), 1)
	near(t, "wasserstein(7)", Wasserstein.Cost(p, 7), 0.5)
	near(t, "wasserstein(8)", Wasserstein.Cost(p, 8), 1)
	var q [10]float64
	q[0], q[9] = 0.5, 0.5
	near(t, "mse(0)", MSE.Cost(q, 0), 20.25)
	near(t, "wasserstein(0)", Wasserstein.Cost(q, 0), 4.5)
	if MSE.Max() != 81 || Wasserstein.Max() != 9 {
		t.Error("max costs")
	}
}

// completion assembles a completion from vocabulary ids.
func completion(ids ...int) (string, []int, []Span) {
	var b strings.Builder
	spans := make([]Span, len(ids))
	for i, id := range ids {
		spans[i] = Span{b.Len(), b.Len() + len(testVocab[id])}
		b.WriteString(testVocab[id])
	}
	return b.String(), ids, spans
}

func TestNTLFinalAnswer(t *testing.T) {
	v := testDigitVocab(t)
	// p at each digit position: confident-ish distributions, chosen per test.
	sure := func(d int) map[int]float64 { return map[int]float64{1 + d: 1} }
	split := map[int]float64{7: 0.25, 8: 0.5, 9: 0.25} // digits 6,7,8: mean 7
	cases := []struct {
		name    string
		ids     []int
		rows    map[int]map[int]float64 // completion position → token probabilities
		answer  string
		loss    NTLLoss
		want    float64 // ntl_loss
		total   int
		correct int
	}{
		{
			// "#### 72" tokenized "####", " 7", "2": units 2 vs 2 (sure), tens p vs 7.
			name: "aligned", ids: []int{14, 11, 3}, rows: map[int]map[int]float64{1: split, 2: sure(2)},
			answer: "Natalia... \n#### 72", loss: Wasserstein, want: (0.5 + 0) / 2, total: 2, correct: 2,
		},
		{
			name: "aligned mse", ids: []int{14, 11, 3}, rows: map[int]map[int]float64{1: split, 2: map[int]float64{3: 0.5, 4: 0.5}},
			answer: "72", loss: MSE, want: (0 + 0.25) / 2, total: 2, correct: 2,
		},
		{
			// Right alignment: "#### 172" against 72: the extra hundreds digit is compared with 0.
			name: "extra digit", ids: []int{14, 12, 8, 3}, rows: map[int]map[int]float64{1: sure(1), 2: sure(7), 3: sure(2)},
			answer: "72", loss: Wasserstein, want: (0 + 0 + 1) / 3.0, total: 3, correct: 2,
		},
		{
			// Missing digit: "#### 2" against 72: the tens digit costs the maximum.
			name: "missing digit", ids: []int{14, 15, 3}, rows: map[int]map[int]float64{2: sure(2)},
			answer: "72", loss: MSE, want: (0 + 81) / 2.0, total: 2, correct: 1,
		},
		{
			// No number at all: every target digit costs the maximum.
			name: "absent", ids: []int{16, 17}, answer: "#### 1,072", loss: Wasserstein, want: 9, total: 4, correct: 0,
		},
		{
			// Without ####, the last number: "The 5 answer 7" → 7 against 8.
			name: "last number", ids: []int{16, 15, 6, 17, 15, 8}, rows: map[int]map[int]float64{2: sure(5), 5: sure(7)},
			answer: "8", loss: Wasserstein, want: 1, total: 1, correct: 0,
		},
		{
			// The number after the last ####, not a later one: "#### 7\nThe 2" → 7.
			name: "after ####", ids: []int{14, 11, 18, 16, 15, 3}, rows: map[int]map[int]float64{1: split, 5: sure(2)},
			answer: "7", loss: Wasserstein, want: 0.5, total: 1, correct: 1,
		},
		{
			// A multi-digit token ("72") has no digit distribution: its digits count as certain.
			name: "multi-digit token", ids: []int{14, 15, 13}, answer: "73", loss: MSE, want: 0.5, total: 2, correct: 1,
		},
	}
	for _, c := range cases {
		text, ids, spans := completion(c.ids...)
		rows := make([][]float32, len(ids))
		for pos, probs := range c.rows {
			rows[pos] = logitsFor(v, probs)
		}
		n := NTL{Vocab: v, Mode: FinalAnswerMode, Loss: c.loss, Tau: 2}
		r, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, Answer: c.answer, DigitLogits: DigitRows(rows)})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !r.Applicable || math.Abs(r.Loss-c.want) > 1e-6 || r.Total != c.total || r.Correct != c.correct {
			t.Errorf("%s (%q): loss %v total %d correct %d, want %v %d %d", c.name, text, r.Loss, r.Total, r.Correct, c.want, c.total, c.correct)
		}
		if math.Abs(r.Reward-math.Exp(-r.Loss/2)) > 1e-12 {
			t.Errorf("%s: reward %v, want exp(-loss/tau)", c.name, r.Reward)
		}
	}

	// No ground truth: not applicable.
	text, ids, spans := completion(14, 3)
	n := NTL{Vocab: v, Mode: FinalAnswerMode, Loss: MSE, Tau: 1}
	r, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, DigitLogits: DigitRows([][]float32{nil, logitsFor(v, sure(2))})})
	if err != nil || r.Applicable || !math.IsNaN(r.Reward) {
		t.Errorf("no ground truth: %+v %v", r, err)
	}
	// A digit token without logits is the caller's bug: an error, not a guess.
	if _, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, Answer: "2"}); err == nil {
		t.Error("missing digit logits: no error")
	}
}

func TestNTLDecimals(t *testing.T) {
	v := testDigitVocab(t)
	// "#### 2.5" against 12.50: units and tenths align; the completion lacks the tens and the
	// hundredths, which cost the maximum. (Token 3 stands for ".", a non-digit token.)
	text := "#### 2.5"
	ids := []int{14, 15, 3, 16, 6}
	spans := []Span{{0, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}}
	rows := [][]float32{nil, nil, logitsFor(v, map[int]float64{3: 1}), nil, logitsFor(v, map[int]float64{6: 1})}
	n := NTL{Vocab: v, Mode: FinalAnswerMode, Loss: Wasserstein, Tau: 1}
	r, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, Answer: "12.50", DigitLogits: DigitRows(rows)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 4 || r.Correct != 2 || math.Abs(r.Loss-18.0/4) > 1e-9 {
		t.Errorf("decimals: %+v", r)
	}
}

func TestNTLAllTokens(t *testing.T) {
	v := testDigitVocab(t)
	// "The 72 answer 1": digit tokens at positions 2 ("7"), 3 ("2") and 6 (" 1"); "72" as one
	// token would have no distribution and is not counted.
	text, ids, spans := completion(16, 15, 8, 3, 17, 15, 12, 15, 13)
	rows := make([][]float32, len(ids))
	rows[2] = logitsFor(v, map[int]float64{7: 0.25, 8: 0.5, 9: 0.25}) // mean 7, target 7
	rows[3] = logitsFor(v, map[int]float64{3: 0.5, 4: 0.5})           // mean 2.5, target 2
	rows[6] = logitsFor(v, map[int]float64{1: 1})                     // 0, target 1
	n := NTL{Vocab: v, Mode: AllTokensMode, Loss: MSE, Tau: 1}
	r, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, DigitLogits: DigitRows(rows)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 3 || r.Correct != 2 || math.Abs(r.Loss-(0+0.25+1)/3) > 1e-6 {
		t.Errorf("all_tokens: %+v", r)
	}
	// With no digit token: not applicable.
	text, ids, spans = completion(16, 17)
	r, _ = n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans})
	if r.Applicable {
		t.Errorf("all_tokens without digits: %+v", r)
	}
}

func TestNTLBatchMetrics(t *testing.T) {
	v := testDigitVocab(t)
	sure := func(d int) []float32 { return logitsFor(v, map[int]float64{1 + d: 1}) }
	t1, i1, s1 := completion(14, 11, 3) // #### 72, right
	t2, i2, s2 := completion(14, 15, 3) // #### 2 against 72: one missing
	samples := []Sample{
		{Completion: t1, IDs: i1, Spans: s1, Answer: "#### 72", DigitLogits: DigitRows([][]float32{nil, sure(7), sure(2)})},
		{Completion: t2, IDs: i2, Spans: s2, Answer: "72", DigitLogits: DigitRows([][]float32{nil, nil, sure(2)})},
		{Completion: t2, IDs: i2, Spans: s2}, // no answer: not applicable
	}
	n := NTL{Vocab: v, Mode: FinalAnswerMode, Loss: Wasserstein, Tau: 1}
	vals, m, err := n.Score(samples)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "reward 0", vals[0], 1)
	near(t, "reward 1", vals[1], math.Exp(-4.5))
	if !math.IsNaN(vals[2]) {
		t.Errorf("no answer: reward %v, want NaN", vals[2])
	}
	near(t, "ntl/total_digits", m["ntl/total_digits"], 4)
	near(t, "ntl/correct_digits", m["ntl/correct_digits"], 3)
	near(t, "ntl/digit_accuracy", m["ntl/digit_accuracy"], 0.75)
	near(t, "ntl/loss", m["ntl/loss"], 2.25)
	near(t, "ntl/reward", m["ntl/reward"], (1+math.Exp(-4.5))/2)

	// A batch it applies to nowhere logs counts, never a NaN for the monitor to alert on.
	_, m, err = n.Score(samples[2:])
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if math.IsNaN(v) {
			t.Errorf("not applicable anywhere: %s = NaN", k)
		}
	}
	if _, ok := m["ntl/digit_accuracy"]; ok || m["ntl/total_digits"] != 0 {
		t.Errorf("not applicable anywhere: %v", m)
	}
}

func TestNTLHybrid(t *testing.T) {
	v := testDigitVocab(t)
	half := map[int]float64{6: 0.5, 7: 0.5}            // digits 5 and 6: wasserstein to 5 is 0.5
	split := map[int]float64{7: 0.25, 8: 0.5, 9: 0.25} // digits 6, 7, 8: mean 7, wasserstein to 7 is 0.5
	sure2 := map[int]float64{3: 1}
	n := NTL{Vocab: v, Mode: HybridMode, Loss: Wasserstein, Tau: 1, ConfidenceWeight: 0.2}
	score := func(answer string, rows map[int]map[int]float64, ids ...int) NTLResult {
		t.Helper()
		text, ids, spans := completion(ids...)
		r := make([][]float32, len(ids))
		for pos, probs := range rows {
			r[pos] = logitsFor(v, probs)
		}
		res, err := n.ScoreCompletion(NTLInput{Text: text, IDs: ids, Spans: spans, Answer: answer, DigitLogits: DigitRows(r)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// "The 5 answer\n#### 72": the answer's " 7" and "2" against 72 (0.5 and 0: 0.25), the
	// worked "5" against its sampled 5 (0.5): 0.8·0.25 + 0.2·0.5 = 0.3.
	r := score("72", map[int]map[int]float64{2: half, 6: split, 7: sure2}, 16, 15, 6, 17, 18, 14, 11, 3)
	if !r.Applicable || math.Abs(r.Loss-0.3) > 1e-6 || math.Abs(r.AnswerLoss-0.25) > 1e-6 ||
		math.Abs(r.ConfidenceLoss-0.5) > 1e-6 || r.Total != 2 || r.Correct != 2 || math.Abs(r.Reward-math.Exp(-0.3)) > 1e-6 {
		t.Errorf("hybrid: %+v, want loss 0.3 (answer 0.25, confidence 0.5), 2 of 2 digits", r)
	}
	// No other digit: the answer term alone.
	r = score("72", map[int]map[int]float64{1: split, 2: sure2}, 14, 11, 3)
	if math.Abs(r.Loss-0.25) > 1e-6 || !math.IsNaN(r.ConfidenceLoss) {
		t.Errorf("hybrid without other digits: %+v, want loss 0.25", r)
	}
	// "The 5 answer": its last number, 5, is the answer (units against 2: 0.5·3 + 0.5·4; the
	// missing tens cost the maximum 9), and no digit is left for the confidence term.
	r = score("72", map[int]map[int]float64{2: half}, 16, 15, 6, 17)
	if want := (9 + (0.5*3 + 0.5*4)) / 2; math.Abs(r.Loss-want) > 1e-6 || !math.IsNaN(r.ConfidenceLoss) {
		t.Errorf("hybrid, last number as the answer: %+v, want loss %v", r, want)
	}
	// Without ground truth: not applicable, as in final_answer mode.
	r = score("", map[int]map[int]float64{2: half}, 16, 15, 6, 17)
	if r.Applicable {
		t.Errorf("hybrid without ground truth: %+v", r)
	}
	// Batch metrics carry both terms and the temperature.
	text, ids, spans := completion(16, 15, 6, 17, 18, 14, 11, 3)
	rows := make([][]float32, len(ids))
	rows[2], rows[6], rows[7] = logitsFor(v, half), logitsFor(v, split), logitsFor(v, sure2)
	_, m, err := n.Score([]Sample{{Completion: text, IDs: ids, Spans: spans, Answer: "72", DigitLogits: DigitRows(rows)}})
	if err != nil {
		t.Fatal(err)
	}
	// float32 logits: within 1e-6.
	if math.Abs(m["ntl/answer_loss"]-0.25) > 1e-6 || math.Abs(m["ntl/confidence_loss"]-0.5) > 1e-6 {
		t.Errorf("ntl/answer_loss %v, ntl/confidence_loss %v, want 0.25 and 0.5", m["ntl/answer_loss"], m["ntl/confidence_loss"])
	}
	near(t, "ntl/temperature", m["ntl/temperature"], 1)
	if err := (NTL{Vocab: v, Mode: HybridMode, Loss: MSE, Tau: 1, ConfidenceWeight: 1.5}).Validate(); err == nil {
		t.Error("confidence_weight 1.5 accepted")
	}
	if _, err := ParseNTLMode("hybrid"); err != nil {
		t.Error(err)
	}
}

func TestTauSchedule(t *testing.T) {
	lin := TauSchedule{Kind: ScheduleLinear, Start: 2, End: 0.5}
	cos := TauSchedule{Kind: ScheduleCosine, Start: 2, End: 0.5}
	con := TauSchedule{Kind: ScheduleConstant, Start: 2, End: 0.5}
	for _, c := range []struct {
		s          TauSchedule
		step, want float64
	}{
		{lin, 1, 2}, {lin, 3, 1.25}, {lin, 5, 0.5},
		{cos, 1, 2}, {cos, 2, 0.5 + 1.5*(1+math.Sqrt(0.5))/2}, {cos, 3, 1.25}, {cos, 5, 0.5},
		{con, 1, 2}, {con, 5, 2},
	} {
		near(t, fmt.Sprintf("%s at step %g of 5", c.s.Kind, c.step), c.s.At(Progress(int(c.step), 5)), c.want)
	}
	if Progress(1, 1) != 0 || Progress(9, 5) != 1 {
		t.Error("progress outside a run")
	}
	// The engine's view: AtProgress sets the scheduled NTL's tau; its reward and the logged
	// ntl/temperature follow.
	v := testDigitVocab(t)
	text, ids, spans := completion(14, 11, 3)
	sample := Sample{Completion: text, IDs: ids, Spans: spans, Answer: "72",
		DigitLogits: DigitRows([][]float32{nil, logitsFor(v, map[int]float64{7: 0.25, 8: 0.5, 9: 0.25}), logitsFor(v, map[int]float64{3: 1})})}
	funcs := []Weighted{{Func: NTL{Vocab: v, Mode: FinalAnswerMode, Loss: Wasserstein, Tau: 2, Schedule: &lin}, Weight: 1}}
	res, err := Compose(AtProgress(funcs, Progress(5, 5)), []Sample{sample})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ntl/temperature at the end", res.Metrics["ntl/temperature"], 0.5)
	if want := math.Exp(-0.25 / 0.5); math.Abs(res.Total[0]-want) > 1e-6 { // float32 logits
		t.Errorf("reward at tau 0.5: %v, want %v", res.Total[0], want)
	}
	if err := (TauSchedule{Kind: "step", Start: 1, End: 1}).Validate(); err == nil {
		t.Error("unknown schedule accepted")
	}
	if err := (TauSchedule{Kind: ScheduleLinear, Start: 1, End: 0}).Validate(); err == nil {
		t.Error("tau_end 0 accepted")
	}
}

// AnswerDigits are final_answer's aligned positions that sit on digit tokens: the answer
// "#### 172" against 72 trains the hundreds (target 0), tens and units; a missing digit and a
// digit inside a longer token are left out.
func TestNTLAnswerDigits(t *testing.T) {
	v := testDigitVocab(t)
	n := NTL{Vocab: v, Mode: FinalAnswerMode, Loss: MSE, Tau: 1}
	for _, c := range []struct {
		name   string
		ids    []int
		answer string
		want   []AnswerDigit
	}{
		{"extra digit", []int{14, 12, 8, 3}, "72", []AnswerDigit{{3, 2}, {2, 7}, {1, 0}}},
		{"missing digit", []int{14, 15, 3}, "72", []AnswerDigit{{2, 2}}},
		{"multi-digit token", []int{14, 15, 13, 4}, "723", []AnswerDigit{{3, 3}}},
		{"no ground truth", []int{14, 15, 3}, "", nil},
		{"no number", []int{16, 17}, "5", nil},
	} {
		text, ids, spans := completion(c.ids...)
		got := n.AnswerDigits(NTLInput{Text: text, IDs: ids, Spans: spans, Answer: c.answer})
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s (%q against %q): %v, want %v", c.name, text, c.answer, got, c.want)
		}
	}
}

// CostGrad's gradient with respect to the digit-token logits against central finite
// differences of the cost, for both losses, with digits shared by two tokens.
func TestNTLCostGrad(t *testing.T) {
	v := testDigitVocab(t)
	logits := make([]float32, len(v.IDs))
	for k := range logits {
		logits[k] = float32(math.Sin(float64(3*k+1))) * 2
	}
	cost := func(l NTLLoss, z []float64, y int) float64 {
		row := make([]float32, len(z))
		for k := range z {
			row[k] = float32(z[k])
		}
		// float64 softmax for the differences (DigitProbs rounds the logits to float32)
		maxL := math.Inf(-1)
		for _, x := range z {
			maxL = math.Max(maxL, x)
		}
		var p [10]float64
		sum := 0.0
		for k, x := range z {
			e := math.Exp(x - maxL)
			p[v.Digits[k]] += e
			sum += e
		}
		for d := range p {
			p[d] /= sum
		}
		return l.Cost(p, y)
	}
	for _, l := range []NTLLoss{MSE, Wasserstein} {
		for _, y := range []int{0, 4, 7, 9} {
			grad := make([]float64, len(logits))
			got, err := v.CostGrad(l, logits, y, grad)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := v.DigitProbs(logits)
			if want := l.Cost(p, y); got != want {
				t.Errorf("%s y=%d: cost %v, Cost gives %v", l, y, got, want)
			}
			z := make([]float64, len(logits))
			for k := range z {
				z[k] = float64(logits[k])
			}
			const h = 1e-5
			for k := range z {
				z[k] += h
				up := cost(l, z, y)
				z[k] -= 2 * h
				down := cost(l, z, y)
				z[k] += h
				fd := (up - down) / (2 * h)
				if math.Abs(fd-grad[k]) > 1e-6*math.Max(1, math.Abs(fd)) {
					t.Errorf("%s y=%d: ∂cost/∂z[%d] = %.9g, finite differences %.9g", l, y, k, grad[k], fd)
				}
			}
		}
	}
	if _, err := v.CostGrad(MSE, logits, 3, make([]float64, 2)); err == nil {
		t.Error("a gradient of the wrong length accepted")
	}
}
