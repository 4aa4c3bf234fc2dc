package cpu

import (
	"math"
	"sync"

	"rlhfstation/quant"
)

// The few-row 4-bit product: decoding (M = 1 to q4DotMaxRows rows) reads every weight once for
// a handful of multiply-adds, so it is bound by memory, and a 4-bit weight is an eighth of the
// bytes of a float32 one. The kernels decode the packed codes in registers and multiply them
// into up to 8 rows of x at a time (as code[q]·scale, the dequantization's own float32
// product; with one row, Σ code[q]·x over a chunk times its scale); no dequantized weight is
// ever written to memory. The GEMM path (q4.go) takes more rows,
// and shapes the kernels cannot take.
//
// The kernels' unit is a chunk of 64 values (32 bytes, one scale), so they take a weight whose
// rows are whole chunks (Cols a multiple of 64) and whose blocks are whole chunks (BlockSize a
// multiple of 64): every linear of the supported families, at the default block size.

// q4DotMaxRows is the most rows of x the kernels take; more go through the GEMM, which reuses
// each expanded panel across its rows (BenchmarkQ4Dot measures the crossing).
const q4DotMaxRows = 64

// q4Chunk is the kernels' unit of values.
const q4Chunk = 64

// Q4Dot is a 4-bit weight readied for the few-row kernels: its scales, one per chunk of 64
// values, decoded once (double quantization's code·nested absmax + offset, as Scale computes
// it) so that the kernels read 4 bytes a chunk instead of redoing it per row of x.
type Q4Dot struct {
	W      *quant.Weight
	scales []float32
	tables *q4Tables
}

// NewQ4Dot readies w for the few-row kernels; nil when their layout does not fit w.
func NewQ4Dot(w *quant.Weight) *Q4Dot {
	if w.Cols%q4Chunk != 0 || w.BlockSize%q4Chunk != 0 {
		return nil
	}
	n := w.Len() / q4Chunk
	per := w.BlockSize / q4Chunk
	s := make([]float32, n)
	For(n, 1<<12, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			s[c] = w.Scale(c / per)
		}
	})
	return &Q4Dot{W: w, scales: s, tables: newQ4Tables(w.Type.Code())}
}

// Bytes is the memory the decoded scales take beside the weight.
func (d *Q4Dot) Bytes() int { return 4 * len(d.scales) }

// xScratch holds the reordered rows of x between calls.
var xScratch = sync.Pool{New: func() any { return new([]float32) }}

// MulT sets y[rows, W.Rows] = x[rows, W.Cols]·Wᵀ for rows ≤ q4DotMaxRows.
func (d *Q4Dot) MulT(y, x []float32, rows int) {
	w := d.W
	in, out := w.Cols, w.Rows
	if rows <= 0 {
		return
	}
	if rows > q4DotMaxRows {
		panic("cpu: Q4Dot.MulT takes at most 64 rows")
	}
	_, _ = x[rows*in-1], y[rows*out-1]
	// The kernels want each 16 values of x as the 8 even ones then the 8 odd ones: a byte
	// holds value 2k in its high nibble and 2k+1 in its low, and the two are decoded apart.
	bp := xScratch.Get().(*[]float32)
	if cap(*bp) < rows*in {
		*bp = make([]float32, rows*in)
	}
	xp := (*bp)[:rows*in]
	// The last row of an odd count goes to the one-row kernel, which has its own order.
	many := rows &^ 1
	for g := 0; g < many*in; g += 16 {
		src, dst := x[g:g+16:g+16], xp[g:g+16:g+16]
		for k := 0; k < 8; k++ {
			dst[k], dst[8+k] = src[2*k], src[2*k+1]
		}
	}
	if many < rows {
		order := q4row1Order()
		for g := many * in; g < rows*in; g += q4Chunk {
			src, dst := x[g:g+q4Chunk:g+q4Chunk], xp[g:g+q4Chunk:g+q4Chunk]
			for s, v := range order {
				dst[s] = src[v]
			}
		}
	}
	clear(y[:rows*out])
	code := d.tables
	// Split by output rows: about 64k decoded values a piece at least.
	ForPieces(out, max(1, (1<<16)/in), 4, func(lo, hi int) { d.rowsRange(y, xp, rows, lo, hi, code) })
	xScratch.Put(bp)
}

// rowsRange adds to y the output rows lo..hi-1, 32 KB of codes a block (fewRowBlocks).
func (d *Q4Dot) rowsRange(y, xp []float32, rows, lo, hi int, code *q4Tables) {
	w := d.W
	in, out := w.Cols, w.Rows
	chunks := in / q4Chunk
	fewRowBlocks(rows, chunks, lo, hi, max(1, (64<<10)/in),
		func(i0, r0, r1 int) {
			c0, c1 := r0*chunks, r1*chunks
			q4row(r1-r0, chunks, w.Packed[c0*q4Chunk/2:c1*q4Chunk/2], d.scales[c0:c1],
				xp[i0*in:(i0+1)*in], y[i0*out+r0:i0*out+r1], code)
		},
		func(t, i0, r, k0, n int) {
			c := r*chunks + k0
			q4dot(t, n, w.Packed[c*q4Chunk/2:(c+n)*q4Chunk/2], d.scales[c:c+n], xp[i0*in+k0*q4Chunk:], in, y[i0*out+r:], out, code)
		}, nil)
}

