package backendtest

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

func init() { register("fewrows", true, fewRowOps) }

// fewRowOps: the products of decoding, a few rows of x (1 to 64, the CPU's few-row kernels,
// which take 8, 4, 2 and 1 rows at a time) against a weight streamed once. The 4-bit product
// on widths that are whole chunks of 64 (the kernels) and not (the GEMM), output counts that
// split unevenly over goroutines, 65 rows (past the kernels); the float32 linear, LM head and
// LoRA-shaped GEMMs (strided, alpha and beta, a k below one chunk and one with a tail).
func fewRowOps(e *env) {
	for _, c := range pick(e, []struct {
		out, in int
		opt     quant.Options
	}{
		{67, 192, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{5, 320, quant.Options{Type: quant.FP4, BlockSize: 128, DoubleQuant: false}},
		{131, 256, quant.Options{Type: quant.NF4, BlockSize: 256, DoubleQuant: true}},
		{9, 96, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
	}) {
		wf := e.randn(c.out*c.in, 0.05)
		wf[1] = 0.6 // an outlier block
		w, err := quant.Quantize(wf, c.out, c.in, "float32", c.opt)
		if err != nil {
			e.t.Fatal(err)
		}
		dense := dequantize(w)
		for _, rows := range pick(e, []int{1, 2, 3, 7, 9, 15, 33, 64, 65}) {
			shape := fmt.Sprintf("%s %d×%d block %d double=%v rows=%d", c.opt.Type, c.out, c.in, c.opt.BlockSize, c.opt.DoubleQuant, rows)
			x := e.randn(rows*c.in, 1)
			e.check("Q4MulT", "few rows: "+shape, func() {
				var made []func()
				got := e.twin(func(s *side) []backend.Buf {
					y := s.outAs(act, rows*c.out)
					q, err := s.b.UploadQ4(w)
					s.fail("UploadQ4", err)
					if q != nil {
						made = append(made, func() { s.b.FreeQ4(q) })
						s.do("Q4MulT", s.b.Q4MulT(y, s.inAs(act, x), q, rows))
					}
					return []backend.Buf{y}
				})
				for _, f := range made {
					f()
				}
				if got == nil {
					return
				}
				want := make([]float64, rows*c.out)
				for r := 0; r < rows; r++ {
					for o := 0; o < c.out; o++ {
						for i := 0; i < c.in; i++ {
							want[r*c.out+o] += float64(x[r*c.in+i]) * float64(dense[o*c.in+i])
						}
					}
				}
				abs := 3e-7*float64(c.in)*0.05 + 1e-6
				if rows <= 2 && c.in%64 == 0 && c.opt.BlockSize%64 == 0 {
					abs += int16Bound(x, dense, rows, c.in, c.out, c.opt.BlockSize)
				}
				e.oracle("x·dequantize(W)ᵀ", got[0], want, abs, 1e-5)
			})
		}
	}
	for _, c := range pick(e, [][3]int{{1, 192, 77}, {3, 130, 5}, {8, 64, 300}, {9, 1000, 17}, {64, 65, 33}}) {
		rows, in, out := c[0], c[1], c[2]
		shape := fmt.Sprintf("rows=%d in=%d out=%d", rows, in, out)
		x, w, bias := e.randn(rows*in, 1), e.randn(out*in, 1/math.Sqrt(float64(in))), e.randn(out, 1)
		e.check("MatmulForward", "few rows, with Logits: "+shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				y, logits := s.outAs(act, rows*out), s.out(rows*out)
				s.do("MatmulForward", s.b.MatmulForward(y, s.inAs(act, x), s.inAs(weight, w), s.in(bias), rows, in, out))
				s.do("Logits", s.b.Logits(logits, s.inAs(act, x), s.inAs(weight, w), rows, in, out))
				return []backend.Buf{y, logits}
			})
			if got == nil {
				return
			}
			want, wantNB := make([]float64, rows*out), make([]float64, rows*out)
			for r := 0; r < rows; r++ {
				for o := 0; o < out; o++ {
					var sum float64
					for i := 0; i < in; i++ {
						sum += float64(x[r*in+i]) * float64(w[o*in+i])
					}
					want[r*out+o], wantNB[r*out+o] = sum+float64(bias[o]), sum
				}
			}
			tol := 3e-7*float64(in) + 1e-6
			e.oracle("x·Wᵀ + b", got[0], want, tol, 1e-5)
			e.oracle("logits x·Wᵀ", got[1], wantNB, tol, 1e-5)
		})
	}
	// LoRA beside a decoded linear: x·Aᵀ (k = in) then y += s·(x·Aᵀ)·Bᵀ (k = r).
	for i, c := range pick(e, [][3]int{{1, 16, 192}, {3, 300, 16}, {8, 8, 130}, {5, 77, 65}, {2, 4, 8}}) {
		coef := [][2]float32{{1, 0}, {2, 1}, {-0.5, 0.25}}[i%3]
		g := gemmCase{e: e, tb: true, m: c[0], n: c[1], k: c[2], alpha: coef[0], beta: coef[1], pad: 2 * (i % 2)}
		e.check("GEMM", "few rows: "+g.String(), func() { g.run() })
	}
	// A decode step's x·Aᵀ for linears sharing x (a device's own kernel for m ≤ 64, n ≤ 256):
	// 1, 7 and 64 rows; k a 0.5B model's widths (896, 4864) and odd; n r × 1, 3 and 5; A an
	// activation and the copies of A, bf16 on a device, as the model gives them.
	for i, c := range pick(e, [][3]int{{1, 16, 896}, {7, 48, 4864}, {64, 80, 901}, {7, 80, 97}, {64, 48, 896}, {1, 256, 33}}) {
		coef := [][2]float32{{1, 0}, {0.5, 1}}[i%2]
		g := gemmCase{e: e, tb: true, m: c[0], n: c[1], k: c[2], alpha: coef[0], beta: coef[1], pad: 3 * (i % 2), actB: true}
		e.check("GEMM", "x·Aᵀ of a decode step: "+g.String(), func() { g.run() })
	}
	// An 8B model's widths (k 4,096 and 14,336: a device's kernel loops over k several times),
	// rows 9, 17 and 40, n odd (a device's block of columns cut short); pad 0
	// keeps 8-value loads possible, pad 3 not.
	for _, c := range [][4]int{{9, 17, 14336, 0}, {17, 48, 4096, 3}, {40, 16, 4864, 0}} {
		g := gemmCase{e: e, tb: true, m: c[0], n: c[1], k: c[2], alpha: 1, beta: 0.5, pad: c[3], actB: true}
		e.check("GEMM", "x·Aᵀ of a decode step: "+g.String(), func() { g.run() })
	}
}

