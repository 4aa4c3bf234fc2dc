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
// One or two rows of x alone (a decoded token at one or two sequences) take an approximation
// instead on AVX2 (q4row16, q4row16x2): x quantized to int16 once a call, per chunk (scale_x =
// max|x|/x16Max), and the code book held as int16 (code·2^14 rounded), so that the codes decode
// in a third of the byte shuffles and multiply x in integer pair sums (VPMADDWD), a chunk's
// summed in int32 before one conversion to float. Each product code·s·x (s the chunk's scale)
// is then off by at most s·(|code|·scale_x/2 + 2^-15·|x| + 2^-16·scale_x): about 3e-5 of
// max|x| a chunk from x and 3e-5 from the codes (6.3e-5 of a product's value, rms, measured;
// 5.0e-5 in the same measurement with x to ±32767, which took two conversions a chunk),
// against bf16's 4e-3 and the GPU path's 0.06 log-prob differences. The decode step's fused
// 4-bit linears (Backend.Sampling, MulTSampled: numbers only the sampler sees) take the same
// approximation at 3 to 64 rows too (q4dot16x8, q4dot16x4: a chunk decoded once into the rows
// of x in VPMADDWD). Everything else keeps the exact float32 decoding at three rows or more:
// MulT (the training and reference passes, the head, the prompts' prefill; an odd row count's
// last row goes to the exact one-row kernel q4row1), the Go kernels and the exact AVX-512 one
// (q4row1AVX512; its int16 form, q4row16AVX512, takes one row of x alone under the same opt-in).
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

// xScratch holds the reordered rows of x between calls; x16Scratch x quantized (quantX16).
var (
	xScratch   = sync.Pool{New: func() any { return new([]float32) }}
	x16Scratch = sync.Pool{New: func() any { return new([]int16) }}
)

// MulT sets y[rows, W.Rows] = x[rows, W.Cols]·Wᵀ for rows ≤ q4DotMaxRows.
func (d *Q4Dot) MulT(y, x []float32, rows int) { d.mulT(false, y, x, rows) }

// mulT is MulT, or MulTSampled when sampled: x readied once (q4X), then the output rows split
// over the cores, about 64k decoded values a piece at least.
func (d *Q4Dot) mulT(sampled bool, y, x []float32, rows int) {
	w := d.W
	in, out := w.Cols, w.Rows
	if rows <= 0 {
		return
	}
	if rows > q4DotMaxRows {
		panic("cpu: Q4Dot.MulT takes at most 64 rows")
	}
	_, _ = x[rows*in-1], y[rows*out-1]
	i16 := d.use16(rows, sampled)
	var p q4X
	p.ready(x, rows, in, i16)
	clear(y[:rows*out])
	ForPieces(out, q4PieceGrain(in), func(lo, hi int) { d.rowsInto(y, &p, i16, lo, hi) })
	p.release()
}

// q4PieceGrain is the fewest output rows of width in worth a piece of their own (ForPieces):
// about 64k decoded values.
func q4PieceGrain(in int) int { return max(1, (1<<16)/in) }

// use16 reports whether rows of x take the int16 kernels' approximation on d: one or two rows
// always (where the kernels run and the code book allows), up to q4DotMaxRows when sampled.
func (d *Q4Dot) use16(rows int, sampled bool) bool {
	return q4row16On && d.tables.has16 && (rows <= 2 || sampled)
}

// q4X is x [rows, in] readied for the few-row kernels, once for every weight that shares it:
// reordered for the float32 kernels (xp), quantized for the int16 ones (xq, ldx apart).
type q4X struct {
	rows, in int
	bp       *[]float32
	xp       []float32
	bq       *[]int16
	xq       []int16
	ldx      int
}

// ready readies x for the int16 kernels (i16) or the float32 ones, unless done already.
func (p *q4X) ready(x []float32, rows, in int, i16 bool) {
	p.rows, p.in = rows, in
	if i16 {
		if p.bq == nil {
			p.bq = x16Scratch.Get().(*[]int16)
			p.ldx = in / q4Chunk * q4X16Len
			p.xq = quantRows(p.bq, x, rows, in, p.ldx)
		}
		return
	}
	if p.bp == nil {
		p.bp = xScratch.Get().(*[]float32)
		p.xp = reorderX(p.bp, x, rows, in)
	}
}

// release returns the scratch.
func (p *q4X) release() {
	if p.bp != nil {
		xScratch.Put(p.bp)
	}
	if p.bq != nil {
		x16Scratch.Put(p.bq)
	}
	*p = q4X{}
}

