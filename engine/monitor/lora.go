package monitor

import "math"

// loraFactor is one LoRA module's factors, row-major: A is [r, in], B is [out, r]; the update
// the module adds to its layer is s·B·A ([out, in]), which is never formed here.
type loraFactor struct {
	A, B       []float32
	R, In, Out int
	Scale      float64

	self    float64 // ‖B·A‖², once computed
	selfSet bool
}

// selfInner is ‖B·A‖_F², computed once per factor.
func (f *loraFactor) selfInner() float64 {
	if !f.selfSet {
		f.self, f.selfSet = productInner(f, f), true
	}
	return f.self
}

// loraScale is PEFT's scaling: alpha/r, or alpha/√r with rank-stabilised LoRA (rslora).
func loraScale(alpha float64, r int, rslora bool) float64 {
	if rslora {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

// zeroNonFinite replaces NaN and ±Inf by 0 in place and counts them, so that the norms describe
// the finite entries and the count reports the rest.
func zeroNonFinite(v []float32) int {
	n := 0
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			v[i] = 0
			n++
		}
	}
	return n
}

// frobenius is ‖v‖_F, accumulated in float64.
func frobenius(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// frobeniusDiff is ‖a − b‖_F for equal-length a and b.
func frobeniusDiff(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// rowGram is X₁·X₀ᵀ for row-major X₁ [r1, n] and X₀ [r0, n]: the [r1, r0] matrix of row dot
// products. With X = A it is A₁A₀ᵀ.
func rowGram(x1 []float32, r1 int, x0 []float32, r0, n int) []float64 {
	g := make([]float64, r1*r0)
	for i := 0; i < r1; i++ {
		a := x1[i*n : (i+1)*n]
		for j := 0; j < r0; j++ {
			b := x0[j*n : (j+1)*n]
			var s float64
			for k := range a {
				s += float64(a[k]) * float64(b[k])
			}
			g[i*r0+j] = s
		}
	}
	return g
}

// colGram is X₁ᵀ·X₀ for row-major X₁ [m, r1] and X₀ [m, r0]: the [r1, r0] matrix of column dot
// products. With X = B it is B₁ᵀB₀. It walks the rows once, adding their outer products.
func colGram(x1 []float32, r1 int, x0 []float32, r0, m int) []float64 {
	g := make([]float64, r1*r0)
	for o := 0; o < m; o++ {
		a := x1[o*r1 : (o+1)*r1]
		b := x0[o*r0 : (o+1)*r0]
		for i, ai := range a {
			if ai == 0 {
				continue
			}
			row := g[i*r0 : (i+1)*r0]
			for j, bj := range b {
				row[j] += float64(ai) * float64(bj)
			}
		}
	}
	return g
}

// productInner is ⟨B₁A₁, B₀A₀⟩_F = tr((B₁A₁)ᵀ B₀A₀) = tr(B₁ᵀB₀ · A₀A₁ᵀ) = Σ_ij (B₁ᵀB₀)_ij (A₁A₀ᵀ)_ij,
// from r1×r0 products only: O(r1·r0·(in + out)) work instead of O(out·in·r).
func productInner(f1, f0 *loraFactor) float64 {
	gb := colGram(f1.B, f1.R, f0.B, f0.R, f1.Out)
	ga := rowGram(f1.A, f1.R, f0.A, f0.R, f1.In)
	var s float64
	for i := range gb {
		s += gb[i] * ga[i]
	}
	return s
}

// updateNorm is ‖s·B·A‖_F = |s|·√tr((BᵀB)(AAᵀ)).
func updateNorm(f *loraFactor) float64 {
	return math.Abs(f.Scale) * math.Sqrt(max(f.selfInner(), 0))
}

// updateDiffNorm is ‖s₁B₁A₁ − s₀B₀A₀‖_F from ‖x − y‖² = ‖x‖² + ‖y‖² − 2⟨x, y⟩, each term from
// r×r products. The ranks may differ; in and out must match. Rounding can make the sum
// slightly negative for identical updates: it is clamped at 0 (and identical factors give
// exactly 0, since the three terms are then computed by the same operations).
func updateDiffNorm(f1, f0 *loraFactor) float64 {
	n1 := f1.Scale * f1.Scale * f1.selfInner()
	n0 := f0.Scale * f0.Scale * f0.selfInner()
	x := f1.Scale * f0.Scale * productInner(f1, f0)
	return math.Sqrt(max(n1+n0-2*x, 0))
}
