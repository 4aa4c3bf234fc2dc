package cpu

import "rlhfstation/engine/backend"

// DropoutForward sets out = x·mask/(1−p), the mask backend.DropoutKeep(seed, i, p): the same
// elements every backend drops for a seed, and none stored for the backward.
func DropoutForward(out, x []float32, seed uint64, p float32) {
	scale := 1 / (1 - p)
	th := backend.DropoutThreshold(p)
	For(len(out), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if keepBits(seed, i) >= th {
				out[i] = x[i] * scale
			} else {
				out[i] = 0
			}
		}
	})
}

// DropoutBackward accumulates dx += dout·mask/(1−p) with the forward's mask.
func DropoutBackward(dx, dout []float32, seed uint64, p float32) {
	scale := 1 / (1 - p)
	th := backend.DropoutThreshold(p)
	For(len(dx), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if keepBits(seed, i) >= th {
				dx[i] += dout[i] * scale
			}
		}
	})
}

// keepBits is backend.DropoutKeep's hash, inlined for the loops above.
func keepBits(seed uint64, i int) uint32 {
	z := seed + uint64(i)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return uint32((z ^ (z >> 31)) >> 32)
}
