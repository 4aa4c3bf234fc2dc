package backendtest

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

func init() { register("elementwise", true, elementwiseOps) }

var hf = backend.HostF32

// elementwiseOps: residual, Add, GELU, SwiGLU, GeGLU, soft-capping, bias and dropout,
// forward and backward, over lengths from one element to more than a parallel split.
func elementwiseOps(e *env) {
	for _, n := range pick(e, []int{1, 17, 4097, 70001}) {
		shape := fmt.Sprintf("n=%d", n)
		a, b := e.randn(n, 1), e.randn(n, 1)
		da0, db0, dout := e.randn(n, 0.5), e.randn(n, 0.5), e.randn(n, 1)

		e.check("ResidualForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.outAs(stream, n)
				s.do("ResidualForward", s.b.ResidualForward(out, s.inAs(stream, a), s.inAs(act, b), n))
				inPlace := s.accAs(stream, a) // out may alias a
				s.do("ResidualForward in place", s.b.ResidualForward(inPlace, inPlace, s.inAs(act, b), n))
				return []backend.Buf{out, inPlace}
			})
			if got != nil {
				w := make([]float64, n)
				for i := range w {
					w[i] = float64(a[i] + b[i])
				}
				e.oracle("a+b", got[0], w, 0, 0)
				e.oracle("a+b in place", got[1], w, 0, 0)
			}
		})
		e.check("ResidualBackward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				da, db, da1 := s.accAs(stream, da0), s.accAs(act, db0), s.accAs(stream, da0)
				s.do("ResidualBackward", s.b.ResidualBackward(da, db, s.inAs(stream, dout), n))
				s.do("ResidualBackward without db", s.b.ResidualBackward(da1, backend.Buf{}, s.inAs(stream, dout), n))
				return []backend.Buf{da, db, da1}
			})
			if got != nil {
				wa, wb := make([]float64, n), make([]float64, n)
				for i := range wa {
					wa[i], wb[i] = float64(da0[i]+dout[i]), float64(db0[i]+dout[i])
				}
				e.oracle("da", got[0], wa, 0, 0)
				e.oracle("db", got[1], wb, 0, 0)
				e.oracle("da alone", got[2], wa, 0, 0)
			}
		})
		e.check("Add", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				acc := s.accAs(stream, a)
				s.do("Add", s.b.Add(acc, s.inAs(act, b), -0.375, n))
				return []backend.Buf{acc}
			})
			if got != nil {
				w := make([]float64, n)
				for i := range w {
					w[i] = float64(a[i]) - 0.375*float64(b[i])
				}
				e.oracle("acc + alpha·x", got[0], w, 1e-7, 1e-7)
			}
		})

		x := e.randn(n, 2)
		e.check("GELUForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.outAs(act, n)
				s.do("GELUForward", s.b.GELUForward(out, s.inAs(act, x), n))
				return []backend.Buf{out}
			})
			if got != nil {
				w := make([]float64, n)
				for i, v := range x {
					w[i] = geluF64(float64(v))
				}
				e.oracle("GELU (tanh form)", got[0], w, 1e-6, 1e-5)
			}
		})
		e.check("GELUBackward", shape, func() {
			e.twin(func(s *side) []backend.Buf {
				dx := s.accAs(act, da0)
				s.do("GELUBackward", s.b.GELUBackward(dx, s.inAs(act, dout), s.inAs(act, x), n))
				return []backend.Buf{dx}
			})
		})
		e.fd("GELUBackward", shape, fdCase{
			inputs: [][]float32{x}, diff: []int{0},
			forward: func(xs [][]float32) []float32 {
				out := make([]float32, n)
				e.ref.GELUForward(hf(out), hf(xs[0]), n)
				return out
			},
			backward: func(xs [][]float32, w []float32) [][]float32 {
				dx := zeros(n)
				e.ref.GELUBackward(hf(dx), hf(w), hf(xs[0]), n)
				return [][]float32{dx}
			},
		})

		gate, up := e.randn(n, 3), e.randn(n, 1)
		e.check("SwiGLUForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.outAs(act, n)
				s.do("SwiGLUForward", s.b.SwiGLUForward(out, s.inAs(act, gate), s.inAs(act, up), n))
				return []backend.Buf{out}
			})
			if got != nil {
				w := make([]float64, n)
				for i, g := range gate {
					w[i] = float64(g) / (1 + math.Exp(-float64(g))) * float64(up[i])
				}
				e.oracle("SiLU(gate)·up", got[0], w, 1e-6, 1e-5)
			}
		})
		e.check("SwiGLUBackward", shape, func() {
			e.twin(func(s *side) []backend.Buf {
				dg, du := s.accAs(act, da0), s.accAs(act, db0)
				s.do("SwiGLUBackward", s.b.SwiGLUBackward(dg, du, s.inAs(act, dout), s.inAs(act, gate), s.inAs(act, up), n))
				return []backend.Buf{dg, du}
			})
		})
		e.fd("SwiGLUBackward", shape, fdCase{
			inputs: [][]float32{gate, up}, diff: []int{0, 1},
			forward: func(xs [][]float32) []float32 {
				out := make([]float32, n)
				e.ref.SwiGLUForward(hf(out), hf(xs[0]), hf(xs[1]), n)
				return out
			},
			backward: func(xs [][]float32, w []float32) [][]float32 {
				dg, du := zeros(n), zeros(n)
				e.ref.SwiGLUBackward(hf(dg), hf(du), hf(w), hf(xs[0]), hf(xs[1]), n)
				return [][]float32{dg, du}
			},
		})

		e.check("GeGLUForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.outAs(act, n)
				s.do("GeGLUForward", s.b.GeGLUForward(out, s.inAs(act, gate), s.inAs(act, up), n))
				return []backend.Buf{out}
			})
			if got != nil {
				w := make([]float64, n)
				for i, g := range gate {
					w[i] = geluF64(float64(g)) * float64(up[i])
				}
				// 1 + tanh cancels in float32 where gate ≪ 0: an absolute error of a few ulps of |gate·up|
				e.oracle("GELU(gate)·up", got[0], w, 4e-6, 1e-5)
			}
		})
		e.check("GeGLUBackward", shape, func() {
			e.twin(func(s *side) []backend.Buf {
				dg, du := s.accAs(act, da0), s.accAs(act, db0)
				s.do("GeGLUBackward", s.b.GeGLUBackward(dg, du, s.inAs(act, dout), s.inAs(act, gate), s.inAs(act, up), n))
				return []backend.Buf{dg, du}
			})
		})
		e.fd("GeGLUBackward", shape, fdCase{
			inputs: [][]float32{gate, up}, diff: []int{0, 1},
			forward: func(xs [][]float32) []float32 {
				out := make([]float32, n)
				e.ref.GeGLUForward(hf(out), hf(xs[0]), hf(xs[1]), n)
				return out
			},
			backward: func(xs [][]float32, w []float32) [][]float32 {
				dg, du := zeros(n), zeros(n)
				e.ref.GeGLUBackward(hf(dg), hf(du), hf(w), hf(xs[0]), hf(xs[1]), n)
				return [][]float32{dg, du}
			},
		})

		const softcap = 2.5
		capped := make([]float32, n) // the forward's output, which the backward reads
		e.check("SoftcapForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.out(n)
				s.do("SoftcapForward", s.b.SoftcapForward(out, s.in(gate), n, softcap))
				inPlace := s.acc(gate)
				s.do("SoftcapForward in place", s.b.SoftcapForward(inPlace, inPlace, n, softcap))
				return []backend.Buf{out, inPlace}
			})
			if got != nil {
				copy(capped, got[0])
				w := make([]float64, n)
				for i, g := range gate {
					w[i] = softcap * math.Tanh(float64(g)/softcap)
				}
				e.oracle("cap·tanh(x/cap)", got[0], w, 2e-6, 1e-5)
				e.oracle("cap·tanh(x/cap) in place", got[1], w, 2e-6, 1e-5)
			}
		})
		e.check("SoftcapBackward", shape, func() {
			e.twin(func(s *side) []backend.Buf {
				dx := s.acc(da0)
				s.do("SoftcapBackward", s.b.SoftcapBackward(dx, s.in(dout), s.in(capped), n, softcap))
				return []backend.Buf{dx}
			})
		})
		e.fd("SoftcapBackward", shape, fdCase{
			inputs: [][]float32{gate}, diff: []int{0},
			forward: func(xs [][]float32) []float32 {
				out := make([]float32, n)
				e.ref.SoftcapForward(hf(out), hf(xs[0]), n, softcap)
				return out
			},
			backward: func(xs [][]float32, w []float32) [][]float32 {
				out, dx := make([]float32, n), zeros(n)
				e.ref.SoftcapForward(hf(out), hf(xs[0]), n, softcap)
				e.ref.SoftcapBackward(hf(dx), hf(w), hf(out), n, softcap)
				return [][]float32{dx}
			},
		})

		for _, p := range []float32{0.1, 0.5} {
			seed := e.rng.Uint64()
			dshape := fmt.Sprintf("%s p=%g", shape, p)
			e.check("DropoutForward", dshape, func() {
				e.zerosOK = n < 16 // one element may well be dropped
				got := e.twin(func(s *side) []backend.Buf {
					out := s.out(n) // LoRA's dropped-out input: float32, of an activation
					s.do("DropoutForward", s.b.DropoutForward(out, s.inAs(act, a), n, seed, p))
					return []backend.Buf{out}
				})
				if got != nil {
					w := make([]float64, n)
					kept := 0
					for i, v := range a {
						if backend.DropoutKeep(seed, i, p) {
							w[i] = float64(v) / (1 - float64(p))
							kept++
						}
					}
					e.oracle("x·mask/(1−p)", got[0], w, 0, 1e-6)
					if n > 1000 && math.Abs(float64(kept)/float64(n)-float64(1-p)) > 0.05 {
						e.errorf("the mask keeps %d of %d, want about %g of them", kept, n, 1-p)
					}
				}
			})
			e.check("DropoutBackward", dshape, func() {
				e.twin(func(s *side) []backend.Buf {
					dx := s.accAs(act, da0)
					s.do("DropoutBackward", s.b.DropoutBackward(dx, s.in(dout), n, seed, p))
					return []backend.Buf{dx}
				})
			})
			e.fd("DropoutBackward", dshape, fdCase{
				inputs: [][]float32{a}, diff: []int{0},
				forward: func(xs [][]float32) []float32 {
					out := make([]float32, n)
					e.ref.DropoutForward(hf(out), hf(xs[0]), n, seed, p)
					return out
				},
				backward: func(xs [][]float32, w []float32) [][]float32 {
					dx := zeros(n)
					e.ref.DropoutBackward(hf(dx), hf(w), n, seed, p)
					return [][]float32{dx}
				},
			})
		}
	}

	for _, c := range pick(e, [][2]int{{1, 1}, {3, 17}, {33, 64}, {2, 4097}, {300, 70}}) {
		rows, cols := c[0], c[1]
		shape := fmt.Sprintf("%d×%d", rows, cols)
		x, bias := e.randn(rows*cols, 1), e.randn(cols, 1)
		db0, dout := e.randn(cols, 1), e.randn(rows*cols, 1)
		e.check("BiasForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.accAs(act, x)
				s.do("BiasForward", s.b.BiasForward(out, s.in(bias), rows, cols))
				return []backend.Buf{out}
			})
			if got != nil {
				w := make([]float64, rows*cols)
				for i := range w {
					w[i] = float64(x[i] + bias[i%cols])
				}
				e.oracle("out + bias", got[0], w, 0, 0)
			}
		})
		e.check("BiasBackward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				db := s.acc(db0)
				s.do("BiasBackward", s.b.BiasBackward(db, s.inAs(act, dout), rows, cols))
				return []backend.Buf{db}
			})
			if got != nil {
				w := f64s(db0)
				for i, v := range dout {
					w[i%cols] += float64(v)
				}
				e.oracle("column sums", got[0], w, 1e-6*math.Sqrt(float64(rows)), 1e-6)
			}
		})
		e.fd("BiasBackward", shape, fdCase{
			inputs: [][]float32{bias}, diff: []int{0},
			forward: func(xs [][]float32) []float32 {
				out := append([]float32(nil), x...)
				e.ref.BiasForward(hf(out), hf(xs[0]), rows, cols)
				return out
			},
			backward: func(xs [][]float32, w []float32) [][]float32 {
				db := zeros(cols)
				e.ref.BiasBackward(hf(db), hf(w), rows, cols)
				return [][]float32{db}
			},
		})
	}
}

// geluF64 is GELU's tanh approximation (gelu_new, gelu_pytorch_tanh).
func geluF64(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}
