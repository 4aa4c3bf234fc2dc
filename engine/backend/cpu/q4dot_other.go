//go:build purego || !amd64

package cpu

var q4dotKernel = "go"

// f32DotOn: the GEMM takes every product here.
var f32DotOn = false

// q4row16On: no int16 kernel here; its Go reference runs only in tests.
var q4row16On = false

func quantX16(dst []int16, x []float32) { quantX16Go(dst, x) }

func q4rowInt16(t, rows, n int, packed []byte, scales []float32, x []int16, ldx int, y []float32, ldy int, code *q4Tables) {
	for i := 0; i < t; i++ {
		q4row16Go(n, packed, scales, x[i*ldx:], y[i*ldy:i*ldy+rows], code)
	}
}

func q4dot16(t, n int, packed []byte, scales []float32, x []int16, ldx int, y []float32, ldy int, code *q4Tables) {
	q4dot16Go(t, n, packed, scales, x, ldx, y, ldy, code)
}

func q4row1Order() *[q4Chunk]uint8 { return &q4Row1AVX2 }

func q4row(rows, n int, packed []byte, scales []float32, x []float32, y []float32, code *q4Tables) {
	q4row1Go(n, packed, scales, x, y[:rows], code, &q4Row1AVX2)
}

func q4dot(t, n int, packed []byte, scales []float32, x []float32, ldx int, y []float32, ldy int, code *q4Tables) {
	q4dotGo(t, n, packed, scales, x, ldx, y, ldy, code)
}

func f32dot(t, n int, w, x []float32, ldx int, y []float32, ldy int) {
	f32dotGo(t, n, w, x, ldx, y, ldy)
}

func bf16dot(t, n int, w []uint16, x []float32, ldx int, y []float32, ldy int) {
	bf16dotGo(t, n, w, x, ldx, y, ldy)
}

func f32row(n int, w []float32, ldw int, x, y []float32) {
	for r := range y {
		f32dotGo(1, n, w[r*ldw:], x, 0, y[r:], 0)
	}
}

func bf16row(n int, w []uint16, ldw int, x, y []float32) {
	for r := range y {
		bf16dotGo(1, n, w[r*ldw:], x, 0, y[r:], 0)
	}
}
