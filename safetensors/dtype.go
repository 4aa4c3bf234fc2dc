// Package safetensors reads and writes the safetensors format: an 8-byte little-endian header
// length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}} plus an
// optional "__metadata__" of strings), then the byte buffer the offsets point into.
// Reading validates the whole header before any tensor is touched, and every error names the
// file and the tensor.
package safetensors

import "math"

// DType is a tensor element type as the format spells it.
type DType string

// The element types the format defines with whole-byte elements.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	Bool   DType = "BOOL"
)

var dtypeSizes = map[DType]int{
	F64: 8, F32: 4, F16: 2, BF16: 2, F8E4M3: 1, F8E5M2: 1,
	I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, Bool: 1,
}

// Size is the size of one element in bytes, 0 for a dtype the format does not define.
func (d DType) Size() int { return dtypeSizes[d] }

// Known reports whether d is a dtype this package can lay out.
func (d DType) Known() bool { return dtypeSizes[d] != 0 }

// F16ToF32 converts an IEEE half-precision value exactly (subnormals, infinities and NaN
// payloads included).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant·2^-24, normalised for float32
		e := uint32(127 - 14)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// BF16ToF32 converts a bfloat16 value exactly: it is the top half of a float32.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToF16 rounds a float32 to the nearest half-precision value, ties to even; values beyond
// the half range become infinities and NaN stays NaN.
func F32ToF16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23) & 0xff
	mant := bits & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	var m uint32
	var shift uint
	if e >= 1 {
		m, shift = uint32(e)<<23|mant, 13 // exponent and mantissa round together: a carry bumps the exponent
	} else {
		if e < -10 {
			return sign
		}
		m, shift = mant|0x800000, uint(14-e) // float32 subnormals (e = -112) returned above
	}
	h := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// F32ToBF16 rounds a float32 to the nearest bfloat16, ties to even; NaN stays a quiet NaN.
func F32ToBF16(f float32) uint16 {
	bits := math.Float32bits(f)
	if bits&0x7fffffff > 0x7f800000 {
		return uint16(bits>>16) | 0x40
	}
	return uint16((bits + 0x7fff + (bits>>16)&1) >> 16)
}
