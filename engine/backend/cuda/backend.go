package cuda

import (
	"fmt"
	"math"
	"unsafe"
)

// DType is the element type of a Buf.
type DType uint8

const (
	F32 DType = iota
	BF16
	U8
	I32
	I64
	F64
)

// Size is the bytes of one element.
func (t DType) Size() int {
	switch t {
	case BF16:
		return 2
	case U8:
		return 1
	case I64, F64:
		return 8
	}
	return 4
}

func (t DType) String() string {
	return [...]string{"f32", "bf16", "u8", "i32", "i64", "f64"}[t]
}

// Buf is a typed view of device memory: a base allocation, an element offset and a length.
// Slicing makes a view without allocating.
type Buf struct {
	ptr uintptr // the element at offset 0 of the view
	dt  DType
	n   int
}

// Len is the number of elements.
func (b Buf) Len() int { return b.n }

// DType is the element type.
func (b Buf) DType() DType { return b.dt }

// Slice is elements [off, off+n) of b.
func (b Buf) Slice(off, n int) Buf {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("cuda: slice [%d:+%d] of a buffer of %d", off, n, b.n))
	}
	return Buf{ptr: b.ptr + uintptr(off*b.dt.Size()), dt: b.dt, n: n}
}

func (b Buf) bytes() int { return b.n * b.dt.Size() }

// Typed device pointers of a Buf (0 for an empty view, which kernels take as "absent").
func (b Buf) f32() devptr[float32] { return devptr[float32](b.ptr) }
func (b Buf) bf() devptr[bf16]     { return devptr[bf16](b.ptr) }
func (b Buf) u8() devptr[uint8]    { return devptr[uint8](b.ptr) }
func (b Buf) i32() devptr[int32]   { return devptr[int32](b.ptr) }
func (b Buf) i64() devptr[int64]   { return devptr[int64](b.ptr) }
func (b Buf) f64() devptr[float64] { return devptr[float64](b.ptr) }

// Backend runs the model's ops on a CUDA device, with the CPU backend's op names and
// argument order (outputs first; backward ops accumulate into their gradients). Activations
// are bf16, statistics float32; LoRA masters, their gradients and AdamW state float32.
// Every op is queued: it returns at once, and its failure (a launch refused, say) is
// returned by the next Sync or Download.
type Backend struct {
	d *Device
}

// NewBackend opens the device (see Open).
func NewBackend() (*Backend, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	return &Backend{d: d}, nil
}

// Device is the open device.
func (b *Backend) Device() *Device { return b.d }

// Close waits for the work queued and releases the device.
func (b *Backend) Close() error { return b.d.Close() }

// Alloc returns n elements of dt, uninitialised.
func (b *Backend) Alloc(dt DType, n int) (Buf, error) {
	p, err := b.d.mem.alloc(max(1, n) * dt.Size())
	if err != nil {
		return Buf{}, err
	}
	return Buf{ptr: p, dt: dt, n: n}, nil
}

// Free returns a buffer from Alloc (the whole allocation, not a slice of it) once the work
// queued so far is done with it.
func (b *Backend) Free(x Buf) error {
	if x.ptr == 0 {
		return nil
	}
	b.d.release(x.ptr)
	return nil
}

// Upload copies host values into x: []float32 into f32 or (rounded) bf16, []uint16 (bf16
// bits) into bf16, []byte into u8, []int32 into i32, []int64 into i64, []float64 into f64.
func (b *Backend) Upload(x Buf, host any) error {
	switch h := host.(type) {
	case []float32:
		if x.dt == BF16 {
			bits := make([]uint16, len(h))
			for i, v := range h {
				bits[i] = toBF16(v)
			}
			return b.upload(x, bytesOf(bits), len(h))
		}
		return b.uploadAs(x, F32, bytesOf(h), len(h))
	case []uint16:
		return b.uploadAs(x, BF16, bytesOf(h), len(h))
	case []byte:
		return b.uploadAs(x, U8, h, len(h))
	case []int32:
		return b.uploadAs(x, I32, bytesOf(h), len(h))
	case []int64:
		return b.uploadAs(x, I64, bytesOf(h), len(h))
	case []float64:
		return b.uploadAs(x, F64, bytesOf(h), len(h))
	}
	return fmt.Errorf("cuda: upload of %T", host)
}

