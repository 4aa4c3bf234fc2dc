package gemm

// kernel is one register-blocked micro-kernel with the cache blocking tuned for it.
//
// run computes the mr×nr tile C = alpha·Σ_p Ap[p·mr+i]·Bp[p·nr+j] + beta·C over kc steps, where
// Ap and Bp are one packed micro-panel of A and of B (see PackB). With load false it never reads
// C, so C may hold garbage (NaN) and beta is ignored.
type kernel struct {
	name   string
	mr, nr int
	// mc×kc is the packed A block (kept in L2), kc×nr one packed B micro-panel (kept in L1),
	// kc×nc the packed B block.
	mc, kc, nc int
	run        func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool)

	// A·Bᵀ (NT) with m ≤ dotM or n ≤ dotN goes through dot instead: with few rows on one
	// side, packing the other costs more than the multiply, so dot reads both in place.
	dotM, dotN int
	// dot computes the 4×4 tile C[i][j] = alpha·Σ_p a[i·lda+p]·b[j·ldb+p] (+ beta·C when load).
	dot func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, load bool)
	// narrow, if set, is the kernel to use when n ≤ narrow.nr.
	narrow *kernel

	// op(A)·B (B not transposed) with m ≤ directM goes through direct: run reading B in
	// place, row p at b[p·ldb:], since each element of B is used only m times and a packed
	// copy would cost more than it saves.
	directM int
	direct  func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool, ldb int)
	// short, if set, is a direct kernel with fewer rows, for an m that mr would pad a lot
	// (LoRA's rank 8, 16, 32).
	short *kernel
}

// goKernel is the portable kernel: plain Go, 4×4 so the accumulators stay in registers.
var goKernel = &kernel{name: "go", mr: 4, nr: 4, mc: 128, kc: 256, nc: 1024, run: kernelGo}

func kernelGo(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool) {
	a = a[:kc*4]
	b = b[:kc*4]
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	for p := 0; p < len(a) && p < len(b); p += 4 {
		ap := a[p : p+4 : p+4]
		bp := b[p : p+4 : p+4]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		a0 := ap[0]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		a1 := ap[1]
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		a2 := ap[2]
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		a3 := ap[3]
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	storeRow(c[0*ldc:], alpha, beta, load, c00, c01, c02, c03)
	storeRow(c[1*ldc:], alpha, beta, load, c10, c11, c12, c13)
	storeRow(c[2*ldc:], alpha, beta, load, c20, c21, c22, c23)
	storeRow(c[3*ldc:], alpha, beta, load, c30, c31, c32, c33)
}

func storeRow(c []float32, alpha, beta float32, load bool, s0, s1, s2, s3 float32) {
	c = c[:4:4]
	if load {
		c[0] = alpha*s0 + beta*c[0]
		c[1] = alpha*s1 + beta*c[1]
		c[2] = alpha*s2 + beta*c[2]
		c[3] = alpha*s3 + beta*c[3]
		return
	}
	c[0] = alpha * s0
	c[1] = alpha * s1
	c[2] = alpha * s2
	c[3] = alpha * s3
}
