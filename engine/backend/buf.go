package backend

import (
	"fmt"
	"unsafe"
)

// DType is the element type of a Buf.
type DType uint8

const (
	F32  DType = iota
	BF16       // bfloat16, held as its 16 bits
	F16        // IEEE half, held as its 16 bits
	U8
	I32
	I64
	F64
)

// Size is the bytes of one element.
func (t DType) Size() int {
	switch t {
	case BF16, F16:
		return 2
	case U8:
		return 1
	case I64, F64:
		return 8
	}
	return 4
}

func (t DType) String() string {
	if int(t) < len(dtypeNames) {
		return dtypeNames[t]
	}
	return fmt.Sprintf("dtype(%d)", t)
}

var dtypeNames = [...]string{"f32", "bf16", "f16", "u8", "i32", "i64", "f64"}

// Buf is a typed view of a backend's memory: an allocation, an element offset into it and a
// length. Slice makes a view without allocating. The zero Buf is "absent" (an optional
// argument not given).
//
// Host memory (the CPU backend's) is a Go slice: host points at its first element and keeps
// the whole slice alive, so the CPU path hands the same memory to its functions and copies
// nothing. Device memory is an address, kept in a uintptr: a device address is not a Go
// pointer (under the CUDA stand-in it is another process's address) and must never sit in
// an unsafe.Pointer, where the garbage collector could take it for one.
type Buf struct {
	host unsafe.Pointer // element 0 of the host allocation; nil for device memory
	dev  uintptr        // address of element 0 of the device allocation; 0 for host memory
	off  int            // the view's first element
	n    int            // the view's length
	dt   DType
}

func hostBuf[T any](x []T, dt DType) Buf {
	if x == nil {
		return Buf{dt: dt}
	}
	return Buf{host: unsafe.Pointer(unsafe.SliceData(x)), n: len(x), dt: dt}
}

// HostF32 and its kin view Go slices as Bufs (no copy). A nil slice gives an absent Buf.
func HostF32(x []float32) Buf { return hostBuf(x, F32) }
func HostU8(x []byte) Buf     { return hostBuf(x, U8) }
func HostI32(x []int32) Buf   { return hostBuf(x, I32) }
func HostI64(x []int64) Buf   { return hostBuf(x, I64) }
func HostF64(x []float64) Buf { return hostBuf(x, F64) }

// HostBF16 and HostF16 view 16-bit patterns as bf16 or half values.
func HostBF16(bits []uint16) Buf { return hostBuf(bits, BF16) }
func HostF16(bits []uint16) Buf  { return hostBuf(bits, F16) }

// Device is a view of n elements of dt at a device address (for a backend's Alloc).
func Device(dt DType, addr uintptr, n int) Buf {
	return Buf{dev: addr, n: n, dt: dt}
}

// Len is the number of elements.
func (b Buf) Len() int { return b.n }

// DType is the element type.
func (b Buf) DType() DType { return b.dt }

// Bytes is the view's size in bytes.
func (b Buf) Bytes() int { return b.n * b.dt.Size() }

// Nil reports an absent buffer (the zero Buf, or a nil host slice).
func (b Buf) Nil() bool { return b.host == nil && b.dev == 0 }

// IsHost reports whether b views Go memory.
func (b Buf) IsHost() bool { return b.host != nil }

// Addr is the device address of the view's first element (0 for host memory or an absent
// buffer).
func (b Buf) Addr() uintptr {
	if b.dev == 0 {
		return 0
	}
	return b.dev + uintptr(b.off*b.dt.Size())
}

// Slice is elements [off, off+n) of b.
func (b Buf) Slice(off, n int) Buf {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("backend: slice [%d:+%d] of a buffer of %d", off, n, b.n))
	}
	b.off += off
	b.n = n
	return b
}

// From is elements [off, Len()) of b.
func (b Buf) From(off int) Buf { return b.Slice(off, b.n-off) }

func hostSlice[T any](b Buf, dt DType) []T {
	if b.host == nil {
		if b.dev != 0 {
			panic(fmt.Sprintf("backend: host access to a %s device buffer", b.dt))
		}
		return nil
	}
	if b.dt != dt {
		panic(fmt.Sprintf("backend: a %s buffer read as %s", b.dt, dt))
	}
	end := b.off + b.n
	return unsafe.Slice((*T)(b.host), end)[b.off:end:end]
}

// F32 and its kin return the Go slice a host view covers (nil for an absent buffer). They
// panic on device memory or another element type: only host code (the CPU backend, tests)
// calls them.
func (b Buf) F32() []float32 { return hostSlice[float32](b, F32) }
func (b Buf) U8() []byte     { return hostSlice[byte](b, U8) }
func (b Buf) I32() []int32   { return hostSlice[int32](b, I32) }
func (b Buf) I64() []int64   { return hostSlice[int64](b, I64) }
func (b Buf) F64() []float64 { return hostSlice[float64](b, F64) }

// U16 returns the 16-bit patterns of a host bf16 or f16 view.
func (b Buf) U16() []uint16 {
	if b.dt == F16 {
		return hostSlice[uint16](b, F16)
	}
	return hostSlice[uint16](b, BF16)
}

func (b Buf) String() string {
	where := "host"
	if b.dev != 0 {
		where = "device"
	} else if b.host == nil {
		where = "absent"
	}
	return fmt.Sprintf("%s[%d] (%s, offset %d)", b.dt, b.n, where, b.off)
}
