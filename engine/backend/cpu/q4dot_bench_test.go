package cpu

import (
	"encoding/binary"
	"fmt"
	"rlhfstation/engine/backend/cpu/gemm"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"rlhfstation/quant"
)

// threadCPU is the CPU time of the calling OS thread, in seconds: on a loaded machine the
// wall clock counts the time other processes held the core, this does not.
func threadCPU() float64 {
	var u syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &u); err != nil {
		return 0
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}

// benchBytes runs f b.N times and reports bytes/s by wall clock and, with one core
// (go test -cpu 1: everything runs on the locked thread), by CPU time.
func benchBytes(b *testing.B, bytes int, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadCPU()
	for b.Loop() {
		f()
	}
	n := float64(bytes) * float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds()/1e9, "GB/s")
	if runtime.GOMAXPROCS(0) == 1 {
		b.ReportMetric(n/(threadCPU()-c0)/1e9, "cpu-GB/s")
	}
}

// BenchmarkQ4Dot: the few-row NF4 product against the 4-bit GEMM path and the float32 product
// on Qwen2.5-0.5B's MLP shapes (4864×896 and its transpose). GB/s counts the weight's bytes
// (codes and the scales the kernels read; 4 bytes a value for float32).
// run: go test ./engine/backend/cpu -run X -bench Q4Dot -cpu 1
func BenchmarkQ4Dot(b *testing.B) {
	for _, s := range []struct{ out, in int }{{4864, 896}, {896, 4864}} {
		w, err := quant.Quantize(randn(s.out*s.in, 1), s.out, s.in, "", quant.Default())
		if err != nil {
			b.Fatal(err)
		}
		dense := make([]float32, s.out*s.in)
		w.Dequantize(dense)
		d := NewQ4Dot(w)
		for _, rows := range []int{1, 2, 8, 32, 64} {
			x := randn(rows*s.in, 2)
			y := make([]float32, rows*s.out)
			name := fmt.Sprintf("%dx%d/rows=%d", s.out, s.in, rows)
			b.Run(name+"/nf4-dot", func(b *testing.B) {
				benchBytes(b, len(w.Packed)+d.Bytes(), func() { d.MulT(y, x, rows) })
			})
			if rows <= 2 && q4row16On {
				// The exact kernels (q4row1, q4dot2) that the int16 ones replaced.
				b.Run(name+"/nf4-dot-exact", func(b *testing.B) {
					defer func(on bool) { q4row16On = on }(q4row16On)
					q4row16On = false
					benchBytes(b, len(w.Packed)+d.Bytes(), func() { d.MulT(y, x, rows) })
				})
			}
			if rows > 2 && q4row16On {
				// The decode step's int16 kernels (MulTSampled) beside the exact ones (nf4-dot).
				b.Run(name+"/nf4-dot-sampled", func(b *testing.B) {
					benchBytes(b, len(w.Packed)+d.Bytes(), func() { d.MulTSampled(y, x, rows) })
				})
			}
			b.Run(name+"/nf4-gemm", func(b *testing.B) {
				benchBytes(b, len(w.Packed)+d.Bytes(), func() { Q4MulT(y, x, w, rows) })
			})
			b.Run(name+"/f32", func(b *testing.B) {
				benchBytes(b, 4*len(dense), func() { MatmulForward(y, x, dense, nil, rows, s.in, s.out) })
			})
		}
	}
}

// BenchmarkQ4Row1Loop: the one-row kernels' loop alone, exact (q4row1) and int16 (q4row16),
// over a weight held in L1 (48 rows of 896 values: 21 KB of codes) read again and again, x
// ready in its kernel's form; ns/chunk is per 64 codes.
// run: go test ./engine/backend/cpu -run X -bench Q4Row1Loop -cpu 1
func BenchmarkQ4Row1Loop(b *testing.B) {
	const out, in = 48, 896
	w, err := quant.Quantize(randn(out*in, 1), out, in, "", quant.Default())
	if err != nil {
		b.Fatal(err)
	}
	d := NewQ4Dot(w)
	chunks := in / q4Chunk
	x := randn(in, 2)
	xq := make([]int16, chunks*q4X16Len)
	quantX16(xq, x)
	y := make([]float32, out)
	for _, k := range []string{"exact", "int16"} {
		b.Run(k, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				if k == "exact" {
					q4row(out, chunks, w.Packed, d.scales, x, y, d.tables)
				} else {
					q4rowInt16(1, out, chunks, w.Packed, d.scales, xq, 0, y, 0, d.tables)
				}
			}
			n := float64(b.N * out * chunks)
			b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/chunk")
			if runtime.GOMAXPROCS(0) == 1 {
				b.ReportMetric((threadCPU()-c0)*1e9/n, "cpu-ns/chunk")
			}
		})
	}
}

// BenchmarkQ4Dot16Loop: the 4- and 8-row int16 kernels' loop alone (q4dot16x4, q4dot16x8), a
// weight held in L1 as in BenchmarkQ4Row1Loop; ns/chunk-row is per 64 codes and row of x.
// run: go test ./engine/backend/cpu -run X -bench Q4Dot16Loop -cpu 1
func BenchmarkQ4Dot16Loop(b *testing.B) {
	const out, in = 48, 896
	w, err := quant.Quantize(randn(out*in, 1), out, in, "", quant.Default())
	if err != nil {
		b.Fatal(err)
	}
	d := NewQ4Dot(w)
	chunks := in / q4Chunk
	ldx := chunks * q4X16Len
	xq := make([]int16, 8*ldx)
	quantX16(xq, randn(8*in, 2))
	y := make([]float32, 8*out)
	for _, t := range []int{4, 8} {
		b.Run(fmt.Sprintf("rows=%d", t), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				for o := 0; o < out; o++ {
					q4dot16(t, chunks, w.Packed[o*chunks*q4Chunk/2:(o+1)*chunks*q4Chunk/2], d.scales[o*chunks:(o+1)*chunks], xq, ldx, y[o:], out, d.tables)
				}
			}
			n := float64(b.N * out * chunks * t)
			b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/chunk-row")
			if runtime.GOMAXPROCS(0) == 1 {
				b.ReportMetric((threadCPU()-c0)*1e9/n, "cpu-ns/chunk-row")
			}
		})
	}
}