// rowsInto adds to y [rows, W.Rows] the output rows lo..hi-1 of x·Wᵀ, from p readied for
// the int16 kernels (i16) or the float32 ones.
func (d *Q4Dot) rowsInto(y []float32, p *q4X, i16 bool, lo, hi int) {
	if i16 {
		d.rows16(y, p.xq, p.ldx, p.rows, lo, hi)
	} else {
		d.rowsRange(y, p.xp, p.rows, lo, hi, d.tables)
	}
}

// reorderX returns x [rows, in] in the float32 kernels' order, in *bp. They want each 16
// values of x as the 8 even ones then the 8 odd ones: a byte holds value 2k in its high
// nibble and 2k+1 in its low, and the two are decoded apart. The last row of an odd count
// goes to the one-row kernel, which has its own order.
func reorderX(bp *[]float32, x []float32, rows, in int) []float32 {
	if cap(*bp) < rows*in {
		*bp = make([]float32, rows*in)
	}
	xp := (*bp)[:rows*in]
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
	return xp
}

// quantRows returns x [rows, in] quantized for the int16 kernels (quantX16), ldx apart, in
// *bp: on the caller for one or two rows, over the cores for more.
func quantRows(bp *[]int16, x []float32, rows, in, ldx int) []int16 {
	if cap(*bp) < rows*ldx {
		*bp = make([]int16, rows*ldx)
	}
	xq := (*bp)[:rows*ldx]
	q := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			quantX16(xq[i*ldx:(i+1)*ldx], x[i*in:(i+1)*in])
		}
	}
	if rows <= 2 {
		q(0, rows)
	} else {
		For(rows, 1, q)
	}
	return xq
}

