package cpu

// SoftcapForward sets out = cap·tanh(inp/cap) over n elements: logit soft-capping (gemma2).
// out may be inp.
func SoftcapForward(out, inp []float32, n int, cap float32) {
	For(n, 1<<13, func(lo, hi int) {
		for c := lo; c < hi; c += expChunk {
			e := min(c+expChunk, hi)
			capInto(out[c:e], inp[c:e], cap)
		}
	})
}

// SoftcapBackward accumulates dinp += dout·(1 − (out/cap)²), the derivative written with the
// forward's output, so that the forward may cap in place.
func SoftcapBackward(dinp, dout, out []float32, n int, cap float32) {
	For(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dinp[i] += dout[i] * softcapSlope(out[i], cap)
		}
	})
}

// softcapSlope is d(cap·tanh(x/cap))/dx at the point whose capped value is y: 1 − (y/cap)².
func softcapSlope(y, cap float32) float32 {
	t := y / cap
	return 1 - t*t
}

// uncap turns the gradient d of capped values y into that of the values before the cap, in
// place: d ·= 1 − (y/cap)².
func uncap(d, y []float32, cap float32) {
	For(len(d), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] *= softcapSlope(y[i], cap)
		}
	})
}

// capInto sets dst = cap·tanh(src/cap) through the vector exp: tanh(u) = 1 − 2/(e^{2u} + 1),
// exact to about float32's epsilon in absolute terms and saturating cleanly at ±cap.
// dst may be src.
func capInto(dst, src []float32, cap float32) {
	expAffine(dst, src, 2/cap, 0, 0)
	for i, e := range dst {
		dst[i] = cap * (1 - 2/(e+1))
	}
}

// capInPlace caps x in place, a stack buffer's length at a time.
func capInPlace(x []float32, cap float32) {
	for c := 0; c < len(x); c += expChunk {
		e := min(c+expChunk, len(x))
		capInto(x[c:e], x[c:e], cap)
	}
}
