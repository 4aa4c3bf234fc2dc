package cpu

import "math"

// expf is exp for float32 arguments, about twice as fast as math.Exp and within 2 ulp of
// it: x = n·ln2 + r with |r| ≤ ln2/2, exp(r) by its degree-7 Taylor polynomial, times 2ⁿ.
// It returns 0 below the smallest normal float32 and +Inf above the largest.
func expf(x float32) float32 {
	switch {
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	case x != x:
		return x
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375 // ln2 = ln2hi + ln2lo, ln2hi exact in few bits
		ln2lo = -2.12194440e-4
	)
	t := x * log2e
	var n int32
	if t >= 0 {
		n = int32(t + 0.5)
	} else {
		n = int32(t - 0.5)
	}
	fn := float32(n)
	r := x - fn*ln2hi - fn*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	switch { // where 2ⁿ is not a normal float32, scale in two steps
	case n > 127:
		return p * 2 * math.Float32frombits(uint32(n-1+127)<<23)
	case n < -126:
		return p * math.Float32frombits(uint32(n+126+127)<<23) * math.Float32frombits(1<<23)
	}
	return p * math.Float32frombits(uint32(n+127)<<23)
}
