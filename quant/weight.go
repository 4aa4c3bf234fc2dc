package quant

import "fmt"

// NestedBlockSize is the block size of double quantization's 8-bit absmax code.
const NestedBlockSize = 256

// Options choose how a weight is quantized. The zero value is not valid; start from Default.
type Options struct {
	Type        Type
	BlockSize   int
	DoubleQuant bool
}

// Default is the QLoRA setting: NF4, blocks of 64, double quantization.
func Default() Options { return Options{Type: NF4, BlockSize: 64, DoubleQuant: true} }

// Check reports an invalid type or block size.
func (o Options) Check() error {
	if !o.Type.valid() {
		return fmt.Errorf("quant: unknown quant_type %q (nf4 or fp4)", o.Type)
	}
	return checkBlockSize(o.BlockSize)
}

// Weight is a 4-bit linear weight of shape [Rows, Cols] = [out, in], flattened row-major (as
// bitsandbytes flattens it) into blocks of BlockSize values.
//
// Without double quantization Absmax holds one float32 per block. With it, the absmax values
// are stored as QAbsmax, 8-bit codes of NestedCode over (absmax − Offset), with one float32
// NestedAbsmax per NestedBlockSize blocks; a block's scale is then
// NestedCode[QAbsmax[b]]·NestedAbsmax[b/256] + Offset, rounded to float32 at each step.
type Weight struct {
	Type      Type
	BlockSize int
	Rows      int
	Cols      int
	DType     string // dtype of the weight before quantization, as the quant state names it ("bfloat16"…)

	Packed []byte    // (Rows·Cols+1)/2 bytes, high nibble first
	Absmax []float32 // one per block, nil when double-quantized

	QAbsmax         []uint8
	NestedAbsmax    []float32
	NestedCode      *[256]float32
	NestedBlockSize int
	Offset          float32
}

// Len is the number of weight values.
func (w *Weight) Len() int { return w.Rows * w.Cols }

// Blocks is the number of 4-bit blocks.
func (w *Weight) Blocks() int { return NumBlocks(w.Len(), w.BlockSize) }

// Nested reports whether the absmax values are double-quantized.
func (w *Weight) Nested() bool { return w.QAbsmax != nil }

// Quantize quantizes a [rows, cols] float32 weight (row-major). dtype names the weight's
// original dtype for the quant state ("float32", "float16" or "bfloat16"; "" means float32).
func Quantize(x []float32, rows, cols int, dtype string, opt Options) (*Weight, error) {
	if rows <= 0 || cols <= 0 || len(x) != rows*cols {
		return nil, fmt.Errorf("quant: weight of %d values is not [%d, %d]", len(x), rows, cols)
	}
	return quantizeChunks(rows, cols, dtype, opt, rows, func(r0, r1 int) ([]float32, error) { return x, nil })
}

// StagingLen is the size of the float32 buffer QuantizeRows stages a weight's rows in.
const StagingLen = 1 << 20

// QuantizeRows is Quantize for a weight read a chunk of rows at a time: read fills dst (whole
// rows) with the rows from r0 on. The chunks are staged in scratch (reused from call to call:
// pass a buffer of StagingLen or more; a smaller one, or a row too long for it, makes the
// chunk a buffer of its own), so a weight's float32 copy never exists. The result is
// Quantize's, byte for byte: chunks end on block boundaries.
func QuantizeRows(rows, cols int, dtype string, opt Options, scratch []float32, read func(dst []float32, r0 int) error) (*Weight, error) {
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("quant: weight shape [%d, %d]", rows, cols)
	}
	if err := opt.Check(); err != nil {
		return nil, err
	}
	// a whole number of blocks per chunk: step rows hold lcm(cols, BlockSize) values
	step := opt.BlockSize / gcd(cols, opt.BlockSize)
	per := max(step, len(scratch)/cols/step*step)
	if per*cols > len(scratch) {
		scratch = make([]float32, min(per, rows)*cols)
	}
	return quantizeChunks(rows, cols, dtype, opt, per, func(r0, r1 int) ([]float32, error) {
		dst := scratch[:(r1-r0)*cols]
		return dst, read(dst, r0)
	})
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// quantizeChunks quantizes the weight chunk by chunk: chunk returns rows [r0, r1), per rows at
// a time (per·cols a multiple of the block size, or per ≥ rows).
func quantizeChunks(rows, cols int, dtype string, opt Options, per int, chunk func(r0, r1 int) ([]float32, error)) (*Weight, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	if dtype == "" {
		dtype = "float32"
	}
	w := &Weight{Type: opt.Type, BlockSize: opt.BlockSize, Rows: rows, Cols: cols, DType: dtype,
		Packed: make([]byte, (rows*cols+1)/2)}
	absmax := make([]float32, w.Blocks())
	for r0 := 0; r0 < rows; r0 += per {
		r1 := min(rows, r0+per)
		x, err := chunk(r0, r1)
		if err != nil {
			return nil, err
		}
		if i := firstNonFinite(x); i >= 0 {
			i += r0 * cols
			return nil, fmt.Errorf("quant: weight value %d (row %d, column %d) is %v", i, i/cols, i%cols, x[i-r0*cols])
		}
		lo, hi := r0*cols, r1*cols
		Quantize4(w.Packed[lo/2:(hi+1)/2], absmax[lo/opt.BlockSize:NumBlocks(hi, opt.BlockSize)], x, opt.Type, opt.BlockSize)
	}
	if !opt.DoubleQuant {
		w.Absmax = absmax
		return w, nil
	}
	w.doubleQuantize(absmax)
	return w, nil
}

