package stats

import (
	"math"
	"testing"
)

func TestEmptyAndOne(t *testing.T) {
	for name, f := range map[string]func([]float64) (float64, float64){"MeanStd": MeanStd, "NaNMeanStd": NaNMeanStd, "MeanSE": MeanSE} {
		if m, s := f(nil); !math.IsNaN(m) || !math.IsNaN(s) {
			t.Errorf("%s(empty) = %v, %v; want NaN, NaN", name, m, s)
		}
		if m, s := f([]float64{2.5}); m != 2.5 || s != 0 {
			t.Errorf("%s(one value) = %v, %v; want 2.5, 0", name, m, s)
		}
	}
	if m, s := NaNMeanStd([]float64{math.NaN(), math.NaN()}); !math.IsNaN(m) || !math.IsNaN(s) {
		t.Errorf("NaNMeanStd(all NaN) = %v, %v", m, s)
	}
	var r Running
	if r.N != 0 || r.Mean != 0 || r.Std() != 0 {
		t.Errorf("empty Running: %+v std %v", r, r.Std())
	}
}

// Against values worked by hand: x = 1, 2, 3, 4, 10 has mean 4, Σ(x−4)² = 9+4+1+0+36 = 50,
// sample variance 50/4 = 12.5.
func TestAgainstHandValues(t *testing.T) {
	x := []float64{1, 2, 3, 4, 10}
	std := math.Sqrt(12.5)
	if m, s := MeanStd(x); m != 4 || math.Abs(s-std) > 1e-15 {
		t.Errorf("MeanStd = %v, %v", m, s)
	}
	if m, se := MeanSE(x); m != 4 || math.Abs(se-std/math.Sqrt(5)) > 1e-15 {
		t.Errorf("MeanSE = %v, %v", m, se)
	}
	withNaN := []float64{1, math.NaN(), 2, 3, 4, math.NaN(), 10}
	if m, s := NaNMeanStd(withNaN); m != 4 || math.Abs(s-std) > 1e-15 {
		t.Errorf("NaNMeanStd = %v, %v", m, s)
	}
	if m, s := MeanStd(withNaN); !math.IsNaN(m) || !math.IsNaN(s) {
		t.Errorf("MeanStd with a NaN = %v, %v; want NaN", m, s)
	}
	var r Running
	for _, v := range append(withNaN, math.Inf(1)) {
		r.Add(v)
	}
	if r.N != 5 || r.NonFinite != 3 || math.Abs(r.Mean-4) > 1e-15 || math.Abs(r.Std()-std) > 1e-14 || r.Min != 1 || r.Max != 10 {
		t.Errorf("Running %+v std %v", r, r.Std())
	}
}
