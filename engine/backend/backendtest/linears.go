package backendtest

import (
	"fmt"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

func init() { register("linears", true, linearsOps) }

// linearsOps: LinearsBackward against a float64 oracle — three linears of different widths
// (a block's q, k and v) with adapters, two where one has none (setting dx rather than
// accumulating), one whose dy is the float32 stream (o, down); odd widths, so that the
// weights stacked do not start on 16-byte boundaries.
func linearsOps(e *env) {
	type lin struct {
		out     int
		adapter bool
	}
	for _, c := range pick(e, []struct {
		in, rows, r int
		ls          []lin
		acc         bool
		dy          role
	}{
		{90, 13, 4, []lin{{70, true}, {30, true}, {30, true}}, true, act},
		{64, 20, 8, []lin{{48, false}, {40, true}}, false, act},
		{40, 9, 16, []lin{{96, true}}, true, stream},
	}) {
		shape := fmt.Sprintf("in=%d rows=%d r=%d outs=%v acc=%v", c.in, c.rows, c.r, c.ls, c.acc)
		const scale = 0.5
		n := len(c.ls)
		ws := make([]*quant.Weight, n)
		dense := make([][]float32, n)
		dys, as, bs, gas, gbs := make([][]float32, n), make([][]float32, n), make([][]float32, n), make([][]float32, n), make([][]float32, n)
		offs := make([]int, n)
		width := 0
		for i, l := range c.ls {
			w, err := quant.Quantize(e.randn(l.out*c.in, 0.05), l.out, c.in, "float32", quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true})
			if err != nil {
				e.t.Fatal(err)
			}
			ws[i], dense[i] = w, dequantize(w)
			dys[i] = e.randn(c.rows*l.out, 1)
			if l.adapter {
				as[i], bs[i] = e.randn(c.r*c.in, 0.3), e.randn(l.out*c.r, 0.3)
				gas[i], gbs[i] = e.randn(c.r*c.in, 0.1), e.randn(l.out*c.r, 0.1)
				offs[i] = width
				width += c.r
			}
		}
		ldxa := width + 1 // xa as a slice of a wider buffer
		x, xa, dx0 := e.randn(c.rows*c.in, 1), e.randn(c.rows*ldxa, 1), e.randn(c.rows*c.in, 0.5)
		e.check("LinearsBackward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				ls := make([]backend.LinearGrad, n)
				var outs []backend.Buf
				for i, l := range c.ls {
					q, err := s.b.UploadQ4(ws[i])
					s.fail("UploadQ4", err)
					if q == nil {
						return nil
					}
					defer s.b.FreeQ4(q)
					ls[i] = backend.LinearGrad{W: q, DY: s.inAs(c.dy, dys[i])}
					if l.adapter {
						ls[i].A, ls[i].B, ls[i].GradA, ls[i].GradB = s.in(as[i]), s.in(bs[i]), s.acc(gas[i]), s.acc(gbs[i])
						ls[i].R, ls[i].Off, ls[i].Scale = c.r, offs[i], scale
						outs = append(outs, ls[i].GradA, ls[i].GradB)
					}
				}
				dx := s.accAs(act, dx0)
				s.do("LinearsBackward", s.b.LinearsBackward(dx, c.acc, s.inAs(act, x), s.inAs(act, xa), ldxa, ls, c.rows))
				return append([]backend.Buf{dx}, outs...)
			})
			if got == nil {
				return
			}
			dx := make([]float64, c.rows*c.in)
			if c.acc {
				for i, v := range dx0 {
					dx[i] = float64(v)
				}
			}
			k := 1
			for i, l := range c.ls {
				for row := 0; row < c.rows; row++ {
					for j := 0; j < c.in; j++ {
						var t float64
						for o := 0; o < l.out; o++ {
							t += float64(dys[i][row*l.out+o]) * float64(dense[i][o*c.in+j])
						}
						dx[row*c.in+j] += t
					}
				}
				if !l.adapter {
					continue
				}
				dxa := make([]float64, c.rows*c.r) // s·dy·B
				for row := 0; row < c.rows; row++ {
					for q := 0; q < c.r; q++ {
						var t float64
						for o := 0; o < l.out; o++ {
							t += float64(dys[i][row*l.out+o]) * float64(bs[i][o*c.r+q])
						}
						dxa[row*c.r+q] = scale * t
					}
				}
				ga, gb := f64s(gas[i]), f64s(gbs[i])
				for q := 0; q < c.r; q++ {
					for j := 0; j < c.in; j++ {
						for row := 0; row < c.rows; row++ {
							ga[q*c.in+j] += dxa[row*c.r+q] * float64(x[row*c.in+j])
						}
					}
					for o := 0; o < l.out; o++ {
						for row := 0; row < c.rows; row++ {
							gb[o*c.r+q] += scale * float64(dys[i][row*l.out+o]) * float64(xa[row*ldxa+offs[i]+q])
						}
					}
				}
				for row := 0; row < c.rows; row++ {
					for j := 0; j < c.in; j++ {
						for q := 0; q < c.r; q++ {
							dx[row*c.in+j] += dxa[row*c.r+q] * float64(as[i][q*c.in+j])
						}
					}
				}
				e.oracle(fmt.Sprintf("linear %d: GradA += (s·dy·B)ᵀ·x", i), got[k], ga, 1e-5*float64(c.rows*l.out), 1e-5)
				e.oracle(fmt.Sprintf("linear %d: GradB += s·dyᵀ·xa", i), got[k+1], gb, 1e-5*float64(c.rows), 1e-5)
				k += 2
			}
			e.oracle("dx = Σ dy·W + (s·dy·B)·A", got[0], dx, 1e-6*float64(c.in+c.rows*30), 1e-5)
		})
	}
}
