//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

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