// int16Bound is the largest error of the CPU reference's product of one or two rows of x
// alone, which quantizes x to int16 per 64 values and holds the code book as int16
// (cpu.q4row16): each product code·s·x is off by at most s·(|code|·sx/2 + 2^-15·|x| +
// 2^-16·sx), sx = max|x| over its 64 values/16383 (cpu's x16Max), s the block's scale (the largest
// |dequantized value| in the block: its absmax takes the code ±1). With 67×192 and blocks of
// 64 it is about 5e-5 (4e-5 with x to ±32767) where the float32 bound is 4e-6.
func int16Bound(x []float32, dense []float32, rows, in, out, block int) float64 {
	var worst float64
	for r := 0; r < rows; r++ {
		xr := x[r*in : (r+1)*in]
		for o := 0; o < out; o++ {
			wr := dense[o*in : (o+1)*in]
			var b float64
			for c0 := 0; c0 < in; c0 += 64 {
				var sx, s float64
				for _, v := range xr[c0 : c0+64] {
					sx = max(sx, math.Abs(float64(v))/16383)
				}
				b0 := (o*in + c0) / block * block                       // blocks run over the flattened weight
				for _, v := range dense[b0:min(b0+block, len(dense))] { // the last block may be short
					s = max(s, math.Abs(float64(v)))
				}
				for i := c0; i < c0+64; i++ {
					b += math.Abs(float64(wr[i]))*sx/2 + s*(math.Abs(float64(xr[i]))/(1<<15)+sx/(1<<16))
				}
			}
			worst = max(worst, b)
		}
	}
	return worst
}
