package rewards

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Overflowing levels are refused with the sample that produced them, never written as +Inf.
func TestBaselinesRefuseOverflowNamingTheSample(t *testing.T) {
	ok := Levels{Word: 20, Phrase: 30, Sentence: 40}
	_, err := ComputeBaselines([]Levels{ok, {Word: math.Inf(1), Phrase: 1, Sentence: 1}})
	var se *SampleError
	if !errors.As(err, &se) || se.Sample != 1 || se.Level != "word" {
		t.Fatalf("+Inf level: %v", err)
	}
	_, err = ComputeBaselines([]Levels{ok, ok, {Word: 2e200, Phrase: 3e200, Sentence: 4e200}, {Word: math.NaN()}})
	if !errors.As(err, &se) || se.Sample != 2 || se.Level != "word" || !strings.Contains(err.Error(), "sample 2") {
		t.Fatalf("overflowing spread: %v", err)
	}
	b, err := ComputeBaselines([]Levels{ok, {Word: math.NaN(), Phrase: math.NaN(), Sentence: math.NaN()}, ok})
	if err != nil || b.Samples != 2 {
		t.Fatalf("a sample without words is still left out: %v, %d samples", err, b.Samples)
	}
}
