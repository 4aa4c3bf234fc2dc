//go:build !amd64 || purego

package gemm

// kernels lists the kernels this build can run: only the portable one.
func kernels() []*kernel { return []*kernel{goKernel} }

// transposePanel and copyPanelAsm have no fast path here; the Go packing does all the work.
func transposePanel(d, src []float32, ld, q0, p0, kc, w int) int { return 0 }

func copyPanelAsm(d, src []float32, ld, w, wq, kc int) bool { return false }

// asmPack mirrors the amd64 switch so that tests read the same everywhere.
var asmPack = false
