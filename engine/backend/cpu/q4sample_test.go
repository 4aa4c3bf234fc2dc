package cpu

import (
	"math"
	"testing"

	"rlhfstation/quant"
)

// mag16 is Σ|factor·code16·x16| over weight row o's products with a quantized row of x
// (quantX16): the scale of the float32 rounding by which two kernels summing the same integer
// products may differ.
func mag16(d *Q4Dot, xq []int16, o int) float64 {
	w := d.W
	chunks := w.Cols / q4Chunk
	var mag float64
	for j := 0; j < chunks; j++ {
		xs := xq[j*q4X16Len : (j+1)*q4X16Len]
		f := math.Abs(float64(d.scales[o*chunks+j] * x16Factor(xs)))
		for s, v := range q4Row16 {
			p := o*w.Cols + j*q4Chunk + int(v)
			q := w.Packed[p/2] >> 4
			if p%2 == 1 {
				q = w.Packed[p/2] & 15
			}
			mag += f * math.Abs(float64(d.tables.code16[q])*float64(xs[s]))
		}
	}
	return mag
}

// TestQ4Dot16MatchesDequantized: 3 to 64 rows of x through MulTSampled (the decode step's
// int16 path: q4dot16x8, q4dot16x4, q4row16x2 and q4row16 for the groups of 8, 4, 2 and 1),
// assembly and Go reference, each row against the exact product within the quantization's
// bound (check16), and the assembly against the reference's identical integer sums within
// float32 rounding. MulTSampled must take the approximation (its result differs from MulT's
// exact one) and MulT must not (at 3 rows and more it is the exact kernels' bits).
func TestQ4Dot16MatchesDequantized(t *testing.T) {
	kernels := testKernels()
	defer func(k string, on bool) { q4dotKernel, q4row16On = k, on }(q4dotKernel, q4row16On)
	q4row16On = true
	for ci, c := range q4Row16Cases {
		wf := randn(c.out*c.in, uint64(90+ci))
		wf[7] = -9
		w, err := quant.Quantize(wf, c.out, c.in, "", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		chunks := c.in / q4Chunk
		for _, rows := range []int{3, 4, 8, 13, 64} {
			if rows == 64 && c.out*c.in > 200_000 {
				continue // the check's float64 reference is the slow part
			}
			var x []float32
			for i := 0; i < rows; i++ {
				x = append(x, row16X(c.in, uint64(1000*ci+i))...)
			}
			ref := make([]float32, rows*c.out)
			for _, k := range kernels {
				q4dotKernel = k
				y := randn(rows*c.out, 7) // overwritten, not added to
				d.MulTSampled(y, x, rows)
				for i := 0; i < rows; i++ {
					if err := check16(d, x[i*c.in:(i+1)*c.in], y[i*c.out:(i+1)*c.out]); err != nil {
						t.Fatalf("%s %d×%d %v, row %d of %d: %v", k, c.out, c.in, c.opt, i, rows, err)
					}
				}
				exact := make([]float32, rows*c.out)
				d.MulT(exact, x, rows)
				same := true
				for o := range exact {
					same = same && math.Float32bits(exact[o]) == math.Float32bits(y[o])
				}
				if same {
					t.Fatalf("%s %d×%d, %d rows: MulTSampled gave MulT's exact bits: the int16 path did not run", k, c.out, c.in, rows)
				}
				if k == "go" {
					copy(ref, y)
					continue
				}
				xq := make([]int16, chunks*q4X16Len)
				for i := 0; i < rows; i++ {
					quantX16(xq, x[i*c.in:(i+1)*c.in])
					for o := 0; o < c.out; o++ {
						mag := mag16(d, xq, o)
						if e := math.Abs(float64(y[i*c.out+o]) - float64(ref[i*c.out+o])); e > 1e-6*mag {
							t.Fatalf("%s %d×%d, row %d of %d: y[%d] = %v, the reference %v (|difference| %.3g, Σ|terms| %.3g)",
								k, c.out, c.in, i, rows, o, y[i*c.out+o], ref[i*c.out+o], e, mag)
						}
					}
				}
			}
		}
	}
	// MulT keeps the exact decoding at 3 rows and more: its result is MulT's with the int16
	// kernels off, bit for bit.
	c := q4Row16Cases[2]
	w, err := quant.Quantize(randn(c.out*c.in, 95), c.out, c.in, "", c.opt)
	if err != nil {
		t.Fatal(err)
	}
	d := NewQ4Dot(w)
	x := randn(5*c.in, 96)
	on, off := make([]float32, 5*c.out), make([]float32, 5*c.out)
	d.MulT(on, x, 5)
	q4row16On = false
	d.MulT(off, x, 5)
	for o := range on {
		if math.Float32bits(on[o]) != math.Float32bits(off[o]) {
			t.Fatalf("MulT at 5 rows: y[%d] = %v with the int16 kernels on, %v off", o, on[o], off[o])
		}
	}
}

// TestQ4Dot16CheckFails: the checks above fail on the likely slips, run through q4dot16 (4 and
// 8 rows of x, strided) itself: the int16 code book's byte planes swapped, x quantized to
// ±32768 (the maximum wraps to -32768), x in the exact one-row kernel's order, and the
// factor without its 2^-14 (q4row16's slips, TestQ4Row16CheckFails, made by the same helpers).
func TestQ4Dot16CheckFails(t *testing.T) {
	kernels := testKernels()
	defer func(k string) { q4dotKernel = k }(q4dotKernel)
	c := q4Row16Cases[2]
	w, err := quant.Quantize(randn(c.out*c.in, 62), c.out, c.in, "", c.opt)
	if err != nil {
		t.Fatal(err)
	}
	d := NewQ4Dot(w)
	x := row16X(c.in, 703)
	chunks := c.in / q4Chunk
	ldx := chunks*q4X16Len + 16
	// run gives the t rows' outputs, each the same row of x (t copies ldx apart, y's rows
	// out+3 apart), as t slices of out values.
	run := func(tk int, tables *q4Tables, xq []int16) [][]float32 {
		xs := make([]int16, tk*ldx)
		for i := 0; i < tk; i++ {
			copy(xs[i*ldx:], xq)
		}
		ldy := c.out + 3
		y := make([]float32, tk*ldy)
		for o := 0; o < c.out; o++ {
			q4dot16(tk, chunks, w.Packed[o*chunks*q4Chunk/2:(o+1)*chunks*q4Chunk/2], d.scales[o*chunks:(o+1)*chunks], xs, ldx, y[o:], ldy, tables)
		}
		ys := make([][]float32, tk)
		for i := range ys {
			ys[i] = y[i*ldy : i*ldy+c.out]
		}
		return ys
	}
	sl := newRow16Slips(d, x, chunks)
	good, swapped, requant, noShift := sl.good, &sl.swapped, sl.requant, sl.noShift

	for _, k := range kernels {
		q4dotKernel = k
		for _, tk := range []int{4, 8} {
			for i, y := range run(tk, d.tables, good) {
				if err := check16(d, x, y); err != nil {
					t.Fatalf("%s, %d rows: row %d of the unbroken kernel fails: %v", k, tk, i, err)
				}
			}
			for name, ys := range map[string][][]float32{
				"planes swapped":      run(tk, swapped, good),
				"x to ±32768":         run(tk, d.tables, requant(32768, &q4Row16)),
				"x in q4row1's order": run(tk, d.tables, requant(x16Max, &q4Row1AVX2)),
				"factor ×2^14":        run(tk, d.tables, noShift),
			} {
				for i, y := range ys {
					if check16(d, x, y) == nil {
						t.Errorf("%s, %d rows, %s: check16 passes on row %d", k, tk, name, i)
					}
				}
			}
		}
	}
}
