//go:build !purego

package cpu

import (
	"os"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_q4dot.go

// The AVX2 kernels (q4dot_amd64.s): q4dotT takes T rows of x; see q4dotGo for the contract.

//go:noescape
func q4row1(rows, n int, packed *byte, scales *float32, x *float32, y *float32, code *q4Tables)

//go:noescape
func q4row16(rows, n int, packed *byte, scales *float32, x *int16, y *float32, code *q4Tables)

//go:noescape
func q4row16x2(rows, n int, packed *byte, scales *float32, x *int16, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func q4dot16x4(n int, packed *byte, scales *float32, x *int16, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func q4dot16x8(n int, packed *byte, scales *float32, x *int16, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func quantX16AVX2(n int, x *float32, dst *int16)

//go:noescape
func q4row16AVX512(rows, n int, packed *byte, scales *float32, x *int16, y *float32, code *q4Tables)

//go:noescape
func q4row1AVX512(rows, n int, packed *byte, scales *float32, x *float32, y *float32, code *q4Tables)

//go:noescape
func q4dot2(n int, packed *byte, scales *float32, x *float32, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func q4dot4(n int, packed *byte, scales *float32, x *float32, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func q4dot8(n int, packed *byte, scales *float32, x *float32, ldx int, y *float32, ldy int, code *q4Tables)

//go:noescape
func f32row1(rows, n int, w *float32, ldw int, x *float32, y *float32)

//go:noescape
func bf16row1(rows, n int, w *uint16, ldw int, x *float32, y *float32)

//go:noescape
func f32dot1(n int, w *float32, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func f32dot2(n int, w *float32, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func f32dot4(n int, w *float32, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func f32dot8(n int, w *float32, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func bf16dot1(n int, w *uint16, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func bf16dot2(n int, w *uint16, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func bf16dot4(n int, w *uint16, x *float32, ldx int, y *float32, ldy int)

//go:noescape
func bf16dot8(n int, w *uint16, x *float32, ldx int, y *float32, ldy int)

// q4dotKernel is the few-row kernel in use (4-bit, float32 and bf16): "avx2" or "go" (tests switch it).
var q4dotKernel = func() string {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		return "avx2"
	}
	return "go"
}()

// q4row512 picks the AVX-512 one-row kernel (tests switch it). Its text is checked here under
// an interpreter of the kernels' assembly (TestQ4Row512UnderTheInterpreter), but it has not
// yet run on a CPU with AVX-512 (TestQ4Row512MatchesDequantized skips elsewhere), so a run
// takes it only when $RLHFSTATION_CPU_Q4_AVX512=1 asks for it; otherwise the AVX2 kernels,
// which such CPUs run too.
var q4row512 = cpu.X86.HasAVX512F && q4dotKernel == "avx2" && os.Getenv("RLHFSTATION_CPU_Q4_AVX512") == "1"

// q4row16On sends one or two rows of x alone to the int16 kernels (q4row16, q4row16x2; see
// q4dot.go for their error); tests switch it.
var q4row16On = q4dotKernel == "avx2"

// q4row16On512 takes the AVX-512 int16 one-row kernel (q4row16AVX512, AVX-512BW) instead of
// q4row16, under q4row512's opt-in and for the same reason: its text is checked here under the
// interpreter only (TestQ4Row16On512UnderTheInterpreter). Tests switch it.
var q4row16On512 = q4row512 && cpu.X86.HasAVX512BW

// quantX16 quantizes x (whole chunks) for the int16 kernels: quantX16Go's values and bits,
// by quantX16AVX2 where the kernels run.
func quantX16(dst []int16, x []float32) {
	n := len(x) / q4Chunk
	if q4dotKernel != "avx2" || n == 0 {
		quantX16Go(dst, x)
		return
	}
	_ = dst[n*q4X16Len-1]
	quantX16AVX2(n, &x[0], &dst[0])
}

// q4rowInt16 runs the int16 kernel for t ∈ {1, 2} rows of x (x + i·ldx from quantX16) over
// rows weight rows of n ≥ 1 chunks each, into y[i·ldy+r].
func q4rowInt16(t, rows, n int, packed []byte, scales []float32, x []int16, ldx int, y []float32, ldy int, code *q4Tables) {
	if q4dotKernel != "avx2" {
		for i := 0; i < t; i++ {
			q4row16Go(n, packed, scales, x[i*ldx:], y[i*ldy:i*ldy+rows], code)
		}
		return
	}
	_, _, _, _ = packed[rows*n*q4Chunk/2-1], scales[rows*n-1], x[(t-1)*ldx+n*q4X16Len-1], y[(t-1)*ldy+rows-1]
	switch t {
	case 1:
		if q4row16On512 {
			q4row16AVX512(rows, n, &packed[0], &scales[0], &x[0], &y[0], code)
			return
		}
		q4row16(rows, n, &packed[0], &scales[0], &x[0], &y[0], code)
	case 2:
		q4row16x2(rows, n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	default:
		panic("cpu: q4rowInt16 takes 1 or 2 rows")
	}
}

// q4dot16 runs the int16 kernel for t ∈ {4, 8} rows of x (x + i·ldx from quantX16) over n ≥ 1
// chunks of one weight row, into y[i·ldy] (MulTSampled).
func q4dot16(t, n int, packed []byte, scales []float32, x []int16, ldx int, y []float32, ldy int, code *q4Tables) {
	if q4dotKernel != "avx2" {
		q4dot16Go(t, n, packed, scales, x, ldx, y, ldy, code)
		return
	}
	_, _, _, _ = packed[n*q4Chunk/2-1], scales[n-1], x[(t-1)*ldx+n*q4X16Len-1], y[(t-1)*ldy]
	switch t {
	case 4:
		q4dot16x4(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	case 8:
		q4dot16x8(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	default:
		panic("cpu: q4dot16 takes 4 or 8 rows")
	}
}

// q4row1Order is the order of x the one-row kernel in use reads (see q4Row1AVX2).
func q4row1Order() *[q4Chunk]uint8 {
	if q4row512 && q4dotKernel != "go" {
		return &q4Row1AVX512
	}
	return &q4Row1AVX2
}

// q4row runs the one-row kernel over len(y) weight rows of n ≥ 1 chunks each, x in the order
// of q4row1Order.
func q4row(rows, n int, packed []byte, scales []float32, x []float32, y []float32, code *q4Tables) {
	if q4dotKernel != "avx2" {
		q4row1Go(n, packed, scales, x, y[:rows], code, q4row1Order())
		return
	}
	_, _, _, _ = packed[rows*n*q4Chunk/2-1], scales[rows*n-1], x[n*q4Chunk-1], y[rows-1]
	if q4row512 {
		q4row1AVX512(rows, n, &packed[0], &scales[0], &x[0], &y[0], code)
		return
	}
	q4row1(rows, n, &packed[0], &scales[0], &x[0], &y[0], code)
}

// f32DotOn sends A·Bᵀ with few rows of A to f32Dot instead of the GEMM: on AVX2, whose GEMM
// has no dot-product path and would copy B into its panels first. The AVX-512 GEMM reads B in
// place for few rows already.
var f32DotOn = q4dotKernel == "avx2" && !cpu.X86.HasAVX512F

// q4dot runs the kernel for t ∈ {2, 4, 8} rows of x over n ≥ 1 chunks (one row: q4row).
func q4dot(t, n int, packed []byte, scales []float32, x []float32, ldx int, y []float32, ldy int, code *q4Tables) {
	if q4dotKernel != "avx2" {
		q4dotGo(t, n, packed, scales, x, ldx, y, ldy, code)
		return
	}
	// The index expressions check that everything the assembly reads and writes is in bounds.
	_, _, _, _ = packed[n*q4Chunk/2-1], scales[n-1], x[(t-1)*ldx+n*q4Chunk-1], y[(t-1)*ldy]
	switch t {
	case 8:
		q4dot8(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	case 4:
		q4dot4(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	case 2:
		q4dot2(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, code)
	default:
		panic("cpu: q4dot takes 2, 4 or 8 rows")
	}
}

// f32dot runs the float32 kernel for t ∈ {1, 2, 4, 8} rows of x over n ≥ 1 chunks.
func f32dot(t, n int, w, x []float32, ldx int, y []float32, ldy int) {
	if q4dotKernel != "avx2" {
		f32dotGo(t, n, w, x, ldx, y, ldy)
		return
	}
	_, _, _ = w[n*q4Chunk-1], x[(t-1)*ldx+n*q4Chunk-1], y[(t-1)*ldy]
	switch t {
	case 8:
		f32dot8(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 4:
		f32dot4(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 2:
		f32dot2(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 1:
		f32dot1(n, &w[0], &x[0], ldx, &y[0], ldy)
	default:
		panic("cpu: f32dot takes 1, 2, 4 or 8 rows")
	}
}

// f32row adds to y[r], for r < len(y), the dot product of the first n ≥ 1 chunks of weight
// row r (w[r·ldw:]) with x.
func f32row(n int, w []float32, ldw int, x, y []float32) {
	if q4dotKernel != "avx2" {
		for r := range y {
			f32dotGo(1, n, w[r*ldw:], x, 0, y[r:], 0)
		}
		return
	}
	rows := len(y)
	_, _ = w[(rows-1)*ldw+n*q4Chunk-1], x[n*q4Chunk-1]
	f32row1(rows, n, &w[0], ldw, &x[0], &y[0])
}

// bf16row is f32row for bf16 weights, x in the kernels' order.
func bf16row(n int, w []uint16, ldw int, x, y []float32) {
	if q4dotKernel != "avx2" {
		for r := range y {
			bf16dotGo(1, n, w[r*ldw:], x, 0, y[r:], 0)
		}
		return
	}
	rows := len(y)
	_, _ = w[(rows-1)*ldw+n*q4Chunk-1], x[n*q4Chunk-1]
	bf16row1(rows, n, &w[0], ldw, &x[0], &y[0])
}

// bf16dot runs the bf16 kernel for t ∈ {1, 2, 4, 8} rows of x (in kernel order) over n ≥ 1
// chunks.
func bf16dot(t, n int, w []uint16, x []float32, ldx int, y []float32, ldy int) {
	if q4dotKernel != "avx2" {
		bf16dotGo(t, n, w, x, ldx, y, ldy)
		return
	}
	_, _, _ = w[n*q4Chunk-1], x[(t-1)*ldx+n*q4Chunk-1], y[(t-1)*ldy]
	switch t {
	case 8:
		bf16dot8(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 4:
		bf16dot4(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 2:
		bf16dot2(n, &w[0], &x[0], ldx, &y[0], ldy)
	case 1:
		bf16dot1(n, &w[0], &x[0], ldx, &y[0], ldy)
	default:
		panic("cpu: bf16dot takes 1, 2, 4 or 8 rows")
	}
}
