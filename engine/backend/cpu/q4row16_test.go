package cpu

import (
	"fmt"
	"math"
	"testing"

	"rlhfstation/quant"
)

// q4Row16Cases are the shapes the int16 one-row path is checked on: rows that split unevenly
// over the goroutines, an odd and an even count of chunks (the kernel takes two a pass), NF4
// and FP4, blocks of 64 and 256, double quantization or not.
var q4Row16Cases = []struct {
	out, in int
	opt     quant.Options
}{
	{1, 64, quant.Default()},
	{7, 128, quant.Options{Type: quant.NF4, BlockSize: 64}},
	{131, 896, quant.Default()},
	{37, 4864, quant.Options{Type: quant.FP4, BlockSize: 256, DoubleQuant: true}},
	{300, 192, quant.Options{Type: quant.NF4, BlockSize: 128, DoubleQuant: true}},
}

// row16X is a row of x for the int16 path's tests: normal values, an outlier (its chunk's
// scale is large, so the others in it lose precision), a chunk of zeros and one of tiny values.
func row16X(in int, seed uint64) []float32 {
	x := randn(in, seed)
	x[3] = 40
	if in >= 192 {
		clear(x[64:128])
		for i := 128; i < 192; i++ {
			x[i] *= 1e-20
		}
	}
	return x
}

// check16 checks y = x·Wᵀ from the int16 path against x·dequantize(W)ᵀ in float64: the error
// of each output must be within the quantization's bound, Σ over its products of
// s·(|code|·scale_x/2 + 2^-15·|x| + 2^-16·scale_x) (s the chunk's scale, scale_x =
// max|x in the chunk|/x16Max; from code16 = code·2^14 + e, x16 = x/scale_x + e', |e|, |e'| ≤
// 1/2), plus 1e-6 of Σ|products| for the float32 sums. It returns the first violation.
func check16(d *Q4Dot, x, y []float32) error {
	w := d.W
	in, out := w.Cols, w.Rows
	dense := make([]float32, out*in)
	w.Dequantize(dense)
	chunks := in / q4Chunk
	sx := make([]float64, chunks)
	for c := range sx {
		for _, v := range x[c*q4Chunk : (c+1)*q4Chunk] {
			sx[c] = max(sx[c], math.Abs(float64(v))/x16Max)
		}
	}
	for o := 0; o < out; o++ {
		var want, abs, bound float64
		for i := 0; i < in; i++ {
			p := float64(x[i]) * float64(dense[o*in+i])
			want += p
			abs += math.Abs(p)
			q := w.Packed[(o*in+i)/2] >> 4
			if i%2 == 1 {
				q = w.Packed[(o*in+i)/2] & 15
			}
			c := i / q4Chunk
			s := math.Abs(float64(d.scales[o*chunks+c]))
			code := math.Abs(float64(d.tables.code[q]))
			bound += s * (code*sx[c]/2 + math.Abs(float64(x[i]))/(1<<15) + sx[c]/(1<<16))
		}
		got := float64(y[o])
		if e := math.Abs(got - want); !(e <= bound+1e-6*abs) {
			return fmt.Errorf("y[%d] = %v, want %v: |error| %.3g past the bound %.3g (Σ|products| %.3g)", o, got, want, e, bound+1e-6*abs, abs)
		}
	}
	return nil
}

