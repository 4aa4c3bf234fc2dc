package gemm

import "sync"

// smallNT computes C = alpha·A·Bᵀ + beta·C for a few rows of A (m ≤ kr.smallM) with the dot
// kernel, 4 rows of A by 4 rows of B at a time, splitting the rows of B over the goroutines.
// Partial tiles at the edges run on zero-padded copies of the last rows.
func smallNT(kr *kernel, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) {
	units := ceilDiv(n, 4)
	t := 1
	if m*n*k >= minParallelWork {
		t = min(Threads(), units)
	}
	var wg sync.WaitGroup
	for g := t - 1; g >= 0; g-- {
		j0, j1 := min(n, g*units/t*4), min(n, (g+1)*units/t*4)
		if g == 0 {
			smallNTRange(kr, m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc)
		} else {
			wg.Go(func() { smallNTRange(kr, m, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc) })
		}
	}
	wg.Wait()
}

// smallNTRange computes columns j0..j1-1 of C for smallNT.
func smallNTRange(kr *kernel, m, j0, j1, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) {
	if j0 >= j1 {
		return
	}
	load := beta != 0
	var tile [16]float32
	// The last m%4 rows of A, padded with zero rows.
	mFull := m / 4 * 4
	var aPad []float32
	if mFull < m {
		aPad = padRows(a, lda, mFull, m, k)
	}
	for j := j0; j < j1; j += 4 {
		bRows, ldbT := b[j*ldb:], ldb
		nr := min(4, j1-j)
		if nr < 4 {
			bRows, ldbT = padRows(b, ldb, j, j+nr, k), k
		}
		for i := 0; i < m; i += 4 {
			aRows, ldaT := a[i*lda:], lda
			if i >= mFull {
				aRows, ldaT = aPad, k
			}
			mr := min(4, m-i)
			if mr == 4 && nr == 4 {
				kr.dot(k, aRows, ldaT, bRows, ldbT, c[i*ldc+j:], ldc, alpha, beta, load)
				continue
			}
			kr.dot(k, aRows, ldaT, bRows, ldbT, tile[:], 4, alpha, 0, false)
			mergeTile(c[i*ldc+j:], ldc, tile[:], 4, mr, nr, beta, load)
		}
	}
}

// padRows copies rows r0..r1-1 (at most 4) of the k-wide matrix x into a 4×k block whose
// other rows are zero.
func padRows(x []float32, ld, r0, r1, k int) []float32 {
	p := make([]float32, 4*k)
	for r := r0; r < r1; r++ {
		copy(p[(r-r0)*k:(r-r0+1)*k], x[r*ld:r*ld+k])
	}
	return p
}