func (b *Backend) uploadAs(x Buf, want DType, raw []byte, n int) error {
	if x.dt != want {
		return fmt.Errorf("cuda: upload of %s values into a %s buffer", want, x.dt)
	}
	return b.upload(x, raw, n)
}

func (b *Backend) upload(x Buf, raw []byte, n int) error {
	if n != x.n {
		return fmt.Errorf("cuda: upload of %d values into a buffer of %d", n, x.n)
	}
	return b.d.upload(x.ptr, raw)
}

// Download copies x to the host (after the work queued), into []float32 from f32 or bf16,
// []int32 from i32, []byte from u8, []float64 from f64.
func (b *Backend) Download(host any, x Buf) error {
	switch h := host.(type) {
	case []float32:
		if len(h) != x.n {
			return fmt.Errorf("cuda: download of %d values into %d", x.n, len(h))
		}
		if x.dt == BF16 {
			bits := make([]uint16, len(h))
			if err := b.d.download(bytesOf(bits), x.ptr); err != nil {
				return err
			}
			for i, v := range bits {
				h[i] = math.Float32frombits(uint32(v) << 16)
			}
			return nil
		}
		if x.dt != F32 {
			return fmt.Errorf("cuda: download of a %s buffer into []float32", x.dt)
		}
		return b.d.download(bytesOf(h), x.ptr)
	case []int32:
		return b.downloadAs(x, I32, bytesOf(h), len(h))
	case []byte:
		return b.downloadAs(x, U8, h, len(h))
	case []float64:
		return b.downloadAs(x, F64, bytesOf(h), len(h))
	}
	return fmt.Errorf("cuda: download into %T", host)
}

func (b *Backend) downloadAs(x Buf, want DType, raw []byte, n int) error {
	if x.dt != want || n != x.n {
		return fmt.Errorf("cuda: download of %d %s values into %d %s", x.n, x.dt, n, want)
	}
	return b.d.download(raw, x.ptr)
}

// Copy copies src into dst (same type and length), on the device.
func (b *Backend) Copy(dst, src Buf) error {
	if dst.dt != src.dt || dst.n != src.n {
		return fmt.Errorf("cuda: copy of %d %s into %d %s", src.n, src.dt, dst.n, dst.dt)
	}
	b.d.enqueue(func(o *owner) error { return o.copyDtoD(dst.ptr, src.ptr, src.bytes()) })
	return nil
}

// Zero clears x.
func (b *Backend) Zero(x Buf) {
	b.d.enqueue(func(o *owner) error { return o.memset(x.ptr, 0, x.bytes()) })
}

// Sync waits for the queued work and returns the first failure since the last Sync.
func (b *Backend) Sync() error { return b.d.Sync() }

func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func bytesOf[T any](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*int(unsafe.Sizeof(x[0])))
}

// need checks a buffer's type and that it holds at least n elements.
func need(name string, x Buf, dt DType, n int) error {
	if x.dt != dt {
		return fmt.Errorf("cuda: %s is %s, want %s", name, x.dt, dt)
	}
	if x.n < n {
		return fmt.Errorf("cuda: %s holds %d elements, the op needs %d", name, x.n, n)
	}
	return nil
}

// opt is need for a buffer that may be absent (zero Buf).
func opt(name string, x Buf, dt DType, n int) error {
	if x.ptr == 0 {
		return nil
	}
	return need(name, x, dt, n)
}

// queue checks the arguments now (a mistake is reported where it is made) and queues f.
func (b *Backend) queue(checks error, f func(o *owner) error) error {
	if checks != nil {
		return checks
	}
	b.d.enqueue(f)
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
