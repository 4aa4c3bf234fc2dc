// Package stats is the project's one place for the mean and spread of a set of numbers.
// Every function has a defined answer for empty input: no values have no mean, so the mean
// and the spread are NaN; one value has spread 0.
package stats

import "math"

// MeanStd is the mean and the sample standard deviation (Bessel's n−1, as TRL and NumPy's
// ddof=1 log them) of x. Empty x: NaN, NaN; one value: the value, 0. A NaN in x makes both NaN.
func MeanStd(x []float64) (mean, std float64) {
	if len(x) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}

// NaNMeanStd is MeanStd of the values of x that are not NaN (NaN marks "not applicable").
func NaNMeanStd(x []float64) (mean, std float64) {
	n := 0
	for _, v := range x {
		if !math.IsNaN(v) {
			n++
		}
	}
	if n == len(x) {
		return MeanStd(x)
	}
	kept := make([]float64, 0, n)
	for _, v := range x {
		if !math.IsNaN(v) {
			kept = append(kept, v)
		}
	}
	return MeanStd(kept)
}

// MeanSE is the mean and its standard error, std/√n. Empty x: NaN, NaN; one value: the value, 0.
func MeanSE(x []float64) (mean, se float64) {
	mean, std := MeanStd(x)
	return mean, std / math.Sqrt(float64(len(x)))
}

// Running accumulates the count, mean, sample variance, minimum and maximum of the finite
// values it is given in one pass (Welford's update), and counts the NaN and infinite ones
// apart. The zero value is ready to use. Without values N is 0 and Mean, Min, Max and Std are
// 0, not NaN, so that summaries built from it stay valid JSON: N says there were none.
type Running struct {
	N         int
	Mean      float64
	Min, Max  float64
	NonFinite int
	m2        float64
}

// Add takes one value.
func (r *Running) Add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		r.NonFinite++
		return
	}
	r.N++
	if r.N == 1 {
		r.Min, r.Max = x, x
	} else {
		r.Min, r.Max = min(r.Min, x), max(r.Max, x)
	}
	d := x - r.Mean
	r.Mean += d / float64(r.N)
	r.m2 += d * (x - r.Mean)
}

// Std is the sample standard deviation of the finite values added; 0 below two.
func (r *Running) Std() float64 {
	if r.N < 2 {
		return 0
	}
	return math.Sqrt(r.m2 / float64(r.N-1))
}
