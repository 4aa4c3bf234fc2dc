//go:build !amd64 || purego

package gemm

// kernels lists the kernels this build can run: only the portable one.
func kernels() []*kernel { return []*kernel{goKernel} }

// transposePanel has no fast path here; packStrided does all the work in Go.
func transposePanel(d, src []float32, ld, q0, p0, kc, w int) int { return 0 }

// useTranspose16 mirrors the amd64 switch so that tests read the same everywhere.
var useTranspose16 = false
