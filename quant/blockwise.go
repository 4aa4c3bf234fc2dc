package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// NumBlocks is the number of blocks of size bs covering n values (the last may be partial).
func NumBlocks(n, bs int) int { return (n + bs - 1) / bs }

// blockAbsmax is the largest |x| of a block, as bitsandbytes' block reduction computes it.
func blockAbsmax(x []float32) float32 {
	var m float32
	for _, v := range x {
		if v < 0 {
			v = -v
		}
		if v > m {
			m = v
		}
	}
	return m
}

// Quantize4 quantizes x blockwise to 4-bit codes of type t: absmax[b] receives the largest |x|
// of block b and packed two codes per byte, the even element in the high nibble. An odd length is
// padded with the code of a zero in the last block, as bitsandbytes' kernel pads its loads with
// zeros. packed must hold (len(x)+1)/2 bytes and absmax NumBlocks(len(x), bs) values.
func Quantize4(packed []byte, absmax []float32, x []float32, t Type, bs int) {
	nb := NumBlocks(len(x), bs)
	if len(packed) != (len(x)+1)/2 || len(absmax) != nb {
		panic(fmt.Sprintf("quant: Quantize4 buffers: packed %d (want %d), absmax %d (want %d)",
			len(packed), (len(x)+1)/2, len(absmax), nb))
	}
	parallelBlocks(nb, func(b0, b1 int) {
		for b := b0; b < b1; b++ {
			lo, hi := b*bs, min((b+1)*bs, len(x))
			block := x[lo:hi]
			a := blockAbsmax(block)
			absmax[b] = a
			inv := 1 / a
			// bs is even, so a block starts on a byte boundary.
			out := packed[lo/2:]
			for i := 0; i+1 < len(block); i += 2 {
				out[i/2] = t.Encode(block[i]*inv)<<4 | t.Encode(block[i+1]*inv)
			}
			if len(block)%2 == 1 {
				out[len(block)/2] = t.Encode(block[len(block)-1]*inv)<<4 | t.Encode(0*inv)
			}
		}
	})
}

// Dequantize4 is the inverse of Quantize4: dst[i] = code[q_i]·absmax[i/bs], the float32 product
// bitsandbytes computes.
func Dequantize4(dst []float32, packed []byte, absmax []float32, t Type, bs int) {
	code := t.Code()
	nb := NumBlocks(len(dst), bs)
	parallelBlocks(nb, func(b0, b1 int) {
		for b := b0; b < b1; b++ {
			lo, hi := b*bs, min((b+1)*bs, len(dst))
			decodeBlock(dst[lo:hi], packed[lo/2:], &code, absmax[b])
		}
	})
}

// decodeBlock expands len(dst) codes from packed (starting at a high nibble) scaled by a.
func decodeBlock(dst []float32, packed []byte, code *[16]float32, a float32) {
	n := len(dst)
	src := packed[:(n+1)/2]
	i := 0
	for _, q := range src[:n/2] {
		dst[i] = code[q>>4] * a
		dst[i+1] = code[q&15] * a
		i += 2
	}
	if n%2 == 1 {
		dst[n-1] = code[src[n/2]>>4] * a
	}
}

// Quantize8 quantizes x blockwise to 8-bit codes of a 256-value code book (bitsandbytes'
// quantize_blockwise): absmax[b] is the largest |x| of block b, code = EncodeDynamic(x·(1/absmax)).
func Quantize8(q []uint8, absmax []float32, x []float32, code *[256]float32, bs int) {
	for b := range NumBlocks(len(x), bs) {
		lo, hi := b*bs, min((b+1)*bs, len(x))
		a := blockAbsmax(x[lo:hi])
		absmax[b] = a
		inv := 1 / a
		for i := lo; i < hi; i++ {
			q[i] = EncodeDynamic(code, x[i]*inv)
		}
	}
}

// Dequantize8 is the inverse of Quantize8: dst[i] = code[q_i]·absmax[i/bs].
func Dequantize8(dst []float32, q []uint8, absmax []float32, code *[256]float32, bs int) {
	for i := range dst {
		dst[i] = code[q[i]] * absmax[i/bs]
	}
}

// allFinite reports the index of the first non-finite value, or -1.
func firstNonFinite(x []float32) int {
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i
		}
	}
	return -1
}

// parallelBlocks runs f over [0, nb) split into contiguous ranges, one per core, when the work
// is large enough to pay for the goroutines.
func parallelBlocks(nb int, f func(b0, b1 int)) {
	workers := min(runtime.GOMAXPROCS(0), nb/64)
	if workers <= 1 {
		f(0, nb)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		b0, b1 := w*nb/workers, (w+1)*nb/workers
		wg.Go(func() { f(b0, b1) })
	}
	wg.Wait()
}
