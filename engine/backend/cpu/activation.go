package cpu

import "math"

// geluC is √(2/π), the constant of GELU's tanh approximation (gelu_new in GPT-2).
var geluC = math.Sqrt(2 / math.Pi)

// GELUForward sets out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) over n elements.
func GELUForward(out, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(inp[i])
			out[i] = float32(0.5 * x * (1 + math.Tanh(geluC*(x+0.044715*x*x*x))))
		}
	})
}

// GELUBackward accumulates dinp += dout·GELU'(inp).
func GELUBackward(dinp, dout, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := float64(inp[i])
			t := math.Tanh(geluC * (x + 0.044715*x*x*x))
			g := 0.5*(1+t) + 0.5*x*(1-t*t)*geluC*(1+3*0.044715*x*x)
			dinp[i] += dout[i] * float32(g)
		}
	})
}

// SwiGLUForward sets out = SiLU(gate)·up over n elements, SiLU(g) = g·σ(g).
func SwiGLUForward(out, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := float64(gate[i])
			out[i] = float32(g/(1+math.Exp(-g))) * up[i]
		}
	})
}

// SwiGLUBackward accumulates dgate += dout·up·SiLU'(gate) and dup += dout·SiLU(gate),
// with SiLU'(g) = σ(g)·(1 + g·(1−σ(g))).
func SwiGLUBackward(dgate, dup, dout, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := float64(gate[i])
			s := 1 / (1 + math.Exp(-g))
			dgate[i] += dout[i] * up[i] * float32(s*(1+g*(1-s)))
			dup[i] += dout[i] * float32(g*s)
		}
	})
}