// fewRowBlocks walks the output rows lo..hi-1 of a few-row product in cache blocks, the one
// order of the 4-bit, float32 and bf16 kernels: rb weight rows at a time (kept in L2) against
// each group of t ≤ 8 rows of x in turn (q4DotRows). One row of x takes the block's whole rows
// in one call (row1: weight rows r0..r1-1 against row i0 of x); more take spans of chunks, 16
// KB of x, so that those rows of x stay in L1 (dot: t rows of x from i0 against weight row r,
// chunks k0..k0+n-1). tail, when not nil, adds the columns past the last whole chunk for the
// group (t rows from i0, weight rows r0..r1-1).
func fewRowBlocks(rows, chunks, lo, hi, rb int, row1 func(i0, r0, r1 int), dot func(t, i0, r, k0, n int), tail func(t, i0, r0, r1 int)) {
	for r0 := lo; r0 < hi; r0 += rb {
		r1 := min(hi, r0+rb)
		for i0 := 0; i0 < rows; {
			t := q4DotRows(rows - i0)
			if t == 1 {
				if chunks > 0 {
					row1(i0, r0, r1)
				}
			} else {
				span := max(1, (16<<10)/(4*q4Chunk*t))
				for k0 := 0; k0 < chunks; k0 += span {
					n := min(span, chunks-k0)
					for r := r0; r < r1; r++ {
						dot(t, i0, r, k0, n)
					}
				}
			}
			if tail != nil {
				tail(t, i0, r0, r1)
			}
			i0 += t
		}
	}
}

// q4Tables is a code book as the kernels read it: its 16 float32 values, then their bytes
// as 4 planes (plane k holds byte k of each value, little-endian), repeated in both 128-bit
// lanes for VPSHUFB.
type q4Tables struct {
	code   [16]float32
	planes [4][32]byte
}

func newQ4Tables(code [16]float32) *q4Tables {
	t := &q4Tables{code: code}
	for i, v := range code {
		b := math.Float32bits(v)
		for k := range 4 {
			t.planes[k][i] = byte(b >> (8 * k))
			t.planes[k][16+i] = byte(b >> (8 * k))
		}
	}
	return t
}

// q4DotRows is how many rows of x the next kernel call takes, of the left ones.
func q4DotRows(left int) int {
	switch {
	case left >= 8:
		return 8
	case left >= 4:
		return 4
	case left >= 2:
		return 2
	}
	return 1
}

// The one-row kernels' orders of x within a chunk: slot s holds value order[s]. AVX2
// (q4row1, decoding the chunk with byte shuffles as it lies in memory): slot 8j+4l+i holds
// value 2p+h, p = 16l+4k+i, for the vector j = 4h+k (h = 0: the high nibbles), lane l and
// element i. AVX-512 (q4row1AVX512, each 16 bytes widened to dwords): in each half of 32
// values, the 16 even values, then the 16 odd ones.
var q4Row1AVX2, q4Row1AVX512 = func() (a, b [q4Chunk]uint8) {
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k++ {
			for l := 0; l < 2; l++ {
				for i := 0; i < 4; i++ {
					a[8*(4*h+k)+4*l+i] = uint8(2*(16*l+4*k+i) + h)
				}
			}
		}
	}
	for v := 0; v < q4Chunk; v++ {
		b[32*(v/32)+16*(v%2)+(v%32)/2] = uint8(v)
	}
	return
}()

// q4row1Go is the one-row kernels' reference: it adds to y[r], for r < len(y), the dot
// product of weight row r (n chunks) with x in the given order, as the kernels sum it (a
// chunk's Σ code[q]·x, then times its scale).
func q4row1Go(n int, packed []byte, scales []float32, x []float32, y []float32, code *q4Tables, order *[q4Chunk]uint8) {
	var w [q4Chunk]float32
	for r := range y {
		var acc float32
		for c := 0; c < n; c++ {
			p := packed[(r*n+c)*q4Chunk/2 : (r*n+c+1)*q4Chunk/2]
			for k, q := range p {
				w[2*k], w[2*k+1] = code.code[q>>4], code.code[q&15]
			}
			xs := x[c*q4Chunk : (c+1)*q4Chunk]
			var s float32
			for j, v := range order {
				s += w[v] * xs[j]
			}
			acc += s * scales[r*n+c]
		}
		y[r] += acc
	}
}

// q4dotGo is the kernels' reference, and the path where they do not run: it adds to
// y[i·ldy], for i < t, the dot product of n chunks of one weight row (packed, scales) with
// row i of x (x[i·ldx:], reordered as MulT does).
func q4dotGo(t, n int, packed []byte, scales []float32, x []float32, ldx int, y []float32, ldy int, code *q4Tables) {
	var w [q4Chunk]float32
	for i := 0; i < t; i++ {
		_ = x[i*ldx+n*q4Chunk-1]
	}
	var acc [8]float32
	for c := 0; c < n; c++ {
		s := scales[c]
		p := packed[c*q4Chunk/2 : (c+1)*q4Chunk/2]
		for g := 0; g < 4; g++ {
			for k := 0; k < 8; k++ {
				q := p[8*g+k]
				w[16*g+k] = code.code[q>>4] * s
				w[16*g+8+k] = code.code[q&15] * s
			}
		}
		for i := 0; i < t; i++ {
			xs := x[i*ldx+c*q4Chunk : i*ldx+(c+1)*q4Chunk]
			a := acc[i]
			for j, v := range w {
				a += v * xs[j]
			}
			acc[i] = a
		}
	}
	for i := 0; i < t; i++ {
		y[i*ldy] += acc[i]
	}
}
