package gemm

// Packed layout. The kernels read both operands from packed buffers so that every load in the
// inner loop is sequential:
//
//   - A block (rows i0..i0+mc-1, columns p0..p0+kc-1 of op(A)) is ceil(mc/mr) micro-panels of
//     kc×mr floats, one after another; op(A)[i0+i][p0+p] sits at
//     dst[(i/mr)·kc·mr + p·mr + i%mr].
//   - B block (rows p0..p0+kc-1, columns j0..j0+nc-1 of op(B)) is ceil(nc/nr) micro-panels of
//     kc×nr floats; op(B)[p0+p][j0+j] sits at dst[(j/nr)·kc·nr + p·nr + j%nr].
//
// A last partial micro-panel is padded with zeros up to the full width (mr or nr), so the
// kernels always compute whole tiles; only the store of an edge tile is trimmed.

// PackB packs the kc×nc block at row p0, column j0 of op(B) into dst in the layout above with
// micro-panel width nr. b is row-major with row stride ldb; op(B) is B, or Bᵀ when transB
// (then column j of op(B) is row j of b, contiguous). dst must hold ceil(nc/nr)·kc·nr floats.
//
// A PanelSource may call it on a scratch tile: to pack op(B) = Wᵀ for W stored [n,k], put rows
// j0..j0+nr-1 of W, columns p0..p0+kc-1, into a scratch slice s (row stride kc) and call
// PackB(dst[(q)·kc·nr:], s, kc, true, 0, kc, 0, w, nr) for the micro-panel q starting at
// column j0 = q·nr with w ≤ nr valid columns; each micro-panel is independent.
func PackB(dst, b []float32, ldb int, transB bool, p0, kc, j0, nc, nr int) {
	if transB {
		packStrided(dst, b, ldb, j0, nc, p0, kc, nr)
	} else {
		packContiguous(dst, b, ldb, j0, nc, p0, kc, nr)
	}
}

// packA packs the mc×kc block at row i0, column p0 of op(A) with micro-panel width mr.
func packA(dst, a []float32, lda int, transA bool, i0, mc, p0, kc, mr int) {
	if transA {
		packContiguous(dst, a, lda, i0, mc, p0, kc, mr)
	} else {
		packStrided(dst, a, lda, i0, mc, p0, kc, mr)
	}
}

// packContiguous packs the panel-major block whose element (q, p) (q across the micro-panel,
// p along k) is src[p·ld+q]: each k step of a micro-panel is one contiguous copy.
func packContiguous(dst, src []float32, ld, q0, nq, p0, kc, w int) {
	for q := 0; q < nq; q += w {
		wq := min(w, nq-q)
		d := dst[(q/w)*kc*w : (q/w+1)*kc*w]
		s := src[p0*ld+q0+q:]
		if copyPanelAsm(d, s, ld, w, wq, kc) {
			continue
		}
		for p := 0; p < kc; p++ {
			row := d[p*w : p*w+w]
			copy(row, s[p*ld:p*ld+wq])
			clear(row[wq:])
		}
	}
}

// packStrided packs the block whose element (q, p) is src[q·ld+p]: rows of src become the
// lanes of a micro-panel, a transposition.
func packStrided(dst, src []float32, ld, q0, nq, p0, kc, w int) {
	for q := 0; q < nq; q += w {
		wq := min(w, nq-q)
		d := dst[(q/w)*kc*w : (q/w+1)*kc*w]
		done := 0
		if wq == w {
			done = transposePanel(d, src, ld, q0+q, p0, kc, w)
		}
		transposeGo(d[done*w:], src, ld, q0+q, wq, p0+done, kc-done, w)
		if wq < w {
			for p := 0; p < kc; p++ {
				clear(d[p*w+wq : p*w+w])
			}
		}
	}
}

// transposeGo packs columns p0..p0+kc-1 of rows q0..q0+wq-1 of src into one micro-panel of
// width w starting at d, that is d[p·w+l] = src[(q0+l)·ld+p0+p].
func transposeGo(d, src []float32, ld, q0, wq, p0, kc, w int) {
	if kc == 0 {
		return
	}
	l := 0
	for ; l+4 <= wq; l += 4 {
		base := (q0+l)*ld + p0
		s0 := src[base : base+kc]
		s1 := src[base+ld : base+ld+kc]
		s2 := src[base+2*ld : base+2*ld+kc]
		s3 := src[base+3*ld : base+3*ld+kc]
		for p := range s0 {
			o := d[p*w+l : p*w+l+4 : p*w+l+4]
			o[0], o[1], o[2], o[3] = s0[p], s1[p], s2[p], s3[p]
		}
	}
	for ; l < wq; l++ {
		base := (q0+l)*ld + p0
		s := src[base : base+kc]
		for p, v := range s {
			d[p*w+l] = v
		}
	}
}