// TestQ4Row16MatchesDequantized: one and two rows of x through the int16 path (MulT), assembly
// and Go reference, against the exact product within the quantization's bound (check16), and
// the assembly against the reference's identical integer sums within float32 rounding of the
// sums.
func TestQ4Row16MatchesDequantized(t *testing.T) {
	kernels := testKernels()
	defer func(k string, on bool) { q4dotKernel, q4row16On = k, on }(q4dotKernel, q4row16On)
	q4row16On = true
	for ci, c := range q4Row16Cases {
		wf := randn(c.out*c.in, uint64(60+ci))
		wf[5] = 9 // an outlier block
		w, err := quant.Quantize(wf, c.out, c.in, "", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		if !d.tables.has16 {
			t.Fatalf("%v: the code book is not held as int16", c.opt)
		}
		for rows := 1; rows <= 2; rows++ {
			x := append(row16X(c.in, uint64(700+ci)), randn(c.in, uint64(800+ci))...)[:rows*c.in]
			ref := make([]float32, rows*c.out)
			for _, k := range kernels {
				q4dotKernel = k
				y := randn(rows*c.out, 7) // overwritten, not added to
				d.MulT(y, x, rows)
				for i := 0; i < rows; i++ {
					if err := check16(d, x[i*c.in:(i+1)*c.in], y[i*c.out:(i+1)*c.out]); err != nil {
						t.Fatalf("%s %d×%d %v, row %d of %d: %v", k, c.out, c.in, c.opt, i, rows, err)
					}
				}
				if k == "go" {
					copy(ref, y)
					continue
				}
				// The assembly against the reference: the same integer sums, so they differ
				// by float32 rounding only, measured against Σ|factor·code16·x16|.
				xq := make([]int16, c.in/q4Chunk*q4X16Len)
				for i := 0; i < rows; i++ {
					quantX16(xq, x[i*c.in:(i+1)*c.in])
					for o := 0; o < c.out; o++ {
						var mag float64
						for j := 0; j < c.in/q4Chunk; j++ {
							xs := xq[j*q4X16Len : (j+1)*q4X16Len]
							f := math.Abs(float64(d.scales[o*c.in/q4Chunk+j] * x16Factor(xs)))
							for s, v := range q4Row16 {
								p := o*c.in + j*q4Chunk + int(v)
								q := w.Packed[p/2] >> 4
								if p%2 == 1 {
									q = w.Packed[p/2] & 15
								}
								mag += f * math.Abs(float64(d.tables.code16[q])*float64(xs[s]))
							}
						}
						if e := math.Abs(float64(y[i*c.out+o]) - float64(ref[i*c.out+o])); e > 1e-6*mag {
							t.Fatalf("%s %d×%d, row %d of %d: y[%d] = %v, the reference %v (|difference| %.3g, Σ|terms| %.3g)",
								k, c.out, c.in, i, rows, o, y[i*c.out+o], ref[i*c.out+o], e, mag)
						}
					}
				}
			}
		}
	}
}

// TestQ4Row16CheckFails: the checks above fail on the likely slips, run through the kernels
// themselves: the int16 code book's byte planes swapped, x quantized to ±32768 under the
// factor for ±x16Max (the maximum wraps to -32768), x in the wrong order (the exact one-row
// kernel's), and the factor without its 2^-14.
func TestQ4Row16CheckFails(t *testing.T) {
	kernels := testKernels()
	defer func(k string) { q4dotKernel = k }(q4dotKernel)
	c := q4Row16Cases[2]
	w, err := quant.Quantize(randn(c.out*c.in, 61), c.out, c.in, "", c.opt)
	if err != nil {
		t.Fatal(err)
	}
	d := NewQ4Dot(w)
	x := row16X(c.in, 702)
	chunks := c.in / q4Chunk
	run := func(tables *q4Tables, xq []int16) []float32 {
		y := make([]float32, c.out)
		q4rowInt16(1, c.out, chunks, w.Packed, d.scales, xq, 0, y, 0, tables)
		return y
	}
	sl := newRow16Slips(d, x, chunks)
	good, swapped, requant, noShift := sl.good, &sl.swapped, sl.requant, sl.noShift

	for _, k := range kernels {
		q4dotKernel = k
		if err := check16(d, x, run(d.tables, good)); err != nil {
			t.Fatalf("%s: the unbroken kernel fails: %v", k, err)
		}
		for name, y := range map[string][]float32{
			"planes swapped":      run(swapped, good),
			"x to ±32768":         run(d.tables, requant(32768, &q4Row16)),
			"x in q4row1's order": run(d.tables, requant(x16Max, &q4Row1AVX2)),
			"factor ×2^14":        run(d.tables, noShift),
		} {
			if check16(d, x, y) == nil {
				t.Errorf("%s, %s: check16 passes", k, name)
			}
		}
	}
}

// row16Slips are the int16 kernels' likely mistakes, built from x's good quantization (good):
// the code book's byte planes swapped, x requantized to another limit or in another order, and
// the factor without its 2^-14 (noShift).
type row16Slips struct {
	good, noShift []int16
	swapped       q4Tables
	requant       func(limit float64, order *[q4Chunk]uint8) []int16
}

func newRow16Slips(d *Q4Dot, x []float32, chunks int) row16Slips {
	good := make([]int16, chunks*q4X16Len)
	quantX16(good, x)
	swapped := *d.tables
	swapped.planes16[0], swapped.planes16[1] = swapped.planes16[1], swapped.planes16[0]
	for i, v := range swapped.code16 {
		swapped.code16[i] = int16(uint16(v)<<8 | uint16(v)>>8)
	}
	requant := func(limit float64, order *[q4Chunk]uint8) []int16 {
		xq := append([]int16(nil), good...)
		for j := 0; j < chunks; j++ {
			var m float64
			for _, v := range x[j*q4Chunk : (j+1)*q4Chunk] {
				m = max(m, math.Abs(float64(v)))
			}
			for s, v := range order {
				if m > 0 {
					xq[j*q4X16Len+s] = int16(int32(math.Round(float64(x[j*q4Chunk+int(v)]) * limit / m)))
				}
			}
		}
		return xq
	}
	noShift := append([]int16(nil), good...)
	for j := 0; j < chunks; j++ {
		b := math.Float32bits(x16Factor(noShift[j*q4X16Len:]) * (1 << 14))
		for k := 0; k < 8; k++ {
			noShift[j*q4X16Len+q4Chunk+2*k], noShift[j*q4X16Len+q4Chunk+2*k+1] = int16(uint16(b)), int16(uint16(b>>16))
		}
	}
	return row16Slips{good: good, noShift: noShift, swapped: swapped, requant: requant}
}

// TestQ4Row16WorstCaseSums: the int16 kernels' int32 lanes at their bound (gen_q4dot.go's
// emitRow16): every code ±1 (code16 ±16384) against x all equal (x16 = x16Max), so that each
// lane sums 8 products of ±16384·16383 = ±2,147,221,504, for 1, 2, 4 and 8 rows of x. Each row
// must be within check16's bound. The same x quantized to ±32767 (the factor to match) must
// fail it on the assembly, whose lanes then wrap; the Go reference sums in int64 and does not.
func TestQ4Row16WorstCaseSums(t *testing.T) {
	kernels := testKernels()
	defer func(k string, on bool) { q4dotKernel, q4row16On = k, on }(q4dotKernel, q4row16On)
	q4row16On = true
	const out, in = 3, 128
	chunks := in / q4Chunk
	for _, sign := range []float32{1, -1} {
		wf := make([]float32, out*in)
		for i := range wf {
			wf[i] = sign
		}
		w, err := quant.Quantize(wf, out, in, "", quant.Default())
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		for q := range w.Packed {
			if c := d.tables.code16[w.Packed[q]>>4]; c != int16(sign*(1<<14)) {
				t.Fatalf("sign %v: code16 %d, want ±16384", sign, c)
			}
		}
		x := make([]float32, 8*in)
		for i := range x {
			x[i] = 0.5
		}
		// wide: x to ±32767 with its factor, which the assembly's lanes cannot hold.
		wide := make([]int16, 8*chunks*q4X16Len)
		for i := range wide {
			if i%q4X16Len < q4Chunk {
				wide[i] = 32767
				continue
			}
			b := math.Float32bits(float32(0.5 / 32767 / (1 << 14)))
			wide[i] = int16(uint16(b >> (16 * (i % 2))))
		}
		for _, k := range kernels {
			q4dotKernel = k
			for _, rows := range []int{1, 2, 4, 8} {
				y := make([]float32, rows*out)
				d.MulTSampled(y, x[:rows*in], rows)
				for i := 0; i < rows; i++ {
					if err := check16(d, x[:in], y[i*out:(i+1)*out]); err != nil {
						t.Fatalf("%s, sign %v, %d rows, row %d: %v", k, sign, rows, i, err)
					}
				}
				// The slip, through the kernels themselves.
				clear(y)
				ldx := chunks * q4X16Len
				for o := 0; o < out; o++ {
					p, s := w.Packed[o*chunks*q4Chunk/2:(o+1)*chunks*q4Chunk/2], d.scales[o*chunks:(o+1)*chunks]
					if rows <= 2 {
						q4rowInt16(rows, 1, chunks, p, s, wide, ldx, y[o:], out, d.tables)
					} else {
						q4dot16(rows, chunks, p, s, wide, ldx, y[o:], out, d.tables)
					}
				}
				for i := 0; i < rows; i++ {
					err := check16(d, x[:in], y[i*out:(i+1)*out])
					if k == "go" && err != nil {
						t.Fatalf("go, sign %v, %d rows, x to ±32767: the int64 reference fails: %v", sign, rows, err)
					}
					if k != "go" && err == nil {
						t.Errorf("%s, sign %v, %d rows, x to ±32767: check16 passes on row %d", k, sign, rows, i)
					}
				}
			}
		}
	}
}
