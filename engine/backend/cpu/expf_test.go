package cpu

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-87); x < 88.7; x += 0.0037 {
		got, want := float64(expf(x)), math.Exp(float64(x))
		worst = math.Max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Fatalf("expf: worst relative error %.3g", worst)
	}
	if expf(100) != float32(math.Inf(1)) || expf(-100) != 0 || expf(0) != 1 {
		t.Fatal("expf edge cases")
	}
	if v := expf(float32(math.NaN())); v == v {
		t.Fatal("expf(NaN) is not NaN")
	}
}

func BenchmarkExpf(b *testing.B) {
	s := float32(0)
	for i := 0; b.Loop(); i++ {
		s += expf(float32(i%64) * -0.1)
	}
	_ = s
}

func BenchmarkMathExp(b *testing.B) {
	s := 0.0
	for i := 0; b.Loop(); i++ {
		s += math.Exp(float64(i%64) * -0.1)
	}
	_ = s
}
