package cpu

import "math"

// ToBF16 rounds a float32 to bfloat16 bits (to nearest, ties to even; NaN stays NaN).
func ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FromBF16 widens bfloat16 bits to float32 (exact).
func FromBF16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
