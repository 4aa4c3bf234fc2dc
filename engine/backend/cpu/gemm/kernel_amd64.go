//go:build !purego

package gemm

import "golang.org/x/sys/cpu"

//go:generate go run gen_kernels.go

// The assembly kernels (kernel_amd64.s) compute one tile from packed panels; load≠0 means
// C is read and scaled by beta, load=0 means C is only written.

//go:noescape
func kernelAVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)

//go:noescape
func kernelAVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)

//go:noescape
func kernelAVX512D(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int, ldb int)

//go:noescape
func kernelAVX512D8(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int, ldb int)

//go:noescape
func kernelAVX2D(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int, ldb int)

//go:noescape
func transpose16(dst *float32, ldd int, rows *[16]*float32, lanes, blocks int)

//go:noescape
func copyPanel(dst, src *float32, lds, w, wq, kc int)

// asmPack selects the AVX-512 packing routines (tests turn it off to cover the Go ones).
var asmPack = cpu.X86.HasAVX512F

// copyPanelAsm packs one micro-panel of width w ≤ 32 whose k steps are rows of src (wq floats
// valid each), zero-padding the lanes past wq; it reports false where it cannot.
func copyPanelAsm(d, src []float32, ld, w, wq, kc int) bool {
	if !asmPack || w > 32 || kc == 0 {
		return false
	}
	_, _ = d[kc*w-1], src[(kc-1)*ld+wq-1]
	copyPanel(&d[0], &src[0], ld, w, wq, kc)
	return true
}

// transposePanel packs the leading multiple of 16 of the kc columns of one full micro-panel
// (rows q0..q0+w-1 of src from column p0, into d as d[p·w+l]) and returns how many it packed.
func transposePanel(d, src []float32, ld, q0, p0, kc, w int) int {
	blocks := kc / 16
	if !asmPack || blocks == 0 {
		return 0
	}
	_ = d[blocks*16*w-1]
	var rows [16]*float32
	for l0 := 0; l0 < w; l0 += 16 {
		lanes := min(16, w-l0)
		for i := range rows {
			// Rows past the panel are masked off; point them at a row that exists.
			base := (q0+l0+min(i, lanes-1))*ld + p0
			rows[i] = &src[base : base+blocks*16][0]
		}
		transpose16(&d[l0], w, &rows, lanes, blocks)
	}
	return blocks * 16
}

//go:noescape
func dotNT(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, load int)

//go:noescape
func kernelAVX512N(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)

// avx512Narrow takes products with at most 16 columns (LoRA's rank side), where the 32 wide
// kernel would compute half zeros.
var avx512Narrow = &kernel{name: "avx512-narrow", mr: 28, nr: 16, mc: 336, kc: 256, nc: 4096,
	run: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool) {
		_, _, _ = a[kc*28-1], b[kc*16-1], c[27*ldc+15]
		kernelAVX512N(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load))
	},
	dotM: 32,
	dotN: 16,
	dot:  dotAVX512,
}

func dotAVX512(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, alpha, beta float32, load bool) {
	_, _, _ = a[3*lda+k-1], b[3*ldb+k-1], c[3*ldc+3]
	dotNT(k, &a[0], lda, &b[0], ldb, &c[0], ldc, alpha, beta, flag(load))
}

// avx512Kernel is the main AVX-512 kernel: 14×32 keeps 28 of the 32 registers accumulating, so
// each k step is 2 loads of B, 14 broadcasts of A and 28 FMAs. Blocking for Zen 5 (48 KB L1d,
// 1 MB L2 per core): a kc=256 B micro-panel is 32 KB and stays in L1 while the A micro-panels
// stream past it, the 336×256 A block is 336 KB of L2, and a kc×nc B block up to 4 MB sits in
// L3. Measured alternatives (12×32, 8×48, 7×48, 6×64; kc 128…512; mc 168…672) were within
// noise of this choice on this machine.
var avx512Kernel = &kernel{name: "avx512", mr: 14, nr: 32, mc: 336, kc: 256, nc: 4096,
	run: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool) {
		// The index expressions check that the whole tile is in bounds before the
		// assembly touches raw memory.
		_, _, _ = a[kc*14-1], b[kc*32-1], c[13*ldc+31]
		kernelAVX512(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load))
	},
	dotM:    32,
	dotN:    16,
	dot:     dotAVX512,
	narrow:  avx512Narrow,
	directM: 84,
	direct: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool, ldb int) {
		_, _, _ = a[kc*14-1], b[(kc-1)*ldb+31], c[13*ldc+31]
		kernelAVX512D(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load), ldb)
	},
	short: &kernel{name: "avx512-short", mr: 8, nr: 32, kc: 256,
		direct: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool, ldb int) {
			_, _, _ = a[kc*8-1], b[(kc-1)*ldb+31], c[7*ldc+31]
			kernelAVX512D8(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load), ldb)
		}},
}

// avx2Kernel is the classic 6×16 AVX2+FMA kernel: 12 accumulators, 2 B vectors and the
// broadcasts fill the 16 ymm registers.
var avx2Kernel = &kernel{name: "avx2", mr: 6, nr: 16, mc: 240, kc: 256, nc: 4096,
	run: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool) {
		_, _, _ = a[kc*6-1], b[kc*16-1], c[5*ldc+15]
		kernelAVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load))
	},
	directM: 36,
	direct: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool, ldb int) {
		_, _, _ = a[kc*6-1], b[(kc-1)*ldb+15], c[5*ldc+15]
		kernelAVX2D(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load), ldb)
	},
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// kernels lists the kernels this CPU can run, fastest first.
func kernels() []*kernel {
	var ks []*kernel
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL {
		ks = append(ks, avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
	}
	return append(ks, goKernel)
}
