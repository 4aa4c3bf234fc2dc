package cpu

import "rlhfstation/engine/backend/cpu/gemm"

// The bf16 matrix: a frozen LM head and token embedding held as the checkpoint stores them
// (model.Param.BF16), half the bytes of float32. Decoding reads the whole head for every token,
// so halving it halves most of what a small model's decode step reads. Values widen exactly
// (a bf16 is the top half of a float32) and the sums are float32, as for a float32 head.
//
// Few rows of x (decoding, and the head's chunks of a vocabulary of 100k and more) go through
// the few-row kernels (bf16dot, beside q4dot's), streaming each weight row once; more rows go
// through the GEMM, with the panels widened from bf16 as the 4-bit weight's are expanded.

// BF16MulT sets y[rows, out] = x[rows, in]·wᵀ for w [out, in] in bf16 bits.
func BF16MulT(y, x []float32, w []uint16, rows, in, out int) {
	if rows <= 0 || out <= 0 {
		return
	}
	_, _, _ = x[rows*in-1], y[rows*out-1], w[out*in-1]
	if rows <= f32DotMaxRows && q4dotKernel == "avx2" {
		bf16Dot(y, x, w, rows, in, out)
		return
	}
	sgemmSource(false, rows, out, in, 1, x, in, bf16Transposed{w, in}, 0, y, out)
}

// BF16MulAcc adds dy[rows, out]·W to dx[rows, in] for w [out, in] in bf16 bits (the input
// gradient through a frozen bf16 head).
func BF16MulAcc(dx, dy []float32, w []uint16, rows, in, out int) {
	if rows <= 0 || in <= 0 {
		return
	}
	sgemmSource(false, rows, in, out, 1, dy, out, bf16Panels{w, in}, 1, dx, in)
}

// bf16Dot is BF16MulT by the few-row kernels (rows ≤ f32DotMaxRows), split over cores by
// output rows. The whole chunks of each row of x are reordered for the kernels (q4dot.go's
// order); a tail past them is summed here from x as it is.
func bf16Dot(y, x []float32, w []uint16, rows, in, out int) {
	main := in / q4Chunk * q4Chunk
	bp := xScratch.Get().(*[]float32)
	if cap(*bp) < rows*main {
		*bp = make([]float32, rows*main)
	}
	xp := (*bp)[:rows*main]
	for i := 0; i < rows; i++ {
		src, dst := x[i*in:i*in+main], xp[i*main:(i+1)*main]
		for g := 0; g < main; g += 16 {
			s, d := src[g:g+16:g+16], dst[g:g+16:g+16]
			for k := 0; k < 8; k++ {
				d[k], d[8+k] = s[2*k], s[2*k+1]
			}
		}
	}
	clear(y[:rows*out])
	ForPieces(out, max(1, (1<<16)/max(in, 1)), func(lo, hi int) { bf16DotRange(y, xp, x, w, rows, in, out, lo, hi) })
	xScratch.Put(bp)
}

// bf16DotRange adds the output rows lo..hi-1 to y, 128 KB of weights a block (fewRowBlocks);
// xp is x reordered for the kernels, x itself serves the columns past the last whole chunk.
func bf16DotRange(y, xp, x []float32, w []uint16, rows, in, out, lo, hi int) {
	chunks := in / q4Chunk
	main := chunks * q4Chunk
	var tail func(t, i0, r0, r1 int)
	if main < in {
		tail = func(t, i0, r0, r1 int) {
			for i := i0; i < i0+t; i++ {
				xs := x[i*in+main : i*in+in]
				for r := r0; r < r1; r++ {
					var s float32
					for k, v := range w[r*in+main : r*in+in] {
						s += FromBF16(v) * xs[k]
					}
					y[i*out+r] += s
				}
			}
		}
	}
	fewRowBlocks(rows, chunks, lo, hi, max(1, (64<<10)/max(in, 1)),
		func(i0, r0, r1 int) { bf16row(chunks, w[r0*in:], in, xp[i0*main:], y[i0*out+r0:i0*out+r1]) },
		func(t, i0, r, k0, n int) {
			bf16dot(t, n, w[r*in+k0*q4Chunk:], xp[i0*main+k0*q4Chunk:], main, y[i0*out+r:], out)
		}, tail)
}

// bf16dotGo is the kernels' reference and the path where they do not run: it adds to
// y[i·ldy], for i < t, the dot product of n chunks of 64 bf16 values of w with row i of x
// (x[i·ldx:], reordered as bf16Dot does).
func bf16dotGo(t, n int, w []uint16, x []float32, ldx int, y []float32, ldy int) {
	w = w[:n*q4Chunk]
	for i := 0; i < t; i++ {
		xs := x[i*ldx : i*ldx+n*q4Chunk]
		var s float32
		for g := 0; g < len(w); g += 16 {
			for k := 0; k < 8; k++ {
				s += FromBF16(w[g+2*k])*xs[g+k] + FromBF16(w[g+2*k+1])*xs[g+8+k]
			}
		}
		y[i*ldy] += s
	}
}

var (
	_ gemm.PanelSource = bf16Transposed{}
	_ gemm.PanelSource = bf16Panels{}
)

// bf16Transposed is op(B) = Wᵀ (k = in, n = out) for a bf16 w [out, in]: the head's forward.
type bf16Transposed struct {
	w  []uint16
	in int
}

func (t bf16Transposed) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	panels := (nc + nr - 1) / nr
	for q := 0; q < panels; q++ {
		panel := dst[q*kc*nr : (q+1)*kc*nr]
		width := min(nr, nc-q*nr)
		for jj := 0; jj < width; jj++ {
			row := j0 + q*nr + jj
			out := panel[jj:]
			for p, v := range t.w[row*t.in+p0 : row*t.in+p0+kc] {
				out[p*nr] = FromBF16(v)
			}
		}
		if width < nr {
			for p := 0; p < kc; p++ {
				clear(panel[p*nr+width : (p+1)*nr])
			}
		}
	}
}

// bf16Panels is op(B) = W (k = out, n = in) for a bf16 w [out, in]: the input gradient
// through the head, dx = dy·W.
type bf16Panels struct {
	w  []uint16
	in int
}

func (t bf16Panels) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	for p := 0; p < kc; p++ {
		src := t.w[(p0+p)*t.in+j0 : (p0+p)*t.in+j0+nc]
		for j := 0; j < nc; j += nr {
			width := min(nr, nc-j)
			out := dst[(j/nr)*kc*nr+p*nr : (j/nr)*kc*nr+(p+1)*nr]
			for c, v := range src[j : j+width] {
				out[c] = FromBF16(v)
			}
			clear(out[width:])
		}
	}
}
