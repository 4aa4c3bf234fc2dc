package backendtest

import (
	"fmt"
	"math"
	"slices"
)

// fdCase is a backward to check against finite differences of its forward, on the reference:
// with a random weighting w of the outputs, L(x) = Σ w·forward(x) (summed in float64), and
// each differentiated input's gradient from backward(x, w) must give L's directional
// derivatives, measured as (L(x+εv) − L(x−εv))/2ε.
type fdCase struct {
	inputs [][]float32
	diff   []int // the inputs differentiated
	// forward returns every output, concatenated, for inputs xs.
	forward func(xs [][]float32) []float32
	// backward returns the gradients of the differentiated inputs (in diff's order) for the
	// output weights w, accumulated from zero.
	backward func(xs [][]float32, w []float32) [][]float32
	eps      float64 // 0: 1e-2 times the input's RMS
}

// fd runs c's checks under op's name: for each differentiated input, a direction over all
// of it, one over its last 33 elements (partial tiles, the last row) and one over its first 5.
// The reference computes in float32, so the bound allows for the rounding of the outputs
// that moved, and for changes too small to move an output's last bit:
// |fd − ∇·v| ≤ 2e-2·Σ|∇ᵢvᵢ| + (8·Σ_moved |w·y| + Σ |w·y|)·2⁻²⁴ / ε.
func (e *env) fd(op, shape string, c fdCase) {
	if e.mixed != nil {
		return // the reference's own check, done in the float32 run
	}
	e.check(op, shape+" (finite differences)", func() {
		y := c.forward(c.inputs)
		w := make([]float32, len(y))
		for i := range w {
			w[i] = float32(e.rng.NormFloat64())
		}
		grads := c.backward(c.inputs, w)
		for k, in := range c.diff {
			x := c.inputs[in]
			g := grads[k]
			if len(g) != len(x) {
				e.errorf("gradient %d has %d values for an input of %d", k, len(g), len(x))
				return
			}
			eps := c.eps
			if eps == 0 {
				eps = 1e-2 * math.Max(rms(x), 1e-3)
			}
			n := len(x)
			for _, dir := range []struct {
				name   string
				lo, hi int
			}{{"all", 0, n}, {"last 33", max(0, n-33), n}, {"first 5", 0, min(n, 5)}} {
				if dir.name != "all" && dir.hi-dir.lo == n {
					continue
				}
				v := make([]float64, n)
				var an, mag float64
				for i := dir.lo; i < dir.hi; i++ {
					v[i] = e.rng.NormFloat64()
					an += float64(g[i]) * v[i]
					mag += math.Abs(float64(g[i]) * v[i])
				}
				lp, yp := c.loss(x, in, v, eps, w)
				lm, ym := c.loss(x, in, v, -eps, w)
				var moved, all float64
				for j := range yp {
					wy := math.Abs(float64(w[j])) * (math.Abs(float64(yp[j])) + math.Abs(float64(ym[j]))) / 2
					all += wy
					if yp[j] != ym[j] {
						moved += wy
					}
				}
				num := (lp - lm) / (2 * eps)
				// rounding of the outputs that moved, and changes below an output's last bit
				lim := 2e-2*mag + (8*moved+all)*math.Pow(2, -24)/eps
				e.fdChecks++
				if d := math.Abs(num - an); !(d <= lim) {
					e.errorf("input %d, direction over %s elements: finite difference %.6g, the backward gives %.6g (|d| %.3g > %.3g)",
						in, dir.name, num, an, d, lim)
				}
			}
		}
	})
}

// loss evaluates Σ w·forward with input in moved by s·v, returning the outputs too.
func (c fdCase) loss(x []float32, in int, v []float64, s float64, w []float32) (float64, []float32) {
	xs := slices.Clone(c.inputs)
	xp := make([]float32, len(x))
	for i := range x {
		xp[i] = float32(float64(x[i]) + s*v[i])
	}
	xs[in] = xp
	y := c.forward(xs)
	var l float64
	for j, yj := range y {
		l += float64(w[j]) * float64(yj)
	}
	return l, y
}

func rms(x []float32) float64 {
	if len(x) == 0 {
		return 0
	}
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(x)))
}

// concat joins output slices for fdCase.forward.
func concat(xs ...[]float32) []float32 {
	var r []float32
	for _, x := range xs {
		r = append(r, x...)
	}
	return r
}

// zeros returns n zeros (a gradient to accumulate into).
func zeros(n int) []float32 { return make([]float32, n) }

func fdShape(format string, v ...any) string { return fmt.Sprintf(format, v...) }
