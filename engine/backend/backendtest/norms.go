package backendtest

import (
	"fmt"
	"math"
	"slices"

	"rlhfstation/engine/backend"
)

func init() {
	register("norms", true, normOps)
	register("embedding", true, embeddingOps)
}

// normOps: RMSNorm (plain, and gemma's 1 + w) and LayerNorm, forward and backward, with
// trainable and frozen weights, on one row, odd widths, rows of 4097 and enough rows for a parallel split.
func normOps(e *env) {
	// (130, 4097) is split over goroutines on the CPU (rows of 4097 are 28 to a goroutine).
	for _, c := range pick(e, [][2]int{{1, 7}, {1, 2}, {5, 4097}, {130, 4097}, {3, 64}, {300, 17}, {67, 896}}) {
		rows, dim := c[0], c[1]
		shape := fmt.Sprintf("%d×%d", rows, dim)
		x := e.randn(rows*dim, 1.5)
		for i := 0; i < dim; i++ { // an offset in the first row: LayerNorm must centre
			x[i] = roundBF16(x[i] + 3)
		}
		w, bias := e.uniform(dim, 0.5, 1.5), e.randn(dim, 0.2)
		dout := e.randn(rows*dim, 1)
		dx0, dw0, db0 := e.randn(rows*dim, 0.3), e.randn(dim, 0.3), e.randn(dim, 0.3)
		const eps = 1e-5

		for _, offset := range []float32{0, 1} {
			oshape := shape
			if offset != 0 {
				oshape += fmt.Sprintf(" offset=%g", offset)
			}
			wn := w
			if offset != 0 { // gemma's weights sit around 0, the norm scales by 1 + w
				wn = e.randn(dim, 0.3)
			}
			var rstd []float32
			e.check("RMSNormForward", oshape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					out, r := s.outAs(act, rows*dim), s.out(rows)
					s.do("RMSNormForward", s.b.RMSNormForward(out, r, s.inAs(stream, x), s.in(wn), rows, dim, eps, offset))
					return []backend.Buf{out, r}
				})
				if got == nil {
					return
				}
				rstd = got[1]
				wo, wr := make([]float64, rows*dim), make([]float64, rows)
				for r := 0; r < rows; r++ {
					var ss float64
					for j := 0; j < dim; j++ {
						ss += float64(x[r*dim+j]) * float64(x[r*dim+j])
					}
					wr[r] = 1 / math.Sqrt(ss/float64(dim)+eps)
					for j := 0; j < dim; j++ {
						wo[r*dim+j] = float64(x[r*dim+j]) * wr[r] * (float64(offset) + float64(wn[j]))
					}
				}
				e.oracle("x·rstd·(offset+w)", got[0], wo, 1e-6, 1e-6)
				e.oracle("rstd", got[1], wr, 0, 1e-6)
			})
			if rstd != nil {
				e.check("RMSNormBackward", oshape, func() {
					e.twin(func(s *side) []backend.Buf {
						dx, dw, dx1 := s.accAs(stream, dx0), s.acc(dw0), s.accAs(stream, dx0)
						s.do("RMSNormBackward", s.b.RMSNormBackward(dx, dw, s.inAs(act, dout), s.inAs(stream, x), s.in(wn), s.in(rstd), rows, dim, offset))
						s.do("RMSNormBackward, weight frozen", s.b.RMSNormBackward(dx1, backend.Buf{}, s.inAs(act, dout), s.inAs(stream, x), s.in(wn), s.in(rstd), rows, dim, offset))
						return []backend.Buf{dx, dw, dx1}
					})
				})
			}
			e.fd("RMSNormBackward", oshape, fdCase{
				inputs: [][]float32{x, wn}, diff: []int{0, 1},
				forward: func(xs [][]float32) []float32 {
					out, r := zeros(rows*dim), zeros(rows)
					e.ref.RMSNormForward(hf(out), hf(r), hf(xs[0]), hf(xs[1]), rows, dim, eps, offset)
					return out
				},
				backward: func(xs [][]float32, g []float32) [][]float32 {
					out, r := zeros(rows*dim), zeros(rows)
					e.ref.RMSNormForward(hf(out), hf(r), hf(xs[0]), hf(xs[1]), rows, dim, eps, offset)
					dx, dw := zeros(rows*dim), zeros(dim)
					e.ref.RMSNormBackward(hf(dx), hf(dw), hf(g), hf(xs[0]), hf(xs[1]), hf(r), rows, dim, offset)
					return [][]float32{dx, dw}
				},
			})
		}

		if dim < 3 {
			continue // LayerNorm of two values is ±1 scaled: all curvature, no use to differences
		}
		var mean, rstd []float32
		e.check("LayerNormForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out, m, r := s.outAs(act, rows*dim), s.out(rows), s.out(rows)
				s.do("LayerNormForward", s.b.LayerNormForward(out, m, r, s.inAs(stream, x), s.in(w), s.in(bias), rows, dim, eps))
				return []backend.Buf{out, m, r}
			})
			if got == nil {
				return
			}
			mean, rstd = got[1], got[2]
			wo, wm, wr := make([]float64, rows*dim), make([]float64, rows), make([]float64, rows)
			for r := 0; r < rows; r++ {
				row := f64s(x[r*dim : (r+1)*dim])
				for _, v := range row {
					wm[r] += v / float64(dim)
				}
				var ss float64
				for _, v := range row {
					ss += (v - wm[r]) * (v - wm[r])
				}
				wr[r] = 1 / math.Sqrt(ss/float64(dim)+eps)
				for j, v := range row {
					wo[r*dim+j] = (v-wm[r])*wr[r]*float64(w[j]) + float64(bias[j])
				}
			}
			e.oracle("(x−mean)·rstd·w + b", got[0], wo, 1e-5, 1e-5)
			e.oracle("mean", got[1], wm, 1e-6, 1e-6)
			e.oracle("rstd", got[2], wr, 0, 1e-5)
		})
		if mean != nil {
			e.check("LayerNormBackward", shape, func() {
				e.twin(func(s *side) []backend.Buf {
					dx, dw, db, dx1 := s.accAs(stream, dx0), s.acc(dw0), s.acc(db0), s.accAs(stream, dx0)
					s.do("LayerNormBackward", s.b.LayerNormBackward(dx, dw, db, s.inAs(act, dout), s.inAs(stream, x), s.in(w), s.in(mean), s.in(rstd), rows, dim))
					s.do("LayerNormBackward, frozen", s.b.LayerNormBackward(dx1, backend.Buf{}, backend.Buf{}, s.inAs(act, dout), s.inAs(stream, x), s.in(w), s.in(mean), s.in(rstd), rows, dim))
					return []backend.Buf{dx, dw, db, dx1}
				})
			})
		}
		e.fd("LayerNormBackward", shape, fdCase{
			inputs: [][]float32{x, w, bias}, diff: []int{0, 1, 2},
			forward: func(xs [][]float32) []float32 {
				out, m, r := zeros(rows*dim), zeros(rows), zeros(rows)
				e.ref.LayerNormForward(hf(out), hf(m), hf(r), hf(xs[0]), hf(xs[1]), hf(xs[2]), rows, dim, eps)
				return out
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				out, m, r := zeros(rows*dim), zeros(rows), zeros(rows)
				e.ref.LayerNormForward(hf(out), hf(m), hf(r), hf(xs[0]), hf(xs[1]), hf(xs[2]), rows, dim, eps)
				dx, dw, db := zeros(rows*dim), zeros(dim), zeros(dim)
				e.ref.LayerNormBackward(hf(dx), hf(dw), hf(db), hf(g), hf(xs[0]), hf(xs[1]), hf(m), hf(r), rows, dim)
				return [][]float32{dx, dw, db}
			},
		})
	}
}

