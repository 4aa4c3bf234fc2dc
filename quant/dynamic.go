package quant

import (
	"math"
	"sort"
)

// DynamicCode is bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8), the 8-bit code of double quantization, sorted increasingly:
//
//	for i in 0..6: b = linspace(0.1, 1, 2^i + 1) in float32; m_j = (b_j + b_{j+1}) / 2;
//	               values ±float32(10^(i-6)) · m_j   (127 positive, 127 negative)
//	plus 0 and 1.
//
// The extremes are ±0.99296875 and 1; index 127 is 0. The float32 arithmetic follows
// PyTorch's CPU linspace so that the table is bit for bit the one bitsandbytes stores
// (checked against torch by TestDynamicCodeTorch).
var DynamicCode = dynamicCode()

func dynamicCode() [256]float32 {
	var data []float32
	for i := 0; i < 7; i++ {
		b := linspace32(0.1, 1, 1<<i+1)
		scale := float32(math.Pow10(i - 6))
		for j := 0; j+1 < len(b); j++ {
			m := (b[j] + b[j+1]) / 2
			data = append(data, scale*m, -scale*m)
		}
	}
	data = append(data, 0, 1)
	sort.Slice(data, func(a, b int) bool { return data[a] < data[b] })
	var c [256]float32
	copy(c[:], data)
	return c
}

// linspace32 is torch.linspace(start, end, steps) in float32 as PyTorch's CPU kernel computes
// it: step = (end−start)/(steps−1); an element is start + step·i in the first half and
// end − step·(steps−1−i) in the second, each one fused multiply-add; the leading multiple of 16
// elements goes through the 8-wide vector path, which computes the first element of each 8 that
// way and the other seven as base + (j·step) with two roundings.
func linspace32(start, end float32, steps int) []float32 {
	out := make([]float32, steps)
	if steps == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float32(steps-1)
	half := steps / 2
	at := func(i int) float32 {
		if i < half {
			return fma32(step, float32(i), start)
		}
		return fma32(-step, float32(steps-1-i), end)
	}
	vec := steps - steps%16
	for i0 := 0; i0 < vec; i0 += 8 {
		base := at(i0)
		for j := 0; j < 8; j++ {
			out[i0+j] = base + float32(float32(j)*step)
		}
	}
	for i := vec; i < steps; i++ {
		out[i] = at(i)
	}
	return out
}

// fma32 is a·b + c rounded once to float32. The float64 product of two float32 values is exact,
// and for linspace's operands (a step near 0.01 times a small integer, plus 0.1 or 1) so is the
// float64 sum, so the one rounding is the float32 one.
func fma32(a, b, c float32) float32 {
	return float32(float64(a)*float64(b) + float64(c))
}

// EncodeDynamic returns the 8-bit code of a value scaled into [-1, 1], by bitsandbytes'
// dQuantize (non-stochastic): a 7-step binary search from index 127 ends on an even index p
// with its neighbours p−1 and p+1 as the last values below and above; the result is the nearer
// of p and that neighbour, compared against their float32 midpoint, a tie going to p. That is the
// nearest code value except exactly on a midpoint (TestEncodeDynamicNearest).
func EncodeDynamic(code *[256]float32, x float32) uint8 {
	pivot, upperPivot, lowerPivot := 127, 255, 0
	lower, upper := float32(-1), float32(1)
	val := code[pivot]
	for i := 64; i > 0; i >>= 1 {
		if x > val {
			lowerPivot, lower = pivot, val
			pivot += i
		} else {
			upperPivot, upper = pivot, val
			pivot -= i
		}
		val = code[pivot]
	}
	if upperPivot == 255 {
		upper = code[255]
	}
	if lowerPivot == 0 {
		lower = code[0]
	}
	if x > val {
		if x > (upper+val)*0.5 {
			return uint8(upperPivot)
		}
		return uint8(pivot)
	}
	if x < (lower+val)*0.5 {
		return uint8(lowerPivot)
	}
	return uint8(pivot)
}
