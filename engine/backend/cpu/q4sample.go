package cpu

// MulTSampled is MulT for the decode step's products, whose results only the sampling sees
// (Backend.Sampling): every row count up to q4DotMaxRows takes the int16 kernels' approximation
// (q4dot.go's header), not only one and two rows. Elsewhere (no int16 kernel, a code book past
// ±1) it is MulT.
func (d *Q4Dot) MulTSampled(y, x []float32, rows int) { d.mulT(true, y, x, rows) }

// q4dot16Go is q4dot16x4's and q4dot16x8's reference: q4row16Go for each of the t rows of x
// (x + i·ldx) against one weight row of n chunks, into y[i·ldy].
func q4dot16Go(t, n int, packed []byte, scales []float32, x []int16, ldx int, y []float32, ldy int, code *q4Tables) {
	for i := 0; i < t; i++ {
		q4row16Go(n, packed, scales, x[i*ldx:], y[i*ldy:i*ldy+1], code)
	}
}

// Int16Decoding reports whether the products that only feed sampling (q4dot.go) decode NF4 as
// int16 on this build and CPU; elsewhere they decode exactly.
func Int16Decoding() bool { return q4row16On }