// BenchmarkQ4Stream: the one- and two-row int16 kernels over a weight far larger than the caches (24
// of Qwen2.5-0.5B's 4864×896 up projections, 55 MB of codes and scales) beside a plain Go
// loop that reads the same bytes, the anchor: cpu-GB/s of the two in the same run say how
// close the kernel streams to what one core reads.
// run: go test ./engine/backend/cpu -run X -bench Q4Stream -cpu 1 -benchtime 20x -count 3
func BenchmarkQ4Stream(b *testing.B) {
	const out, in = 24 * 4864, 896
	w, err := quant.Quantize(randn(out*in, 1), out, in, "", quant.Default())
	if err != nil {
		b.Fatal(err)
	}
	d := NewQ4Dot(w)
	chunks := in / q4Chunk
	ldx := chunks * q4X16Len
	xq := make([]int16, 2*ldx)
	quantX16(xq, randn(2*in, 2))
	y := make([]float32, 2*out)
	bytes := len(w.Packed) + 4*len(d.scales)
	b.Run("read", func(b *testing.B) { benchBytes(b, bytes, func() { readBytes(w.Packed); readBytes(bytesOf(d.scales)) }) })
	b.Run("nf4-int16", func(b *testing.B) {
		benchBytes(b, bytes, func() { q4rowInt16(1, out, chunks, w.Packed, d.scales, xq, 0, y, 0, d.tables) })
	})
	// Two rows of x (q4row16x2: two sequences), the weight still read once.
	b.Run("nf4-int16x2", func(b *testing.B) {
		benchBytes(b, bytes, func() { q4rowInt16(2, out, chunks, w.Packed, d.scales, xq, ldx, y, out, d.tables) })
	})
}

// bytesOf is a slice's memory as bytes.
func bytesOf[T any](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// readSink keeps readBytes' sums alive.
var readSink uint64

// readBytes is the plain read loop the streaming benchmarks measure against: 8 bytes a load,
// four loads an iteration.
func readBytes(p []byte) {
	var s uint64
	for ; len(p) >= 32; p = p[32:] {
		s += binary.LittleEndian.Uint64(p) ^ binary.LittleEndian.Uint64(p[8:]) ^
			binary.LittleEndian.Uint64(p[16:]) ^ binary.LittleEndian.Uint64(p[24:])
	}
	readSink += s
}

// BenchmarkF32Dot: the few-row float32 product against the GEMM on the MLP's shapes of
// Qwen2.5-0.5B, to place f32DotMaxRows.
// run: go test ./engine/backend/cpu -run X -bench F32Dot -cpu 1
func BenchmarkF32Dot(b *testing.B) {
	for _, s := range []struct{ out, in int }{{4864, 896}, {896, 4864}} {
		w := randn(s.out*s.in, 1)
		for _, rows := range []int{1, 4, 8, 16, 32, 64} {
			x := randn(rows*s.in, 2)
			y := make([]float32, rows*s.out)
			name := fmt.Sprintf("%dx%d/rows=%d", s.out, s.in, rows)
			b.Run(name+"/dot", func(b *testing.B) {
				benchBytes(b, 4*len(w), func() { f32DotMulT(y, x, w, rows, s.in, s.out) })
			})
			b.Run(name+"/gemm", func(b *testing.B) {
				benchBytes(b, 4*len(w), func() {
					gemmSgemm(rows, s.out, s.in, x, w, y)
				})
			})
		}
	}
}

func gemmSgemm(m, n, k int, a, b, c []float32) {
	gemm.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
}

// BenchmarkHeadDot: Qwen2.5-0.5B's LM head (151936×896), bf16 (the head of a 4-bit base) against
// float32, at the rows of a decode step. GB/s counts the weight's bytes (2 or 4 a value).
// run: go test ./engine/backend/cpu -run X -bench HeadDot
func BenchmarkHeadDot(b *testing.B) {
	const out, in = 151936, 896
	w := randn(out*in, 1)
	h := make([]uint16, len(w))
	for i, v := range w {
		h[i] = ToBF16(v)
	}
	for _, rows := range []int{1, 8, 32} {
		x := randn(rows*in, 2)
		y := make([]float32, rows*out)
		if rows == 1 {
			b.Run("rows=1/read", func(b *testing.B) { benchBytes(b, 2*len(h), func() { readBytes(bytesOf(h)) }) })
		}
		b.Run(fmt.Sprintf("rows=%d/bf16", rows), func(b *testing.B) {
			benchBytes(b, 2*len(h), func() { BF16MulT(y, x, h, rows, in, out) })
		})
		b.Run(fmt.Sprintf("rows=%d/f32", rows), func(b *testing.B) {
			benchBytes(b, 4*len(w), func() { MatmulForward(y, x, w, nil, rows, in, out) })
		})
	}
}