// embeddingOps: token (and learned position) embeddings, with ids repeated so that the
// backward must add rows that share an id.
func embeddingOps(e *env) {
	for _, c := range pick(e, []struct{ rows, vocab, dim, maxPos int }{
		{1, 5, 3, 0}, {17, 50, 33, 40}, {64, 300, 64, 0}, {9, 4099, 8, 16}, {200, 7, 130, 256},
	}) {
		shape := fmt.Sprintf("rows=%d vocab=%d dim=%d", c.rows, c.vocab, c.dim)
		if c.maxPos > 0 {
			shape += fmt.Sprintf(" positions=%d", c.maxPos)
		}
		ids := e.ids(c.rows, c.vocab)
		if c.rows > 2 {
			ids[c.rows-1] = ids[0] // a repeat at least
		}
		wte := e.randn(c.vocab*c.dim, 1)
		var pos []int32
		var wpe []float32
		if c.maxPos > 0 {
			pos, wpe = e.ids(c.rows, c.maxPos), e.randn(c.maxPos*c.dim, 0.5)
		}
		dout := e.randn(c.rows*c.dim, 1)
		dwte0 := e.randn(c.vocab*c.dim, 0.1)
		var dwpe0 []float32
		if c.maxPos > 0 {
			dwpe0 = e.randn(c.maxPos*c.dim, 0.1)
		}
		opt := func(s *side, x []float32, acc bool) backend.Buf {
			switch {
			case x == nil:
				return backend.Buf{}
			case acc:
				return s.acc(x)
			}
			return s.inAs(weight, x)
		}
		optI := func(s *side, x []int32) backend.Buf {
			if x == nil {
				return backend.Buf{}
			}
			return s.i32(x)
		}
		e.check("EmbeddingForward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.outAs(stream, c.rows*c.dim)
				s.do("EmbeddingForward", s.b.EmbeddingForward(out, s.i32(ids), optI(s, pos), s.inAs(weight, wte), opt(s, wpe, false), c.dim))
				return []backend.Buf{out}
			})
			if got != nil {
				w := make([]float64, c.rows*c.dim)
				for r, id := range ids {
					for j := 0; j < c.dim; j++ {
						w[r*c.dim+j] = float64(wte[int(id)*c.dim+j])
						if wpe != nil {
							w[r*c.dim+j] += float64(wpe[int(pos[r])*c.dim+j])
						}
					}
				}
				e.oracle("rows of the table", got[0], w, 0, 1e-7)
			}
		})
		if wb := slices.Clone(wte); e.bf16Exact(wb) {
			e.check("EmbeddingForward", shape+" table bf16", func() {
				got := e.twin(func(s *side) []backend.Buf {
					out := s.outAs(stream, c.rows*c.dim)
					s.do("EmbeddingForward", s.b.EmbeddingForward(out, s.i32(ids), optI(s, pos), s.inAs(frozen, wb), opt(s, wpe, false), c.dim))
					return []backend.Buf{out}
				})
				if got != nil {
					w := make([]float64, c.rows*c.dim)
					for r, id := range ids {
						for j := 0; j < c.dim; j++ {
							w[r*c.dim+j] = float64(wb[int(id)*c.dim+j])
							if wpe != nil {
								w[r*c.dim+j] += float64(wpe[int(pos[r])*c.dim+j])
							}
						}
					}
					e.oracle("rows of the bf16 table", got[0], w, 0, 1e-7)
				}
			})
		}
		e.check("EmbeddingBackward", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				dwte, dwpe := s.acc(dwte0), opt(s, dwpe0, true)
				s.do("EmbeddingBackward", s.b.EmbeddingBackward(dwte, dwpe, s.inAs(stream, dout), s.i32(ids), optI(s, pos), c.dim))
				if dwpe.Nil() {
					return []backend.Buf{dwte}
				}
				return []backend.Buf{dwte, dwpe}
			})
			if got != nil {
				w := f64s(dwte0)
				for r, id := range ids {
					for j := 0; j < c.dim; j++ {
						w[int(id)*c.dim+j] += float64(dout[r*c.dim+j])
					}
				}
				e.oracle("scattered rows", got[0], w, 1e-6, 1e-6)
			}
		})
		inputs := [][]float32{wte}
		diff := []int{0}
		if wpe != nil {
			inputs, diff = append(inputs, wpe), append(diff, 1)
		}
		e.fd("EmbeddingBackward", shape, fdCase{
			inputs: inputs, diff: diff,
			forward: func(xs [][]float32) []float32 {
				out := zeros(c.rows * c.dim)
				var pe backend.Buf
				if len(xs) > 1 {
					pe = hf(xs[1])
				}
				e.ref.EmbeddingForward(hf(out), backend.HostI32(ids), backend.HostI32(pos), hf(xs[0]), pe, c.dim)
				return out
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				dte := zeros(len(xs[0]))
				if len(xs) > 1 {
					dpe := zeros(len(xs[1]))
					e.ref.EmbeddingBackward(hf(dte), hf(dpe), hf(g), backend.HostI32(ids), backend.HostI32(pos), c.dim)
					return [][]float32{dte, dpe}
				}
				e.ref.EmbeddingBackward(hf(dte), backend.Buf{}, hf(g), backend.HostI32(ids), backend.Buf{}, c.dim)
				return [][]float32{dte}
			},
		})
	}
}
