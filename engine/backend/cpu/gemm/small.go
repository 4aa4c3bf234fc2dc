package gemm

// smallNT computes C = alpha·op(A)·Bᵀ + beta·C when A or B has few rows (m ≤ kr.dotM or n ≤ kr.dotN)
// with the dot kernel, 4 rows of A by 4 rows of B at a time. The few rows stay in cache while
// the many are streamed once, split over the goroutines. Partial tiles at the edges run on
// zero-padded copies of the last rows.
func smallNT(kr *kernel, transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) {
	if transA {
		// Only for a few rows (m ≤ dotM): copy op(A) row-major, a small transposition.
		t := make([]float32, m*k)
		for p := 0; p < k; p++ {
			for i, v := range a[p*lda : p*lda+m] {
				t[i*k+p] = v
			}
		}
		a, lda = t, k
	}
	byRows := m > n // stream A's rows, B's stay in cache
	units := ceilDiv(n, 4)
	if byRows {
		units = ceilDiv(m, 4)
	}
	t, chunks := splitWork(m*n*k, units)
	parallelFor(chunks, t, func(g int) {
		lo, hi := g*units/chunks*4, (g+1)*units/chunks*4
		i0, i1, j0, j1 := 0, m, min(lo, n), min(hi, n)
		if byRows {
			i0, i1, j0, j1 = min(lo, m), min(hi, m), 0, n
		}
		smallNTBlock(kr, i0, i1, j0, j1, k, byRows, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// smallNTBlock computes rows i0..i1-1, columns j0..j1-1 of C for smallNT, the outer loop over
// rows of A when byRows, else over rows of B.
func smallNTBlock(kr *kernel, i0, i1, j0, j1, k int, byRows bool, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	if i0 >= i1 || j0 >= j1 {
		return
	}
	load := beta != 0
	var tile [16]float32
	// Tiles hang off the last full group of 4 rows at a padded copy.
	iFull, jFull := i0+(i1-i0)/4*4, j0+(j1-j0)/4*4
	var aPad, bPad []float32
	if iFull < i1 {
		aPad = padRows(a, lda, iFull, i1, k)
	}
	if jFull < j1 {
		bPad = padRows(b, ldb, jFull, j1, k)
	}
	one := func(i, j int) {
		aRows, ldaT := a[i*lda:], lda
		if i >= iFull {
			aRows, ldaT = aPad, k
		}
		bRows, ldbT := b[j*ldb:], ldb
		if j >= jFull {
			bRows, ldbT = bPad, k
		}
		mr, nr := min(4, i1-i), min(4, j1-j)
		if mr == 4 && nr == 4 {
			kr.dot(k, aRows, ldaT, bRows, ldbT, c[i*ldc+j:], ldc, alpha, beta, load)
			return
		}
		kr.dot(k, aRows, ldaT, bRows, ldbT, tile[:], 4, alpha, 0, false)
		mergeTile(c[i*ldc+j:], ldc, tile[:], 4, mr, nr, beta, load)
	}
	if byRows {
		for i := i0; i < i1; i += 4 {
			for j := j0; j < j1; j += 4 {
				one(i, j)
			}
		}
		return
	}
	for j := j0; j < j1; j += 4 {
		for i := i0; i < i1; i += 4 {
			one(i, j)
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

// direct computes C = alpha·op(A)·B + beta·C for a few rows of op(A) (m ≤ kr.directM) with B
// read in place by the direct kernel: op(A) is packed whole (it is small), B streamed once.
// Column tiles are split over the goroutines; the last partial tile reads a zero-padded copy.
func direct(kr *kernel, transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) {
	if s := kr.short; s != nil && roundUp(m, s.mr) < roundUp(m, kr.mr)*9/10 {
		kr = s
	}
	mr, nr := kr.mr, kr.nr
	panels := ceilDiv(m, mr)
	ws := getWorkspace(panels*mr*k, 0, 0)
	defer putWorkspace(ws)
	packA(ws.a, a, lda, transA, 0, m, 0, k, mr)
	pa := ws.a
	kc := ceilDiv(k, ceilDiv(k, kr.kc))
	// tile computes C's columns j0..j0+nr-1 from bt, B's columns from j0 with row stride
	// ldB, kc rows at a time so that they stay in L1 across the panels of A.
	tile := func(j0 int, bt []float32, ldB int, tmp []float32) {
		cols := min(nr, n-j0)
		for pc := 0; pc < k; pc += kc {
			kcur := min(kc, k-pc)
			beta, load := beta, beta != 0
			if pc > 0 {
				beta, load = 1, true
			}
			bp := bt[pc*ldB:]
			for ip := 0; ip < panels; ip++ {
				i0 := ip * mr
				rows := min(mr, m-i0)
				// An edge tile goes through tmp and is merged, trimmed, into C.
				if rows == mr && cols == nr {
					kr.direct(kcur, pa[ip*k*mr+pc*mr:], bp, c[i0*ldc+j0:], ldc, alpha, beta, load, ldB)
					continue
				}
				kr.direct(kcur, pa[ip*k*mr+pc*mr:], bp, tmp, nr, alpha, 0, false, ldB)
				mergeTile(c[i0*ldc+j0:], ldc, tmp, nr, rows, cols, beta, load)
			}
		}
	}
	full := n / nr
	t, chunks := splitWork(m*n*k, full)
	parallelFor(chunks, t, func(g int) {
		tmp := make([]float32, mr*nr)
		for jt := g * full / chunks; jt < (g+1)*full/chunks; jt++ {
			tile(jt*nr, b[jt*nr:], ldb, tmp)
		}
	})
	if j0 := full * nr; j0 < n {
		// The last columns, padded to nr: a packed B micro-panel is row-major k×nr.
		strip := make([]float32, k*nr)
		PackB(strip, b, ldb, false, 0, k, j0, n-j0, nr)
		tile(j0, strip, nr, make([]float32, mr*nr))
	}
}

// transposed computes C = alpha·op(A)·B + beta·C for a few columns of C (n ≤ kr.dotN) as
// Cᵀ = Bᵀ·op(A)ᵀ, where those columns become the few rows that dot and direct take, then
// adds Cᵀ into C.
func transposed(kr *kernel, transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int,
	beta float32, c []float32, ldc int) {
	ws := getWorkspace(0, 0, n*m)
	defer putWorkspace(ws)
	t := ws.tile
	sgemm(kr, true, n, m, k, alpha, b, ldb, operandB{b: a, ld: lda, trans: !transA}, 0, t, m)
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		for j := range ci {
			if beta == 0 {
				ci[j] = t[j*m+i]
			} else {
				ci[j] = t[j*m+i] + beta*ci[j]
			}
		}
	}
}

// splitWork picks the threads for a product of work multiply-adds and how many chunks to cut
// its units into: a few per thread, since without packing to repeat finer chunks cost nothing
// and let an early thread take over a late one's share.
func splitWork(work, units int) (t, chunks int) {
	if work < minParallelWork {
		return 1, 1
	}
	if t = Threads(); t == 1 {
		return 1, 1
	}
	return t, min(units, 4*t)
}