// rows16 adds to y [rows, W.Rows] the output rows lo..hi-1 by the int16 kernels, from x
// quantized (quantRows): one or two rows of x in one call a block of weight rows (q4row16,
// q4row16x2), more in groups of 8, 4 and 2 (q4dot16x8, q4dot16x4, q4row16x2) a span of
// chunks, as fewRowBlocks walks them.
func (d *Q4Dot) rows16(y []float32, xq []int16, ldx, rows, lo, hi int) {
	w := d.W
	in, out := w.Cols, w.Rows
	chunks := in / q4Chunk
	code := d.tables
	rb := max(1, (64<<10)/in)
	if rows <= 2 {
		fewRowBlocks(1, chunks, lo, hi, rb, func(_, r0, r1 int) {
			c0, c1 := r0*chunks, r1*chunks
			q4rowInt16(rows, r1-r0, chunks, w.Packed[c0*q4Chunk/2:c1*q4Chunk/2], d.scales[c0:c1], xq, ldx, y[r0:], out, code)
		}, nil, nil)
		return
	}
	fewRowBlocks(rows, chunks, lo, hi, rb,
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
// lanes for VPSHUFB; then the int16 code book (code·2^14 rounded) as 2 such planes
// (gen_q4dot.go's q4Tables16 is their offset) and as values.
type q4Tables struct {
	code     [16]float32
	planes   [4][32]byte
	planes16 [2][32]byte
	code16   [16]int16
	// has16: every |code| ≤ 1, so |code16| ≤ 2^14, the bound q4row16's int32 sums rely on.
	has16 bool
}

func newQ4Tables(code [16]float32) *q4Tables {
	t := &q4Tables{code: code, has16: true}
	for i, v := range code {
		b := math.Float32bits(v)
		for k := range 4 {
			t.planes[k][i] = byte(b >> (8 * k))
			t.planes[k][16+i] = byte(b >> (8 * k))
		}
		if !(math.Abs(float64(v)) <= 1) {
			t.has16 = false
			continue
		}
		c := int16(math.Round(float64(v) * (1 << 14)))
		t.code16[i] = c
		for k := range 2 {
			t.planes16[k][i] = byte(uint16(c) >> (8 * k))
			t.planes16[k][16+i] = byte(uint16(c) >> (8 * k))
		}
	}
	return t
}

// x16Max is the largest |x| quantX16 gives: 16383, so that a chunk's 64 products code16·x16
// (|code16| ≤ 2^14) sum in int32 lanes of 8 without overflow (gen_q4dot.go's emitRow16).
const x16Max = 16383

// q4X16Len is the int16 values a chunk of x takes quantized (quantX16): its 64 values, then
// its factor as 8 float32.
const q4X16Len = q4Chunk + 16

// quantX16Go is quantX16's reference, and the path where its kernel does not run: it
// quantizes x (whole chunks) for q4row16: per chunk, with scale_x = max|x|/x16Max, the
// values round(x/scale_x) (|·| ≤ x16Max) in the order q4Row16, then scale_x/2^14 (the factor
// that brings Σ code16·x16 back to Σ code·x) 8 times as float32. A chunk holding NaN or ±Inf
// gets the factor NaN (and zeros), so that the product is NaN as the exact one would be (or
// ±Inf); an all-zero chunk gets 0. The AVX2 kernel (quantX16AVX2) gives the same bits.
func quantX16Go(dst []int16, x []float32) {
	for c := 0; c < len(x)/q4Chunk; c++ {
		xs := (*[q4Chunk]float32)(x[c*q4Chunk:])
		d := (*[q4X16Len]int16)(dst[c*q4X16Len:])
		// max|x| from the bits: |x|'s bit patterns order as its values, +Inf's (0x7f800000)
		// below every NaN's
		var m0, m1, m2, m3 uint32
		for i := 0; i < q4Chunk; i += 4 {
			m0 = max(m0, math.Float32bits(xs[i])&0x7fffffff)
			m1 = max(m1, math.Float32bits(xs[i+1])&0x7fffffff)
			m2 = max(m2, math.Float32bits(xs[i+2])&0x7fffffff)
			m3 = max(m3, math.Float32bits(xs[i+3])&0x7fffffff)
		}
		mb := max(m0, m1, m2, m3)
		m := float64(math.Float32frombits(mb))
		if mb >= 0x7f800000 {
			m = math.NaN()
		}
		f := float32(0)
		if m > 0 {
			inv := x16Max / m // x·inv ≤ x16Max·(1+2^-52): never rounds past x16Max
			for s, v := range &q4Row16 {
				// float64(·): the product rounded before the add, as the kernel does; a
				// compiler may not fuse them (GOAMD64=v3 would, into an FMA)
				d[s] = int16(roundHalfAway(float64(float64(xs[v&(q4Chunk-1)]) * inv)))
			}
			f = float32(m / x16Max / (1 << 14))
		} else {
			clear(d[:q4Chunk])
			if m != 0 {
				f = float32(math.NaN())
			}
		}
		b := math.Float32bits(f)
		for k := 0; k < 8; k++ {
			d[q4Chunk+2*k], d[q4Chunk+2*k+1] = int16(uint16(b)), int16(uint16(b>>16))
		}
	}
}

// roundHalfAway is math.Round(v) as an int32 for |v| < 2^31, without its function: v plus
// the largest double below ½ (signed as v), truncated. With round-to-nearest-even addition
// the sum reaches the next integer exactly when v's fraction is ½ or more (½ itself: the tie
// 1 − 2^-54 rounds to 1).
func roundHalfAway(v float64) int32 {
	return int32(v + math.Copysign(0.49999999999999994, v))
}

// x16Factor is a quantized chunk's factor (quantX16).
func x16Factor(d []int16) float32 {
	return math.Float32frombits(uint32(uint16(d[q4Chunk])) | uint32(uint16(d[q4Chunk+1]))<<16)
}

// q4row16Go is q4row16's reference: the same integer sums Σ code16·x16 over each chunk (in
// int64: the kernel's int32 lanes hold 8 products each and cannot overflow, see gen_q4dot.go),
// then times the chunk's scale·factor in float32 as the kernel multiplies it, summed in float64.
func q4row16Go(n int, packed []byte, scales []float32, x []int16, y []float32, code *q4Tables) {
	var w [q4Chunk]int64
	for r := range y {
		var acc float64
		for c := 0; c < n; c++ {
			p := packed[(r*n+c)*q4Chunk/2 : (r*n+c+1)*q4Chunk/2]
			for k, q := range p {
				w[2*k], w[2*k+1] = int64(code.code16[q>>4]), int64(code.code16[q&15])
			}
			xs := x[c*q4X16Len : (c+1)*q4X16Len]
			var s int64
			for j, v := range q4Row16 {
				s += w[v] * int64(xs[j])
			}
			f := float32(scales[r*n+c] * x16Factor(xs))
			acc += float64(f) * float64(s)
		}
		y[r] += float32(acc)
	}
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

// q4Row16 is q4row16's order of x within a chunk (the order its unpacks produce): slot
// 16j+8l+i holds value 2p+h, p = 16l+8k+i, for the vector j = 2h+k (h = 0: the high nibbles;
// k = 0: the low unpack), lane l and element i.
var q4Row16 = func() (a [q4Chunk]uint8) {
	for h := 0; h < 2; h++ {
		for k := 0; k < 2; k++ {
			for l := 0; l < 2; l++ {
				for i := 0; i < 8; i++ {
					a[16*(2*h+k)+8*l+i] = uint8(2*(16*l+8*k+i) + h)
				}
			}
		}
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
