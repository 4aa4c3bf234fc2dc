package cpu

// MulTSampled is MulT for the decode step's products, whose results only the sampling sees
// (Backend.Sampling): every row count up to q4DotMaxRows takes the int16 kernels' approximation
// (q4dot.go's header), not only one and two rows. Elsewhere (no int16 kernel, a code book past
// ±1) it is MulT.
func (d *Q4Dot) MulTSampled(y, x []float32, rows int) {
	if rows <= 2 || rows > q4DotMaxRows || !q4row16On || !d.tables.has16 {
		d.MulT(y, x, rows)
		return
	}
	w := d.W
	in, out := w.Cols, w.Rows
	_, _ = x[rows*in-1], y[rows*out-1]
	chunks := in / q4Chunk
	ldx := chunks * q4X16Len
	bp := x16Scratch.Get().(*[]int16)
	if cap(*bp) < rows*ldx {
		*bp = make([]int16, rows*ldx)
	}
	xq := (*bp)[:rows*ldx]
	For(rows, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			quantX16(xq[i*ldx:(i+1)*ldx], x[i*in:(i+1)*in])
		}
	})
	clear(y[:rows*out])
	code := d.tables
	ForPieces(out, max(1, (1<<16)/in), 4, func(lo, hi int) {
		fewRowBlocks(rows, chunks, lo, hi, max(1, (64<<10)/in),
			func(i0, r0, r1 int) {
				c0, c1 := r0*chunks, r1*chunks
				q4rowInt16(1, r1-r0, chunks, w.Packed[c0*q4Chunk/2:c1*q4Chunk/2], d.scales[c0:c1], xq[i0*ldx:], ldx, y[i0*out+r0:], out, code)
			},
			func(t, i0, r, k0, n int) {
				c := r*chunks + k0
				p, s, xs, ys := w.Packed[c*q4Chunk/2:(c+n)*q4Chunk/2], d.scales[c:c+n], xq[i0*ldx+k0*q4X16Len:], y[i0*out+r:]
				if t == 2 {
					q4rowInt16(2, 1, n, p, s, xs, ldx, ys, out, code)
				} else {
					q4dot16(t, n, p, s, xs, ldx, ys, out, code)
				}
			}, nil)
	})
	x16Scratch.Put(bp)
}

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
