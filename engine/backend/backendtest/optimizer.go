package backendtest

import (
	"fmt"
	"math"
	"slices"

	"rlhfstation/engine/backend"
)

func init() { register("optimizer", false, optimizerOps) }

// optimizerOps: AdamW over tensors of many sizes at once (with and without weight decay,
// the first step and a later one), the global gradient norm and the scaling of clipping.
func optimizerOps(e *env) {
	sizes := pick(e, []int{1, 17, 4097, 333, 70001})
	shape := fmt.Sprintf("tensors of %v", sizes)
	var data, grad, m, v [][]float32
	for _, n := range sizes {
		data, grad, m = append(data, e.randn(n, 1)), append(grad, e.randn(n, 0.1)), append(m, e.randn(n, 0.01))
		vv := e.uniform(n, 0, 1e-3)
		vv[0] = 0 // a fresh moment
		v = append(v, vv)
	}
	for _, c := range []struct {
		step  int
		decay float64
	}{{1, 0}, {3, 0.01}} {
		const lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
		e.check("AdamW", fmt.Sprintf("%s step=%d weight decay=%g", shape, c.step, c.decay), func() {
			got := e.twin(func(s *side) []backend.Buf {
				var ps []backend.OptParam
				var outs []backend.Buf
				for i := range sizes {
					p := backend.OptParam{Data: s.acc(data[i]), Grad: s.in(grad[i]), M: s.acc(m[i]), V: s.acc(v[i])}
					ps, outs = append(ps, p), append(outs, p.Data, p.M, p.V)
				}
				s.do("AdamW", s.b.AdamW(ps, lr, b1, b2, eps, c.decay, c.step))
				return outs
			})
			if got == nil {
				return
			}
			bc1, bc2 := 1-math.Pow(b1, float64(c.step)), 1-math.Pow(b2, float64(c.step))
			for i := range sizes {
				wp, wm, wv := make([]float64, sizes[i]), make([]float64, sizes[i]), make([]float64, sizes[i])
				for j := range wp {
					g := float64(grad[i][j])
					wm[j] = b1*float64(m[i][j]) + (1-b1)*g
					wv[j] = b2*float64(v[i][j]) + (1-b2)*g*g
					wp[j] = float64(data[i][j])*(1-lr*c.decay) - lr*(wm[j]/bc1)/(math.Sqrt(wv[j]/bc2)+eps)
				}
				e.oracle(fmt.Sprintf("tensor %d parameters", i), got[3*i], wp, 1e-7, 1e-6)
				// the reference's 1−β in float32 (1 − 0.999 is 0.0009999871) is off by 1.3e-5
				e.oracle(fmt.Sprintf("tensor %d first moment", i), got[3*i+1], wm, 1e-8, 1e-6)
				e.oracle(fmt.Sprintf("tensor %d second moment", i), got[3*i+2], wv, 1e-12, 2e-5)
			}
		})
	}
	e.check("GradNorm", shape, func() {
		var want float64
		for _, g := range grad {
			for _, x := range g {
				want += float64(x) * float64(x)
			}
		}
		want = math.Sqrt(want)
		for _, b := range []backend.Backend{e.ref, e.b} {
			s := &side{e: e, b: b}
			var gs []backend.Buf
			for _, g := range grad {
				gs = append(gs, s.in(g))
			}
			got, err := b.GradNorm(gs)
			if e.must(b.Name()+": GradNorm", err) && math.Abs(got-want) > 1e-5*want {
				e.errorf("%s: gradient norm %v, want %v", b.Name(), got, want)
			}
			again, err := b.GradNorm(gs)
			if err == nil && again != got {
				e.errorf("%s: the same gradients gave the norms %v and %v", b.Name(), got, again)
			}
			if none, err := b.GradNorm(nil); err != nil || none != 0 {
				e.errorf("%s: the norm of no gradients is %v (%v), want 0", b.Name(), none, err)
			}
			s.checkUntouched()
			s.free()
		}
	})
	e.check("ScaleAll", shape, func() {
		got := e.twin(func(s *side) []backend.Buf {
			var xs []backend.Buf
			for _, g := range grad {
				xs = append(xs, s.acc(g))
			}
			s.do("ScaleAll", s.b.ScaleAll(xs, 0.3))
			return xs
		})
		if got != nil {
			for i, g := range grad {
				w := make([]float64, len(g))
				for j, x := range g {
					w[j] = float64(float32(x) * 0.3)
				}
				e.oracle(fmt.Sprintf("tensor %d scaled", i), got[i], w, 0, 1e-7)
			}
		}
	})
	// s = 0 clears, whatever the tensors held (a step's non-finite gradients included): one
	// call zeroes every gradient
	e.check("ScaleAll by 0", shape, func() {
		for _, b := range []backend.Backend{e.ref, e.b} {
			s := &side{e: e, b: b}
			var xs []backend.Buf
			for _, g := range grad {
				h := append([]float32(nil), g...)
				h[0], h[len(h)-1] = float32(math.NaN()), float32(math.Inf(-1))
				xs = append(xs, s.acc(h))
			}
			s.do("ScaleAll", b.ScaleAll(xs, 0))
			for i, x := range xs {
				if got := s.get(x); slices.ContainsFunc(got, func(v float32) bool { return v != 0 }) {
					e.errorf("%s: tensor %d not cleared by ScaleAll(0)", b.Name(), i)
				}
			}
			s.free()
		}
	})
}
