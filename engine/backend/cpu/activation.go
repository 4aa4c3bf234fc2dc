package cpu

import "math"

// geluC is √(2/π), the constant of GELU's tanh approximation (gelu_new in GPT-2).
var geluC = float32(math.Sqrt(2 / math.Pi))

// GELUForward sets out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) over n elements.
func GELUForward(out, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := inp[i]
			out[i] = 0.5 * x * (1 + tanhf(geluC*(x+0.044715*x*x*x)))
		}
	})
}

// GELUBackward accumulates dinp += dout·GELU'(inp).
func GELUBackward(dinp, dout, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := inp[i]
			t := tanhf(geluC * (x + 0.044715*x*x*x))
			dinp[i] += dout[i] * (0.5*(1+t) + 0.5*x*(1-t*t)*geluC*(1+3*0.044715*x*x))
		}
	})
}

// SwiGLUForward sets out = SiLU(gate)·up over n elements, SiLU(g) = g·σ(g).
func SwiGLUForward(out, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			out[i] = g / (1 + expf(-g)) * up[i]
		}
	})
}

// SwiGLUBackward accumulates dgate += dout·up·SiLU'(gate) and dup += dout·SiLU(gate),
// with SiLU'(g) = σ(g)·(1 + g·(1−σ(g))).
func SwiGLUBackward(dgate, dup, dout, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			s := 1 / (1 + expf(-g))
			dgate[i] += dout[i] * up[i] * s * (1 + g*(1-s))
			dup[i] += dout[i] * g * s
		}
	})
}

// tanhf is tanh through expf: 1 − 2/(e^{2x}+1), exact enough where GELU uses it (its
// absolute error stays near float32's epsilon).
func tanhf(x float32) float32 { return 1 - 2/(expf(2*x)+1) }
