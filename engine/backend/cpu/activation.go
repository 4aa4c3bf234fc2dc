package cpu

import "math"

// geluC is √(2/π), the constant of GELU's tanh approximation (gelu_new in GPT-2).
var geluC = float32(math.Sqrt(2 / math.Pi))

// GELUForward sets out = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) over n elements.
func GELUForward(out, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			x := inp[c:min(c+expChunk, hi)]
			t := tanhChunk(buf[:len(x)], x)
			o := out[c : c+len(x)]
			for i, v := range x {
				o[i] = gelu(v, t[i])
			}
		}
	})
}

// GELUBackward accumulates dinp += dout·GELU'(inp).
func GELUBackward(dinp, dout, inp []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			x := inp[c:min(c+expChunk, hi)]
			t := tanhChunk(buf[:len(x)], x)
			di, do := dinp[c:c+len(x)], dout[c:c+len(x)]
			for i, v := range x {
				di[i] += do[i] * geluGrad(v, t[i])
			}
		}
	})
}

// SwiGLUForward sets out = SiLU(gate)·up over n elements, SiLU(g) = g·σ(g). A decoded
// token's 4,864 (Qwen2.5-0.5B) take about 16 µs on one core, so they are split from 2,048 on:
// the helpers are polling between a decode step's products, and a hand-off costs 1–2 µs.
func SwiGLUForward(out, gate, up []float32, n int) {
	For(n, 1<<11, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			g := gate[c:min(c+expChunk, hi)]
			e := buf[:len(g)]
			expAffine(e, g, -1, 0, 0) // e^−g
			o, u := out[c:c+len(g)], up[c:c+len(g)]
			for i, v := range g {
				o[i] = v / (1 + e[i]) * u[i]
			}
		}
	})
}

// SwiGLUBackward accumulates dgate += dout·up·SiLU'(gate) and dup += dout·SiLU(gate),
// with SiLU'(g) = σ(g)·(1 + g·(1−σ(g))).
func SwiGLUBackward(dgate, dup, dout, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			g := gate[c:min(c+expChunk, hi)]
			e := buf[:len(g)]
			expAffine(e, g, -1, 0, 0) // e^−g
			dg, du, do, u := dgate[c:c+len(g)], dup[c:c+len(g)], dout[c:c+len(g)], up[c:c+len(g)]
			for i, v := range g {
				s := 1 / (1 + e[i])
				dg[i] += do[i] * u[i] * s * (1 + v*(1-s))
				du[i] += do[i] * v * s
			}
		}
	})
}

// gelu is GELU at x given t = tanh(√(2/π)·(x + 0.044715·x³)) (tanhChunk's value).
func gelu(x, t float32) float32 { return 0.5 * x * (1 + t) }

// geluGrad is GELU's derivative at x given the same t.
func geluGrad(x, t float32) float32 {
	return 0.5*(1+t) + 0.5*x*(1-t*t)*geluC*(1+3*0.044715*x*x)
}

// tanhf is tanh through expf: 1 − 2/(e^{2x}+1), exact enough where GELU uses it (its
// absolute error stays near float32's epsilon).
func tanhf(x float32) float32 { return 1 - 2/(expf(2*x)+1) }

// tanhChunk sets t[i] = tanhf(√(2/π)·(x + 0.044715·x³)), GELU's inner tanh, through the
// vector exp, and returns t.
func tanhChunk(t, x []float32) []float32 {
	for i, v := range x {
		t[i] = geluC * (v + 0.044715*v*v*v)
	}
	expAffine(t, t, 2, 0, 0)
	for i, e := range t {
		t[i] = 1 - 2/(e+1)
	}
	return t
}

// GeGLUForward sets out = GELU(gate)·up over n elements (GELU's tanh approximation): gemma's
// gated MLP.
func GeGLUForward(out, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			g := gate[c:min(c+expChunk, hi)]
			t := tanhChunk(buf[:len(g)], g)
			o, u := out[c:c+len(g)], up[c:c+len(g)]
			for i, v := range g {
				o[i] = gelu(v, t[i]) * u[i]
			}
		}
	})
}

// GeGLUBackward accumulates dgate += dout·up·GELU'(gate) and dup += dout·GELU(gate).
func GeGLUBackward(dgate, dup, dout, gate, up []float32, n int) {
	For(n, 1<<13, func(lo, hi int) {
		var buf [expChunk]float32
		for c := lo; c < hi; c += expChunk {
			g := gate[c:min(c+expChunk, hi)]
			t := tanhChunk(buf[:len(g)], g)
			dg, du, do, u := dgate[c:c+len(g)], dup[c:c+len(g)], dout[c:c+len(g)], up[c:c+len(g)]
			for i, v := range g {
				dg[i] += do[i] * u[i] * geluGrad(v, t[i])
				du[i] += do[i] * gelu(v, t[i])
			}
		}
	})
}
