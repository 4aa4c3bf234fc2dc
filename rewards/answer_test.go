package rewards

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

func TestExtraction(t *testing.T) {
	cases := []struct {
		text         string
		strict, flex string // "" = none
		final        string
	}{
		{text: "so 3+4 = 7\n#### 7", strict: "7", flex: "7", final: "7"},
		{text: "#### 1,234", strict: "1234", flex: "1234", final: "1234"},
		{text: "#### $1,234.50", strict: "1234.50", flex: "1234.50", final: "1234.50"},
		{text: "#### -5", strict: "-5", flex: "-5", final: "-5"},
		{text: "#### 3\nwait, no\n#### 4", strict: "4", flex: "4", final: "4"},
		{text: "#### 72.", strict: "72", flex: "72", final: "72"},
		{text: "The answer is 42.", strict: "", flex: "42", final: "42"},
		{text: "It costs $5 and 6 apples", strict: "", flex: "6", final: "6"},
		{text: "1,000,000 people", strict: "", flex: "1000000", final: "1000000"},
		{text: "#### 12 apples, then 3 more", strict: "12", flex: "3", final: "12"},
		{text: "3, 4", strict: "", flex: "4", final: "4"},
		{text: "no numbers here ####", strict: "", flex: "", final: ""},
		{text: "#### ...", strict: "", flex: "", final: ""},
		{text: "x = 10\n####\n", strict: "", flex: "10", final: "10"},
	}
	for _, c := range cases {
		got := func(n NumberAt, ok bool) string {
			if !ok {
				return ""
			}
			return n.Value
		}
		if s := got(ExtractStrict(c.text)); s != c.strict {
			t.Errorf("strict(%q) = %q, want %q", c.text, s, c.strict)
		}
		if s := got(ExtractFlexible(c.text)); s != c.flex {
			t.Errorf("flexible(%q) = %q, want %q", c.text, s, c.flex)
		}
		if s := got(FinalAnswer(c.text)); s != c.final {
			t.Errorf("final answer(%q) = %q, want %q", c.text, s, c.final)
		}
	}
}

func TestCorrectnessAndFormat(t *testing.T) {
	cases := []struct {
		completion, truth string
		e                 Extraction
		want              float64
	}{
		{"#### 72", "72", Strict, 1},
		{"#### 72.00", "72", Strict, 1},
		{"#### $1,000", "1000", Strict, 1},
		{"#### -3", "3", Strict, 0},
		{"the answer is 72", "72", Strict, 0},
		{"the answer is 72", "72", Flexible, 1},
		{"#### 72 and then 5", "72", Flexible, 0},
		{"#### 71\n#### 72", "72", Strict, 1},
	}
	for _, c := range cases {
		if got := CorrectnessReward(c.completion, c.truth, c.e); got != c.want {
			t.Errorf("correctness(%q, %q, %s) = %v, want %v", c.completion, c.truth, c.e, got, c.want)
		}
	}
	if !math.IsNaN(CorrectnessReward("#### 1", "", Strict)) {
		t.Error("no ground truth should be not applicable")
	}
	formats := map[string]float64{
		"step 1\n#### 72":       1,
		"#### 1,234\n":          1,
		"  #### -0.5  ":         1,
		"#### $12":              1,
		"#### 72 apples":        0,
		"answer: #### 72":       0,
		"####72":                0,
		"#### 12,34":            0,
		"the answer is 72":      0,
		"####":                  0,
		"ok\n#### 5\nmore text": 1,
	}
	for text, want := range formats {
		if got := FormatReward(text); got != want {
			t.Errorf("format(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestGSM8KSample parses every line of the shared GSM8K sample: the ground truth is a number,
// and the reference answer is correct and well formed under every extraction.
func TestGSM8KSample(t *testing.T) {
	path := testref.SharedData(t, "gsm8k/train-sample.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		var ex struct{ Question, Answer string }
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		truth := GroundTruth(ex.Answer)
		if _, ok := normalizeNumber(truth); !ok {
			t.Errorf("line %d: ground truth %q is not a number", lines, truth)
			continue
		}
		last := ex.Answer[strings.LastIndex(ex.Answer, "####"):]
		for _, e := range []Extraction{Strict, Flexible} {
			if CorrectnessReward(ex.Answer, truth, e) != 1 {
				got, _ := e.Extract(ex.Answer)
				t.Errorf("line %d: %s extraction of %q gives %q, ground truth %q", lines, e, last, got.Value, truth)
			}
		}
		if a, _ := FinalAnswer(ex.Answer); a.Value != truth {
			t.Errorf("line %d: final answer %q, ground truth %q", lines, a.Value, truth)
		}
		if FormatReward(ex.Answer) != 1 {
			t.Errorf("line %d: %q not a well-formed answer line", lines, last)
		}
		// The reference with its answer changed is wrong.
		if CorrectnessReward(ex.Answer+"\n#### 123456789", truth, Strict) != 0 {
			t.Errorf("line %d: a wrong answer scored", lines)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines < 100 {
		t.Fatalf("only %d lines in %s", lines, path)
	}
}
