//go:build !purego

package cpu

import (
	"math"
	"slices"
	"syscall"
	"testing"
	"unsafe"
)

// guarded maps memory for n values of T between two inaccessible pages, the values touching
// the page after them (atEnd) or the one before: a kernel that reads or writes one byte past
// either end of its operand faults (the test dies with SIGSEGV) instead of reading a
// neighbour's bytes unnoticed, as it would in the Go heap.
func guarded[T any](t *testing.T, n int, atEnd bool) []T {
	t.Helper()
	page := syscall.Getpagesize()
	size := n * int(unsafe.Sizeof(*new(T)))
	body := (size + page - 1) / page * page
	m, err := syscall.Mmap(-1, 0, body+2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	if err := syscall.Mprotect(m[:page], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(m[page+body:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	start := page
	if atEnd {
		start = page + body - size
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&m[start])), n)
}

// TestRowKernelsStayInBounds runs the decoded row's attention kernels (dotRows: f32dots8 and
// the f32row tail; axpyRows: f32axpy64) and quantX16AVX2 on operands exactly as long as their
// bounds checks allow, each touching an inaccessible page at one end and then the other, and
// compares them with their references: the assembly reads and writes nothing outside them.
func TestRowKernelsStayInBounds(t *testing.T) {
	if q4dotKernel != "avx2" {
		t.Skip("the AVX2 kernels do not run on this CPU")
	}
	fill := func(x []float32, seed uint64) {
		copy(x, randn(len(x), seed))
	}
	near := func(got, want float32) bool {
		return math.Abs(float64(got-want)) <= 1e-5*(1+math.Abs(float64(want)))
	}
	for _, atEnd := range []bool{false, true} {
		for _, hd := range []int{64, 128, 256} {
			for _, n := range []int{1, 7, 8, 9, 16, 23, 64} {
				for _, ldw := range []int{hd, hd + 64, 3 * hd} {
					w := guarded[float32](t, (n-1)*ldw+hd, atEnd)
					x, y := guarded[float32](t, hd, atEnd), guarded[float32](t, n, atEnd)
					fill(w, 1)
					fill(x, 2)
					want := make([]float32, n)
					dotRowsGo(x, w, ldw, want)
					dotRows(x, w, ldw, y)
					for j := range want {
						if !near(y[j], want[j]) {
							t.Fatalf("dotRows head %d, %d keys %d apart: score %d = %g, reference %g", hd, n, ldw, j, y[j], want[j])
						}
					}
					p, v := guarded[float32](t, n, atEnd), guarded[float32](t, (n-1)*ldw+hd, atEnd)
					out := guarded[float32](t, hd, atEnd)
					fill(p, 3)
					fill(v, 4)
					fill(out, 5)
					want = slices.Clone(out)
					axpyRowsGo(p, v, ldw, want)
					axpyRows(p, v, ldw, out)
					for k := range want {
						if !near(out[k], want[k]) {
							t.Fatalf("axpyRows head %d, %d keys %d apart: value %d = %g, reference %g", hd, n, ldw, k, out[k], want[k])
						}
					}
				}
			}
		}
		for _, chunks := range []int{1, 2, 5} {
			x, dst := guarded[float32](t, chunks*q4Chunk, atEnd), guarded[int16](t, chunks*q4X16Len, atEnd)
			copy(x, x16Row(chunks, 7))
			want := make([]int16, len(dst))
			quantX16Go(want, x)
			quantX16(dst, x)
			if !slices.Equal(dst, want) {
				t.Fatalf("quantX16AVX2 of %d chunks differs from quantX16Go", chunks)
			}
		}
	}
}
