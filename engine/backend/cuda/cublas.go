package cuda

import (
	"fmt"
	"unsafe"
)

// cublas is the slice of cuBLAS the backend calls: GEMMs in bf16/f16/f32 with float32
// compute, single and strided-batched, on the backend's stream.
type cublas struct {
	lib
	lt                                           uintptr // libcublasLt's handle, kept open
	cublasCreate, cublasDestroy, cublasSetStream uintptr
	cublasSetMathMode, cublasSetWorkspace        uintptr
	cublasGetVersion                             uintptr
	cublasGemmEx, cublasGemmStridedBatchedEx     uintptr
	version                                      int
}

// cuBLAS and CUDA library constants (cublas_api.h, library_types.h).
// cuBLAS keeps its default math mode: tensor cores for bf16 inputs, plain float32 (no TF32)
// for float32 ones; with CUBLAS_COMPUTE_32F every sum is float32.
const (
	opN        = 0
	opT        = 1
	dtF32      = 0  // CUDA_R_32F
	dtBF16     = 14 // CUDA_R_16BF
	computeF32 = 68 // CUBLAS_COMPUTE_32F
)

func openCUBLAS(path, lt string) (*cublas, error) {
	l, err := dlopen(lt, true)
	if err != nil {
		return nil, err
	}
	b := &cublas{lt: l.handle}
	if b.lib, err = dlopen(path, false); err != nil {
		return nil, err
	}
	if err := b.bind([]symbol{{"cublasCreate_v2", &b.cublasCreate}, {"cublasDestroy_v2", &b.cublasDestroy},
		{"cublasSetStream_v2", &b.cublasSetStream}, {"cublasSetMathMode", &b.cublasSetMathMode},
		{"cublasSetWorkspace_v2", &b.cublasSetWorkspace}, {"cublasGetVersion_v2", &b.cublasGetVersion},
		{"cublasGemmEx", &b.cublasGemmEx}, {"cublasGemmStridedBatchedEx", &b.cublasGemmStridedBatchedEx}}); err != nil {
		return nil, err
	}
	return b, nil
}

var cublasStatus = map[int]string{1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR"}

func (b *cublas) check(what string, r int) error {
	if r == 0 {
		return nil
	}
	name, ok := cublasStatus[r]
	if !ok {
		name = fmt.Sprintf("cublasStatus %d", r)
	}
	return &Error{Call: what, Code: r, Name: name}
}

// gemmArgs is one product in row-major terms, as the CPU's sgemm takes it:
// C[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C, leading dimensions in elements, strides
// between batch items in elements.
type gemmArgs struct {
	transA, transB            bool
	m, n, k                   int
	alpha, beta               float32
	a, b, c                   uintptr
	aType, bType, cType       int
	lda, ldb, ldc             int
	strideA, strideB, strideC int64
	batch                     int // 0 or 1: a single product
}

// gemm runs the product on handle's stream. cuBLAS is column-major: row-major C = op(A)·op(B)
// is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so the operands swap and so do m and n.
func (b *cublas) gemm(h uintptr, g *gemmArgs) error {
	if g.m == 0 || g.n == 0 {
		return nil
	}
	ta, tb := uintptr(opN), uintptr(opN)
	if g.transA {
		ta = opT
	}
	if g.transB {
		tb = opT
	}
	alpha, beta := g.alpha, g.beta
	if g.batch <= 1 {
		return b.check("cublasGemmEx", call(b.cublasGemmEx, h, tb, ta, uintptr(g.n), uintptr(g.m), uintptr(g.k),
			uintptr(unsafe.Pointer(&alpha)), g.b, uintptr(g.bType), uintptr(g.ldb), g.a, uintptr(g.aType), uintptr(g.lda),
			uintptr(unsafe.Pointer(&beta)), g.c, uintptr(g.cType), uintptr(g.ldc), computeF32, uintptr(gemmDefaultAlgo)))
	}
	return b.check("cublasGemmStridedBatchedEx", call(b.cublasGemmStridedBatchedEx, h, tb, ta, uintptr(g.n), uintptr(g.m), uintptr(g.k),
		uintptr(unsafe.Pointer(&alpha)), g.b, uintptr(g.bType), uintptr(g.ldb), uintptr(g.strideB),
		g.a, uintptr(g.aType), uintptr(g.lda), uintptr(g.strideA),
		uintptr(unsafe.Pointer(&beta)), g.c, uintptr(g.cType), uintptr(g.ldc), uintptr(g.strideC),
		uintptr(g.batch), computeF32, uintptr(gemmDefaultAlgo)))
}

// gemmDefaultAlgo is CUBLAS_GEMM_DEFAULT (−1) as the C enum's bits in a register.
var gemmDefaultAlgo = uint32(0xFFFFFFFF)