// doubleQuantize stores absmax as bitsandbytes' compress_statistics does: offset = mean(absmax),
// then (absmax − offset) blockwise in 8 bits. The mean is taken in float64 and rounded once;
// torch's float32 reduction may differ from it in the last bit.
func (w *Weight) doubleQuantize(absmax []float32) {
	var sum float64
	for _, a := range absmax {
		sum += float64(a)
	}
	w.Offset = float32(sum / float64(len(absmax)))
	centred := make([]float32, len(absmax))
	for i, a := range absmax {
		centred[i] = a - w.Offset
	}
	w.NestedBlockSize = NestedBlockSize
	w.NestedCode = &DynamicCode
	w.QAbsmax = make([]uint8, len(absmax))
	w.NestedAbsmax = make([]float32, NumBlocks(len(absmax), NestedBlockSize))
	Quantize8(w.QAbsmax, w.NestedAbsmax, centred, w.NestedCode, NestedBlockSize)
}

// Scale is block b's absmax as dequantization uses it.
func (w *Weight) Scale(b int) float32 {
	if w.QAbsmax == nil {
		return w.Absmax[b]
	}
	return float32(w.NestedCode[w.QAbsmax[b]]*w.NestedAbsmax[b/w.NestedBlockSize]) + w.Offset
}

// Scales returns every block's absmax as dequantization uses it.
func (w *Weight) Scales() []float32 {
	s := make([]float32, w.Blocks())
	for b := range s {
		s[b] = w.Scale(b)
	}
	return s
}

// Dequantize writes the full float32 weight, row-major, into dst (Rows·Cols values).
func (w *Weight) Dequantize(dst []float32) {
	w.DequantizeRows(dst, 0, w.Rows)
}

// DequantizeRows writes rows r0..r1-1 into dst ((r1−r0)·Cols values), expanding only the
// blocks those rows touch.
func (w *Weight) DequantizeRows(dst []float32, r0, r1 int) {
	if r0 < 0 || r1 > w.Rows || r0 > r1 || len(dst) != (r1-r0)*w.Cols {
		panic(fmt.Sprintf("quant: DequantizeRows(%d, %d) of a [%d, %d] weight into %d values", r0, r1, w.Rows, w.Cols, len(dst)))
	}
	lo, hi := r0*w.Cols, r1*w.Cols
	// Chunk c covers [lo+c·bs, lo+(c+1)·bs), clipped to hi; chunks need not start on a block
	// boundary (lo may not be a multiple of bs): expandRange splits them at blocks.
	parallelBlocks(NumBlocks(hi-lo, w.BlockSize), func(c0, c1 int) {
		a, b := lo+c0*w.BlockSize, min(hi, lo+c1*w.BlockSize)
		if a < b {
			w.expandRange(dst[a-lo:b-lo], a)
		}
	})
}

// DequantizeRange writes the flattened values lo..lo+len(dst)-1 into dst.
func (w *Weight) DequantizeRange(dst []float32, lo int) {
	if lo < 0 || lo+len(dst) > w.Len() {
		panic(fmt.Sprintf("quant: DequantizeRange(%d, +%d) of %d values", lo, len(dst), w.Len()))
	}
	w.expandRange(dst, lo)
}

// expandRange expands flattened values [lo, lo+len(dst)) block by block on one goroutine.
func (w *Weight) expandRange(dst []float32, lo int) {
	code := w.Type.Code()
	bs := w.BlockSize
	for i := 0; i < len(dst); {
		g := lo + i // flattened index
		b := g / bs
		end := min(len(dst), i+(b+1)*bs-g)
		a := w.Scale(b)
		seg := dst[i:end]
		if g%2 == 1 { // starts on a low nibble
			seg[0] = code[w.Packed[g/2]&15] * a
			seg = seg[1:]
			g++
		}
		decodeBlock(seg, w.Packed[g/2:], &code, a)
		i = end
	}
}

// Bytes is the memory the weight holds: packed codes, absmax (or its 8-bit codes, nested absmax
// and the 256-entry nested code book) and the 16-entry code book.
func (w *Weight) Bytes() int {
	n := len(w.Packed) + 4*len(w.Absmax) + 16*4
	if w.Nested() {
		n += len(w.QAbsmax) + 4*len(w.NestedAbsmax) + 256*4 + 4
	}
	return n
}

// BitsPerParam is 8·Bytes / Len.
func (w *Weight) BitsPerParam() float64 { return 8 * float64(w.Bytes()) / float64(w.Len()) }

// checkFiniteScales refuses a loaded state whose scales are not finite.
func checkFiniteScales(v []float32, what string) error {
	if i := firstNonFinite(v); i >= 0 {
		return fmt.Errorf("%s[%d] is %v", what, i, v[i])
	}
	return nil
}
