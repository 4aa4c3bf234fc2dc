package cpu

// The few-row float32 product y = x·Wᵀ (decoding with a float32 linear or LM head): like the
// 4-bit one (q4dot.go) it streams each weight row once against up to 8 rows of x held in
// cache, where the GEMM would first copy the weight into its packed panels.

// f32DotMaxRows is the most rows of x that take the few-row path; from about 16 rows the GEMM's
// register tiles reuse each weight load more than the kernels here (BenchmarkF32Dot).
const f32DotMaxRows = 64

// f32DotMulT sets y[rows, out] = x[rows, in]·wᵀ for w [out, in].
func f32DotMulT(y, x, w []float32, rows, in, out int) {
	f32Dot(rows, out, in, 1, x, in, w, in, 0, y, out)
}

// f32Dot sets C[m,n] = alpha·A[m,k]·Bᵀ + beta·C for B [n,k] (row strides lda, ldb, ldc), as
// Sgemm(false, true, …) does, split over cores by rows of B. beta = 0 ignores what C held.
func f32Dot(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	_, _, _ = a[(m-1)*lda+k-1], b[(n-1)*ldb+k-1], c[(m-1)*ldc+n-1]
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			for j := range ci {
				ci[j] *= beta
			}
		}
	}
	if k == 0 || alpha == 0 {
		return
	}
	if alpha != 1 { // the few rows of A scaled once
		s := make([]float32, m*k)
		for i := 0; i < m; i++ {
			for p, v := range a[i*lda : i*lda+k] {
				s[i*k+p] = alpha * v
			}
		}
		a, lda = s, k
	}
	ForPieces(n, max(1, (1<<15)/max(k, 1)), func(lo, hi int) { f32DotRange(c, a, lda, b, ldb, m, k, ldc, lo, hi) })
}

// f32DotRange adds the output rows lo..hi-1 to y, 128 KB of weights a block (fewRowBlocks).
func f32DotRange(y, x []float32, ldx int, w []float32, ldw, rows, in, ldy, lo, hi int) {
	chunks := in / q4Chunk
	whole := chunks * q4Chunk
	var tail func(t, i0, r0, r1 int)
	if whole < in {
		tail = func(t, i0, r0, r1 int) {
			for i := i0; i < i0+t; i++ {
				xs := x[i*ldx+whole : i*ldx+in]
				for r := r0; r < r1; r++ {
					var s float32
					for k, v := range w[r*ldw+whole : r*ldw+in] {
						s += v * xs[k]
					}
					y[i*ldy+r] += s
				}
			}
		}
	}
	fewRowBlocks(rows, chunks, lo, hi, max(1, (32<<10)/max(in, 1)),
		func(i0, r0, r1 int) { f32row(chunks, w[r0*ldw:], ldw, x[i0*ldx:], y[i0*ldy+r0:i0*ldy+r1]) },
		func(t, i0, r, k0, n int) {
			f32dot(t, n, w[r*ldw+k0*q4Chunk:], x[i0*ldx+k0*q4Chunk:], ldx, y[i0*ldy+r:], ldy)
		}, tail)
}

// f32dotGo is the kernels' reference and the path where they do not run: it adds to
// y[i·ldy], for i < t, the dot product of n chunks of 64 floats of w with x[i·ldx:].
func f32dotGo(t, n int, w, x []float32, ldx int, y []float32, ldy int) {
	w = w[:n*q4Chunk]
	for i := 0; i < t; i++ {
		xs := x[i*ldx : i*ldx+n*q4Chunk]
		var s float32
		for k, v := range w {
			s += v * xs[k]
		}
		y[i*ldy] += s
	}
}
