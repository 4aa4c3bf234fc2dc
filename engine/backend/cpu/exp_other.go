//go:build purego || !amd64

package cpu

import "math"

var expKernel = "go"

func expAffineAsm(dst, src []float32, scale, b1, b2 float32) int { return 0 }

func expSumAsm(src []float32, scale, b1 float32, acc *[8]float64) int { return 0 }

func maxNaNAsm(src []float32, scale float32) (float32, bool, int) {
	return float32(math.Inf(-1)), false, 0
}
