package backendtest

import (
	"fmt"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

func init() {
	register("decode", true, decodeOps)
	register("q4linears", true, q4LinearsOps)
}

// decodeOps: the decode step's ops, whose indices live in device buffers (AppendKV,
// Advance) and the fused 4-bit linear with its bias, LoRA term and residual (Q4Linear),
// against the reference and, for Q4Linear, a float64 oracle. Q4Linear's rows: 1 (columns
// not a multiple of 16: a device's scalar loads), 9 (two groups of 8), 17 (a device's tensor
// cores with a partial tile of rows), 40 (FP4), 64 (four whole tiles).
func decodeOps(e *env) {
	const seqs, capacity, width = 3, 6, 20
	seq, pos := []int32{2, 0, 1, 0}, []int32{5, 0, 3, 4} // rows 1 and 3: one sequence at two positions
	rows := len(seq)
	kc0, vc0 := e.randn(seqs*capacity*width, 1), e.randn(seqs*capacity*width, 1)
	k, v := e.randn(rows*width, 1), e.randn(rows*width, 1)
	e.check("AppendKV", fmt.Sprintf("rows=%d width=%d", rows, width), func() {
		got := e.twin(func(s *side) []backend.Buf {
			kc, vc := s.accAs(act, kc0), s.accAs(act, vc0)
			s.do("AppendKV", s.b.AppendKV(kc, vc, s.inAs(act, k), s.inAs(act, v), s.i32(seq), s.i32(pos), rows, width, capacity*width))
			return []backend.Buf{kc, vc}
		})
		if got != nil {
			want := append([]float32(nil), kc0...)
			for r := range seq {
				copy(want[(int(seq[r])*capacity+int(pos[r]))*width:], k[r*width:(r+1)*width])
			}
			e.exact("keys appended at seq·capacity + pos", got[0], want)
		}
	})
	e.check("Advance", fmt.Sprintf("rows=%d", rows), func() {
		for _, b := range []backend.Backend{e.ref, e.b} {
			s := &side{e: e, b: b}
			p := s.outI32(rows + 1)
			s.do("Upload", b.Upload(p, []int32{0, 4, 5, 7, 9}))
			s.do("Advance", b.Advance(p, rows, 6))
			got := s.getI32(p)
			s.free()
			want := []int32{1, 5, 5, 5, 9} // up to limit−1; the row past rows untouched
			for i := range want {
				if got[i] != want[i] {
					e.errorf("%s: positions %v, want %v", b.Name(), got, want)
					break
				}
			}
		}
	})
	for _, c := range pick(e, []struct {
		out, in, rows, r int
		bias, lora, res  bool
		opt              quant.Options
	}{
		{70, 90, 1, 4, true, true, true, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{130, 256, 9, 16, false, true, false, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{33, 80, 17, 0, true, false, true, quant.Options{Type: quant.NF4, BlockSize: 64}},
		{48, 128, 40, 8, true, true, false, quant.Options{Type: quant.FP4, BlockSize: 128, DoubleQuant: true}},
		{64, 64, 64, 16, true, true, true, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
	}) {
		shape := fmt.Sprintf("%s %d×%d rows=%d r=%d bias=%v res=%v", c.opt.Type, c.out, c.in, c.rows, c.r, c.bias, c.res)
		wf := e.randn(c.out*c.in, 0.05)
		w, err := quant.Quantize(wf, c.out, c.in, "float32", c.opt)
		if err != nil {
			e.t.Fatal(err)
		}
		dense := dequantize(w)
		x, bias, res := e.randn(c.rows*c.in, 1), e.randn(c.out, 0.5), e.randn(c.rows*c.out, 1)
		ld := c.r + 3 // xa as a slice of a wider product (the shared-input linears' stacked x·Aᵀ)
		xa, lb := e.randn(c.rows*ld, 1), e.randn(c.out*max(c.r, 1), 0.2)
		const scale = 0.75
		e.check("Q4Linear", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				q, err := s.b.UploadQ4(w)
				s.fail("UploadQ4", err)
				if q == nil {
					return nil
				}
				defer s.b.FreeQ4(q)
				y := s.outAs(stream, c.rows*c.out)
				var bb, rb, xb, lbb backend.Buf
				if c.bias {
					bb = s.in(bias)
				}
				if c.res {
					rb = s.inAs(stream, res)
				}
				if c.lora {
					xb, lbb = s.inAs(act, xa), s.inAs(act, lb)
				}
				s.do("Q4Linear", s.b.Q4Linear(y, rb, s.inAs(act, x), q, bb, xb, ld, lbb, c.r, scale, c.rows))
				return []backend.Buf{y}
			})
			if got == nil {
				return
			}
			want := make([]float64, c.rows*c.out)
			for i := 0; i < c.rows; i++ {
				for o := 0; o < c.out; o++ {
					var t float64
					for j := 0; j < c.in; j++ {
						t += float64(x[i*c.in+j]) * float64(dense[o*c.in+j])
					}
					if c.bias {
						t += float64(bias[o])
					}
					if c.lora {
						var l float64
						for k := 0; k < c.r; k++ {
							l += float64(xa[i*ld+k]) * float64(lb[o*c.r+k])
						}
						t += scale * l
					}
					if c.res {
						t += float64(res[i*c.out+o])
					}
					want[i*c.out+o] = t
				}
			}
			e.oracle("res + x·Wᵀ + bias + s·xa·Bᵀ", got[0], want, 3e-7*float64(c.in)+1e-5, 1e-5)
		})
	}
}

// q4LinearsOps: Q4Linears against a float64 oracle, linears sharing x as a block's q, k and v
// (or gate and up): members of different widths, with and without a bias and an adapter,
// their LoRA columns at their offsets of a wider xa; rows 1, 7 (the warps' kernel on a
// device), 17 and 64 (its tensor cores); a group of 2 into the stream; one whose adapters'
// ranks differ (a device's fallback, one op a linear); FP4 beside NF4.
func q4LinearsOps(e *env) {
	type lin struct {
		out, r int
		bias   bool
		opt    quant.Options
	}
	nf4 := quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}
	type group struct {
		in, rows int
		ls       []lin
		y        role
		whole    bool // xa exactly as wide as the ranks (a device's 16-byte loads of them), not a slice of a wider buffer
	}
	groups := pick(e, []group{
		{90, 1, []lin{{70, 4, true, nf4}, {30, 4, true, nf4}, {30, 4, true, nf4}}, act, false},
		{128, 7, []lin{{112, 16, true, nf4}, {16, 0, false, nf4}, {16, 16, true, quant.Options{Type: quant.FP4, BlockSize: 128, DoubleQuant: true}}}, act, false},
		{96, 17, []lin{{130, 8, false, nf4}, {64, 8, true, nf4}}, stream, false},
		{64, 64, []lin{{48, 16, true, nf4}, {80, 16, false, nf4}, {33, 16, true, nf4}}, act, false},
		{80, 9, []lin{{40, 8, true, nf4}, {24, 4, true, nf4}}, act, false},
	})
	// Long rows, as a model's widths give them (in 896, 4,864, 14,336: a device splits them
	// over more warps), and one not a multiple of 16 (a device's scalar loads), at 1 to 40 rows.
	groups = append(groups,
		group{14336, 16, []lin{{40, 16, false, nf4}}, stream, true},
		group{4864, 40, []lin{{24, 16, true, nf4}, {20, 16, true, nf4}}, stream, true},
		group{896, 1, []lin{{33, 16, true, nf4}, {16, 16, true, nf4}, {16, 16, true, nf4}}, act, true},
		group{4864, 7, []lin{{18, 16, false, nf4}}, stream, true},
		group{1000, 17, []lin{{24, 8, true, nf4}}, act, false},
	)
	for _, c := range groups {
		shape := fmt.Sprintf("in=%d rows=%d linears=%v", c.in, c.rows, c.ls)
		n := len(c.ls)
		dense, biases, bs := make([][]float32, n), make([][]float32, n), make([][]float32, n)
		ws := make([]*quant.Weight, n)
		offs := make([]int, n)
		width := 0
		for i, l := range c.ls {
			w, err := quant.Quantize(e.randn(l.out*c.in, 0.05), l.out, c.in, "float32", l.opt)
			if err != nil {
				e.t.Fatal(err)
			}
			ws[i], dense[i], biases[i] = w, dequantize(w), e.randn(l.out, 0.5)
			if l.r > 0 {
				bs[i] = e.randn(l.out*l.r, 0.2)
				offs[i] = width
				width += l.r
			}
		}
		ldxa := width + 3 // the group's xa as a slice of a wider buffer
		if c.whole {
			ldxa = width
		}
		x, xa := e.randn(c.rows*c.in, 1), e.randn(c.rows*ldxa, 1)
		const scale = 0.75
		e.check("Q4Linears", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				ls := make([]backend.Q4Out, n)
				var ys []backend.Buf
				for i, l := range c.ls {
					q, err := s.b.UploadQ4(ws[i])
					s.fail("UploadQ4", err)
					if q == nil {
						return nil
					}
					defer s.b.FreeQ4(q)
					ls[i] = backend.Q4Out{W: q, Y: s.outAs(c.y, c.rows*l.out)}
					if l.bias {
						ls[i].Bias = s.in(biases[i])
					}
					if l.r > 0 {
						ls[i].B, ls[i].R, ls[i].Off, ls[i].Scale = s.inAs(act, bs[i]), l.r, offs[i], scale
					}
					ys = append(ys, ls[i].Y)
				}
				s.do("Q4Linears", s.b.Q4Linears(ls, s.inAs(act, x), s.inAs(act, xa), ldxa, c.rows))
				return ys
			})
			if got == nil {
				return
			}
			for i, l := range c.ls {
				want := make([]float64, c.rows*l.out)
				for row := 0; row < c.rows; row++ {
					for o := 0; o < l.out; o++ {
						var t float64
						for j := 0; j < c.in; j++ {
							t += float64(x[row*c.in+j]) * float64(dense[i][o*c.in+j])
						}
						if l.bias {
							t += float64(biases[i][o])
						}
						var lt float64
						for k := 0; k < l.r; k++ {
							lt += float64(xa[row*ldxa+offs[i]+k]) * float64(bs[i][o*l.r+k])
						}
						want[row*l.out+o] = t + scale*lt
					}
				}
				e.oracle(fmt.Sprintf("linear %d: x·Wᵀ + bias + s·xa·Bᵀ", i), got[i], want, 3e-7*float64(c.in)+1e-5, 1e-5)
			}
		})
	}
}
