package quant

// Packed panels for a blocked GEMM (the CPU backend's gemm.PanelSource, satisfied structurally
// so that quant imports nothing of the engine): op(B) is written kc×nc at a time straight from
// the 4-bit codes, so the float32 weight never exists as a whole.
//
// Layout (as gemm documents it): the block of rows p0..p0+kc-1 and columns j0..j0+nc-1 of op(B)
// is ceil(nc/nr) micro-panels of kc×nr floats; op(B)[p0+p][j0+j] sits at
// dst[(j/nr)·kc·nr + p·nr + j%nr], and the columns past nc in the last micro-panel are zero.

// chunk bounds the stack buffer a row segment is expanded into.
const chunk = 1024

// Transposed is op(B) = Wᵀ (k = in, n = out): the forward of a linear layer, y = x·Wᵀ, as
// gemm.SgemmSource(false, m, w.Rows, w.Cols, 1, x, w.Cols, quant.Transposed{w}, 0, y, w.Rows).
type Transposed struct{ W *Weight }

// PackB writes rows p0..p0+kc-1 (input features) and columns j0..j0+nc-1 (output features) of
// Wᵀ: each output row of W is expanded over [p0, p0+kc) and scattered down its panel column.
// Safe for concurrent calls with distinct dst.
func (t Transposed) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	w := t.W
	var buf [chunk]float32
	panels := (nc + nr - 1) / nr
	for q := 0; q < panels; q++ {
		panel := dst[q*kc*nr : (q+1)*kc*nr]
		width := min(nr, nc-q*nr)
		for jj := 0; jj < width; jj++ {
			row := j0 + q*nr + jj
			for c0 := 0; c0 < kc; c0 += chunk {
				n := min(chunk, kc-c0)
				seg := buf[:n]
				w.expandRange(seg, row*w.Cols+p0+c0)
				out := panel[c0*nr+jj:]
				for p, v := range seg {
					out[p*nr] = v
				}
			}
		}
		if width < nr {
			for p := 0; p < kc; p++ {
				clear(panel[p*nr+width : (p+1)*nr])
			}
		}
	}
}

// PackB makes the Weight itself op(B) = W (k = out, n = in): the backward of a linear layer
// into its input, dx = dy·W, as gemm.SgemmSource(false, m, w.Cols, w.Rows, 1, dy, w.Rows, w, 0,
// dx, w.Cols). Each row p0+p of W is expanded over [j0, j0+nc) and split across the panels.
// Safe for concurrent calls with distinct dst.
func (w *Weight) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	var buf [chunk]float32
	step := chunk - chunk%nr // whole micro-panels per expanded segment
	for p := 0; p < kc; p++ {
		row := p0 + p
		for c0 := 0; c0 < nc; c0 += step {
			n := min(step, nc-c0)
			seg := buf[:n]
			w.expandRange(seg, row*w.Cols+j0+c0)
			for j := 0; j < n; j += nr {
				q := (c0 + j) / nr
				width := min(nr, n-j)
				out := dst[q*kc*nr+p*nr : q*kc*nr+(p+1)*nr]
				copy(out, seg[j:j+width])
				clear(out[width:])
			}
		}
	}
}
