package cpu

import (
	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/quant"
)

// The 4-bit linear: both products run the blocked GEMM with op(B) supplied by the 4-bit
// weight, which expands row segments straight into the GEMM's packed panels, so the float32
// matrix never exists as a whole.
//
// Panel layout (as gemm documents it): the block of rows p0..p0+kc-1 and columns
// j0..j0+nc-1 of op(B) is ceil(nc/nr) micro-panels of kc×nr floats; op(B)[p0+p][j0+j] sits at
// dst[(j/nr)·kc·nr + p·nr + j%nr], and the columns past nc in the last micro-panel are zero.

// Q4MulT sets y[rows, w.Rows] = x[rows, w.Cols]·Wᵀ.
func Q4MulT(y, x []float32, w *quant.Weight, rows int) {
	sgemmSource(false, rows, w.Rows, w.Cols, 1, x, w.Cols, q4Transposed{w}, 0, y, w.Rows)
}

// Q4MulAcc adds dy[rows, w.Rows]·W to dx[rows, w.Cols].
func Q4MulAcc(dx, dy []float32, w *quant.Weight, rows int) {
	sgemmSource(false, rows, w.Cols, w.Rows, 1, dy, w.Rows, q4Panels{w}, 1, dx, w.Cols)
}

// panelChunk bounds the stack buffer a row segment is expanded into.
const panelChunk = 1024

var (
	_ gemm.PanelSource = q4Transposed{}
	_ gemm.PanelSource = q4Panels{}
)

// q4Transposed is op(B) = Wᵀ (k = in, n = out): the forward of a linear layer, y = x·Wᵀ.
type q4Transposed struct{ w *quant.Weight }

// PackB writes rows p0..p0+kc-1 (input features) and columns j0..j0+nc-1 (output features)
// of Wᵀ: each output row of W is expanded over [p0, p0+kc) and scattered down its panel
// column. Safe for concurrent calls with distinct dst.
func (t q4Transposed) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	w := t.w
	var buf [panelChunk]float32
	panels := (nc + nr - 1) / nr
	for q := 0; q < panels; q++ {
		panel := dst[q*kc*nr : (q+1)*kc*nr]
		width := min(nr, nc-q*nr)
		for jj := 0; jj < width; jj++ {
			row := j0 + q*nr + jj
			for c0 := 0; c0 < kc; c0 += panelChunk {
				n := min(panelChunk, kc-c0)
				seg := buf[:n]
				w.DequantizeRange(seg, row*w.Cols+p0+c0)
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

// q4Panels is op(B) = W (k = out, n = in): the backward of a linear layer into its input,
// dx = dy·W. Each row p0+p of W is expanded over [j0, j0+nc) and split across the panels.
// Safe for concurrent calls with distinct dst.
type q4Panels struct{ w *quant.Weight }

func (t q4Panels) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	w := t.w
	var buf [panelChunk]float32
	step := panelChunk - panelChunk%nr // whole micro-panels per expanded segment
	for p := 0; p < kc; p++ {
		row := p0 + p
		for c0 := 0; c0 < nc; c0 += step {
			n := min(step, nc-c0)
			seg := buf[:n]
			w.DequantizeRange(seg, row*w.Cols+j0+c0)
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
