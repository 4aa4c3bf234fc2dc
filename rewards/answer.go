package rewards

import (
	"math/big"
	"regexp"
	"strings"
)

// strictAnswer is DESIGN §6.3's `#### (-?[0-9.,]+)`, also taking a `$` before the number.
var strictAnswer = regexp.MustCompile(`#### \$?(-?\$?[0-9.,]+)`)

// number matches a number in text: digits with optional thousands separators and decimals.
// A comma not followed by exactly three digits ends the number ("3, 4" is two numbers).
var number = regexp.MustCompile(`-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|-?[0-9]+(?:\.[0-9]+)?`)

// wellFormedAnswerLine is the format reward's `#### N` line.
var wellFormedAnswerLine = regexp.MustCompile(`^#### \$?-?[0-9]{1,3}(?:,[0-9]{3})*(?:\.[0-9]+)?$|^#### \$?-?[0-9]+(?:\.[0-9]+)?$`)

// NumberAt is a number found in a text: its bytes and its normalised form.
type NumberAt struct {
	Start, End int    // the bytes of the match in the text
	Value      string // commas and `$` removed, e.g. "-1234.5"
}

// ExtractStrict is the strict GSM8K extraction: the last `#### N` in text, with commas and `$`
// removed; ok is false when there is none or it is not a number.
func ExtractStrict(text string) (NumberAt, bool) {
	ms := strictAnswer.FindAllStringSubmatchIndex(text, -1)
	if len(ms) == 0 {
		return NumberAt{}, false
	}
	m := ms[len(ms)-1]
	start, end := m[2], m[3]
	// The class [0-9.,] takes a sentence's final period or comma: trim them off.
	for end > start && (text[end-1] == '.' || text[end-1] == ',') {
		end--
	}
	v, ok := normalizeNumber(text[start:end])
	if !ok {
		return NumberAt{}, false
	}
	return NumberAt{start, end, v}, true
}

// ExtractFlexible is the flexible extraction: the last number in text.
func ExtractFlexible(text string) (NumberAt, bool) {
	ms := number.FindAllStringIndex(text, -1)
	if len(ms) == 0 {
		return NumberAt{}, false
	}
	m := ms[len(ms)-1]
	v, _ := normalizeNumber(text[m[0]:m[1]])
	return NumberAt{m[0], m[1], v}, true
}

// FinalAnswer is the answer NTL compares (DESIGN §6.2): the number after the last `####`,
// else the last number of the text.
func FinalAnswer(text string) (NumberAt, bool) {
	if i := strings.LastIndex(text, "####"); i >= 0 {
		if m := number.FindStringIndex(text[i:]); m != nil {
			v, _ := normalizeNumber(text[i+m[0] : i+m[1]])
			return NumberAt{i + m[0], i + m[1], v}, true
		}
	}
	return ExtractFlexible(text)
}

// GroundTruth is a dataset answer's ground truth: the text after the last `#### ` when there
// is one (GSM8K), else the whole answer; trimmed, commas and `$` removed.
func GroundTruth(answer string) string {
	if i := strings.LastIndex(answer, "####"); i >= 0 {
		answer = answer[i+len("####"):]
	}
	answer = strings.TrimSpace(answer)
	return strings.NewReplacer(",", "", "$", "").Replace(answer)
}

// normalizeNumber removes commas and `$` and checks the rest is -?digits(.digits)?.
func normalizeNumber(s string) (string, bool) {
	s = strings.NewReplacer(",", "", "$", "").Replace(s)
	if _, ok := new(big.Rat).SetString(s); !ok || !isPlainDecimal(s) {
		return "", false
	}
	return s, true
}

// isPlainDecimal accepts -?[0-9]+(\.[0-9]+)? and nothing else (no exponents, no "1/2").
func isPlainDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	intPart, frac, hasDot := strings.Cut(s, ".")
	if intPart == "" || (hasDot && frac == "") {
		return false
	}
	for _, p := range []string{intPart, frac} {
		for _, c := range p {
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// NumbersEqual reports an exact numeric match of two decimal strings ("72" = "72.00").
func NumbersEqual(a, b string) bool {
	a, okA := normalizeNumber(strings.TrimSpace(a))
	b, okB := normalizeNumber(strings.TrimSpace(b))
	if !okA || !okB {
		return false
	}
	x, _ := new(big.Rat).SetString(a)
	y, _ := new(big.Rat).SetString(b)
	return x.Cmp(y) == 0
}

// Extraction picks how correctness finds a completion's answer.
type Extraction string

// The extractions of DESIGN §6.3.
const (
	Strict   Extraction = "strict"   // the last `#### N`
	Flexible Extraction = "flexible" // the last number
)

// Extract applies the extraction to text.
func (e Extraction) Extract(text string) (NumberAt, bool) {
	if e == Strict {
		return ExtractStrict(text)
	}
	return ExtractFlexible(text)
}

// CorrectnessReward is 1 when the extracted answer equals the ground truth numerically, else 0.
// With no ground truth it is not applicable (NaN).
func CorrectnessReward(completion, truth string, e Extraction) float64 {
	if strings.TrimSpace(truth) == "" {
		return notApplicable
	}
	got, ok := e.Extract(completion)
	if ok && NumbersEqual(got.Value, truth) {
		return 1
	}
	return 0
}

// FormatReward is 1 when the completion has a well-formed `#### N` line (the line holds
// exactly that, surrounding spaces aside), else 0.
func FormatReward(completion string) float64 {
	for _, line := range strings.Split(completion, "\n") {
		if wellFormedAnswerLine.MatchString(strings.TrimSpace(line)) {
			return 1
		}
	}
	return 0
}

// AnswerLine is the bytes [start, end) of the completion's final answer: from its last `####`
// to the end of that line. ok is false when the text has no `####`.
func AnswerLine(text string) (start, end int, ok bool) {
	start = strings.LastIndex(text, "####")
	if start < 0 {
		return 0, 0, false
	}
	end = len(text)
	if i := strings.IndexByte(text[start:], '\n'); i >= 0 {
		end = start + i
	}
	return start, end, true
}
