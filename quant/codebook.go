// Package quant is 4-bit blockwise quantization of linear weights as bitsandbytes does it (NF4
// and FP4 code books, one float32 absmax per block, two codes per byte, high nibble first), its
// double quantization of the absmax values with the signed 8-bit dynamic code, and the
// bitsandbytes file layout, so that what is written here loads in transformers and back.
//
// Rounding follows bitsandbytes' CUDA kernels, the reference its files come from: a block is
// scaled by the float32 reciprocal of its absmax (x·(1/absmax), not x/absmax), a 4-bit code is
// chosen by comparing against the fixed float32 thresholds of kQuantizeBlockwise's decision
// trees, and an 8-bit code by dQuantize's binary search with float32 midpoints.
package quant

import (
	"fmt"
	"math"
)

// Type is a 4-bit code book, named as bitsandbytes' quant_type.
type Type string

// The two 4-bit data types of bitsandbytes.
const (
	NF4 Type = "nf4"
	FP4 Type = "fp4"
)

// NF4Code is bitsandbytes' NormalFloat4 code book (index = 4-bit code): quantiles of N(0,1)
// normalised to [-1, 1], with an exact zero.
var NF4Code = nf4Code()

// nf4Decimal is the code book as bitsandbytes writes it, in decimal (float64) values; the
// float32 code book rounds them, and the thresholds are their midpoints.
var nf4Decimal = [16]float64{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

func nf4Code() [16]float32 {
	var c [16]float32
	for i, v := range nf4Decimal {
		c[i] = float32(v)
	}
	return c
}

// FP4Code is bitsandbytes' FP4 code book: a sign bit (8) and a 3-bit e2m1-like magnitude with
// exponent bias 3, whose values {0, 0.0625, 8, 12, 4, 6, 2, 3} are divided by their maximum, 12,
// in float32 as get_4bit_type does. Code 8 is negative zero.
var FP4Code = fp4Code()

func fp4Code() [16]float32 {
	mags := [8]float32{0, 0.0625, 8, 12, 4, 6, 2, 3}
	var c [16]float32
	for i, m := range mags {
		c[i] = m / 12
		c[i+8] = float32(math.Copysign(float64(m/12), -1))
	}
	return c
}

// nf4Thresholds[i] separates code i from code i+1: a value goes to code i+1 when it is strictly
// greater. These are the float32 literals of bitsandbytes' dQuantizeNF4 decision tree; each is
// the float64 midpoint of two neighbouring decimal code values, printed in shortest decimal form
// and read as a C float literal (rounded once from the decimal; in 4 of the 15 that is not the
// float32 rounding of the float64), so a value exactly on a threshold goes to the lower code.
var nf4Thresholds = [15]float32{
	-0.8480964004993439, -0.6106329262256622, -0.4599952697753906, -0.33967943489551544,
	-0.23460740596055984, -0.13791173323988914, -0.045525018125772476, 0.03979014977812767,
	0.1202552504837513, 0.2035212516784668, 0.2920137718319893, 0.3893125355243683,
	0.5016634166240692, 0.6427869200706482, 0.8614784181118011,
}

// fp4Thresholds[r] separates the r-th and (r+1)-th FP4 magnitudes in increasing order
// (0, 1/192, 1/6, 1/4, 1/3, 1/2, 2/3, 1), compared with |x| strictly greater. They are the
// float32 values of bitsandbytes' dQuantizeFP4 literals, the midpoints 1/384, 11/128, 5/24,
// 7/24, 5/12, 7/12, 5/6 written with about 8 digits: they are within 1e-7 of the midpoints
// except 0.583333 for 7/12, about 3.3e-7 low, so |x| in (0.583333, 7/12] goes up to 2/3 as in
// bitsandbytes.
var fp4Thresholds = [7]float32{0.00260417, 0.0859375, 0.20833333, 0.29166667, 0.4166667, 0.583333, 0.8333333}

// fp4RankCode maps the rank of an FP4 magnitude (in increasing order) to its 3-bit code.
var fp4RankCode = [8]uint8{0b000, 0b001, 0b110, 0b111, 0b100, 0b101, 0b010, 0b011}

// Code is the type's code book.
func (t Type) Code() [16]float32 {
	if t == FP4 {
		return FP4Code
	}
	return NF4Code
}

func (t Type) valid() bool { return t == NF4 || t == FP4 }

// Encode returns the 4-bit code of a value already scaled into [-1, 1]. NaN (an all-zero block
// scaled by 1/0) gives code 0, as in bitsandbytes, whose absmax of 0 then dequantizes to zero.
func (t Type) Encode(x float32) uint8 {
	if t == FP4 {
		return encodeFP4(x)
	}
	return encodeNF4(x)
}

// encodeNF4 walks the same balanced tree as dQuantizeNF4: four strict comparisons.
func encodeNF4(x float32) uint8 {
	var q uint8
	for step := uint8(8); step > 0; step >>= 1 {
		if x > nf4Thresholds[q+step-1] {
			q += step
		}
	}
	return q
}

// encodeFP4 is dQuantizeFP4: the sign bit from x < 0 (so -0 is +0), three comparisons of |x|.
func encodeFP4(x float32) uint8 {
	var sign uint8
	if x < 0 {
		sign = 8
	}
	a := float32(math.Abs(float64(x)))
	var r uint8
	if a > fp4Thresholds[3] {
		r = 4
	}
	if a > fp4Thresholds[r+1] {
		r += 2
	}
	if a > fp4Thresholds[r] {
		r++
	}
	return sign | fp4RankCode[r]
}

// BlockSizes are the 4-bit block sizes bitsandbytes accepts.
var BlockSizes = []int{32, 64, 128, 256, 512, 1024, 2048, 4096}

func validBlockSize(bs int) bool {
	for _, b := range BlockSizes {
		if b == bs {
			return true
		}
	}
	return false
}

func checkBlockSize(bs int) error {
	if !validBlockSize(bs) {
		return fmt.Errorf("quant: blocksize %d not allowed (one of %v)", bs, BlockSizes)
	}
	return nil
}

// ParseType reads a quant_type name.
func ParseType(s string) (Type, error) {
	t := Type(s)
	if !t.valid() {
		return "", fmt.Errorf("quant: unknown quant_type %q (nf4 or fp4)", s)
	}
	return t, nil
}
