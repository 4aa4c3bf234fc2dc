package cpu

// expChunk is the length of the stack buffers that callers of expAffine work through.
const expChunk = 256

// expAffine sets dst[i] = expf(src[i]·scale + b1 + b2), the float32 operations in that order,
// so that it equals the scalar expression bit for bit. dst may be src. The leading multiple
// of the vector width runs in assembly where the CPU has AVX-512 or AVX2.
func expAffine(dst, src []float32, scale, b1, b2 float32) {
	dst = dst[:len(src)]
	n := expAffineAsm(dst, src, scale, b1, b2)
	expAffineGo(dst[n:], src[n:], scale, b1, b2)
}

// expAffineGo is expAffine's reference: the scalar expf, one value at a time.
func expAffineGo(dst, src []float32, scale, b1, b2 float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf(float32(v*scale) + b1 + b2) // the conversion forbids a fused multiply-add
	}
}
