//go:build !purego

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

//go:noescape
func expAffineAVX512(dst, src *float32, n int, scale, b1, b2 float32)

//go:noescape
func expAffineAVX2(dst, src *float32, n int, scale, b1, b2 float32)

// expKernel is the vector exp in use: "avx512", "avx2" or "go" (tests switch it).
var expKernel = func() string {
	switch {
	case cpu.X86.HasAVX512F:
		return "avx512"
	case cpu.X86.HasAVX2:
		return "avx2"
	}
	return "go"
}()

// expAffineAsm runs the leading multiple of the vector width of expAffine in assembly and
// returns how many values it did.
func expAffineAsm(dst, src []float32, scale, b1, b2 float32) int {
	switch {
	case expKernel == "avx512" && len(src) >= 16:
		n := len(src) &^ 15
		expAffineAVX512(&dst[0], &src[0], n, scale, b1, b2)
		return n
	case expKernel != "go" && len(src) >= 8:
		n := len(src) &^ 7
		expAffineAVX2(&dst[0], &src[0], n, scale, b1, b2)
		return n
	}
	return 0
}

//go:noescape
func expSumAVX2(src *float32, n int, scale, b1 float32, acc *[8]float64)

//go:noescape
func maxAVX2(src *float32, n int, scale float32, out *[16]float32)

// expSumAsm runs the leading multiple of 16 of expSum's loop in assembly and returns how
// many values it did.
func expSumAsm(src []float32, scale, b1 float32, acc *[8]float64) int {
	if expKernel == "go" || len(src) < 16 {
		return 0
	}
	n := len(src) &^ 15
	expSumAVX2(&src[0], n, scale, b1, acc)
	return n
}

// maxNaNAsm runs the leading multiple of 32 of maxNaN in assembly: the largest value that is
// not NaN, whether one was NaN, and how many values it did.
func maxNaNAsm(src []float32, scale float32) (float32, bool, int) {
	m := float32(math.Inf(-1))
	if expKernel == "go" || len(src) < 32 {
		return m, false, 0
	}
	n := len(src) &^ 31
	var out [16]float32
	maxAVX2(&src[0], n, scale, &out)
	nan := false
	for i := range 8 {
		m = max(m, out[i])
		nan = nan || math.Float32bits(out[8+i]) != 0
	}
	return m, nan, n
}
