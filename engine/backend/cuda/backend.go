package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"rlhfstation/engine/backend"
)

// The interface's types: this package's ops take and return them as they are.
type (
	Buf        = backend.Buf
	DType      = backend.DType
	Span       = backend.Span
	Attention  = backend.Attention
	OptParam   = backend.OptParam
	RoPETable  = backend.RoPETable
	Q4         = backend.Q4
	LinearGrad = backend.LinearGrad
	Q4Out      = backend.Q4Out
	Penalties  = backend.Penalties
	Casts      = backend.Casts
)

const (
	F32  = backend.F32
	BF16 = backend.BF16
	F16  = backend.F16
	U8   = backend.U8
	I32  = backend.I32
	I64  = backend.I64
	F64  = backend.F64
)

// Typed device pointers of a Buf (0 for an absent one, which kernels take as "absent").
func f32(b Buf) devptr[float32] { return devptr[float32](b.Addr()) }
func bf(b Buf) devptr[bf16]     { return devptr[bf16](b.Addr()) }
func u8(b Buf) devptr[uint8]    { return devptr[uint8](b.Addr()) }
func i32(b Buf) devptr[int32]   { return devptr[int32](b.Addr()) }
func i64(b Buf) devptr[int64]   { return devptr[int64](b.Addr()) }
func f64(b Buf) devptr[float64] { return devptr[float64](b.Addr()) }

// Backend runs the model's ops on a CUDA device behind backend.Backend, with the CPU
// backend's op names and argument order (outputs first; backward ops accumulate into their
// gradients). Activations are bf16, statistics float32; LoRA masters, their gradients and
// AdamW state float32 (see Precision); ops also take float32 where they take bf16. Every op
// is queued: it returns at once, and its failure (a launch refused, say) is returned by the
// next Sync or Download.
type Backend struct {
	d *Device
}

var _ backend.Backend = (*Backend)(nil)

func init() {
	backend.Register("cuda", func() (backend.Backend, error) { return NewBackend() })
}

// Name is the device name Select takes.
func (b *Backend) Name() string { return "cuda" }

// Precision: bf16 activations and weights around a float32 residual stream.
func (b *Backend) Precision() backend.Precision {
	return backend.Precision{Act: backend.BF16, Stream: backend.F32, Weight: backend.BF16}
}

// String names the device for the run's events and the dashboard.
func (b *Backend) String() string { return "cuda: " + b.d.Info.String() }

// DeviceBytes is the device memory the backend holds from the driver (buffers in use and its
// cache of freed ones): what the dashboard shows as GPU memory.
func (b *Backend) DeviceBytes() int64 {
	b.d.mem.mu.Lock()
	defer b.d.mem.mu.Unlock()
	return b.d.mem.reserved
}

// PeakBytes is the most device memory the backend's buffers held at once (the allocator's
// peak: what PyTorch's max_memory_allocated reports).
func (b *Backend) PeakBytes() int64 {
	b.d.mem.mu.Lock()
	defer b.d.mem.mu.Unlock()
	return b.d.mem.peak
}

// WorkingPeakBytes is PeakBytes without the 4-bit weights' kept bf16 expansions, which take
// only spare memory: the most the run needed at once, what EstimateMemory predicts.
func (b *Backend) WorkingPeakBytes() int64 {
	b.d.mem.mu.Lock()
	defer b.d.mem.mu.Unlock()
	return b.d.mem.working
}

// CheckFits refuses a run whose estimated peak memory exceeds 90% of the device's free
// memory, before anything of it is allocated (see EstimateMemory).
func (b *Backend) CheckFits(s RunShape) error { return b.d.CheckFits(s) }

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

// Place allocates dt elements and uploads the host values (device memory is never a view).
func (b *Backend) Place(host any, dt DType) (Buf, error) {
	var n int
	switch h := host.(type) {
	case []float32:
		n = len(h)
	case []uint16:
		n = len(h)
	case []byte:
		n = len(h)
	case []int32:
		n = len(h)
	case []int64:
		n = len(h)
	case []float64:
		n = len(h)
	default:
		return Buf{}, fmt.Errorf("cuda: place of %T", host)
	}
	x, err := b.Alloc(dt, n)
	if err != nil {
		return Buf{}, err
	}
	if err := b.Upload(x, host); err != nil {
		b.Free(x)
		return Buf{}, err
	}
	return x, nil
}

// Alloc returns n elements of dt, uninitialised.
func (b *Backend) Alloc(dt DType, n int) (Buf, error) {
	if n < 0 {
		return Buf{}, fmt.Errorf("cuda: allocation of %d elements", n)
	}
	p, err := b.d.mem.alloc(max(1, n) * dt.Size())
	if err != nil {
		return Buf{}, err
	}
	return backend.Device(dt, p, n), nil
}

// Free returns a buffer from Alloc (the whole allocation, not a slice of it) once the work
// queued so far is done with it.
func (b *Backend) Free(x Buf) error {
	if x.Addr() == 0 {
		return nil
	}
	b.d.release(x.Addr())
	return nil
}

// Upload copies host values into x: []float32 into f32 or (rounded) bf16, []uint16 (bits)
// into bf16 or f16, []byte into u8, []int32 into i32, []int64 into i64, []float64 into f64.
func (b *Backend) Upload(x Buf, host any) error {
	if err := onDevice("upload's destination", x, 0); err != nil {
		return err
	}
	switch h := host.(type) {
	case []float32:
		if x.DType() == BF16 {
			bits := make([]uint16, len(h))
			for i, v := range h {
				bits[i] = toBF16(v)
			}
			return b.upload(x, bytesOf(bits), len(h))
		}
		return b.uploadAs(x, F32, bytesOf(h), len(h))
	case []uint16:
		if x.DType() == F16 {
			return b.uploadAs(x, F16, bytesOf(h), len(h))
		}
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
	if x.DType() != want {
		return fmt.Errorf("cuda: upload of %s values into a %s buffer", want, x.DType())
	}
	return b.upload(x, raw, n)
}

func (b *Backend) upload(x Buf, raw []byte, n int) error {
	if n != x.Len() {
		return fmt.Errorf("cuda: upload of %d values into a buffer of %d", n, x.Len())
	}
	return b.d.upload(x.Addr(), raw)
}

// Download copies x to the host (after the work queued), into []float32 from f32 or bf16,
// []uint16 from bf16 or f16, []int32, []int64, []byte and []float64 from their types.
func (b *Backend) Download(host any, x Buf) error {
	if err := onDevice("download's source", x, 0); err != nil {
		return err
	}
	switch h := host.(type) {
	case []float32:
		if len(h) != x.Len() {
			return fmt.Errorf("cuda: download of %d values into %d", x.Len(), len(h))
		}
		if x.DType() == BF16 {
			bits := make([]uint16, len(h))
			if err := b.d.download(bytesOf(bits), x.Addr()); err != nil {
				return err
			}
			for i, v := range bits {
				h[i] = math.Float32frombits(uint32(v) << 16)
			}
			return nil
		}
		return b.downloadAs(x, F32, bytesOf(h), len(h))
	case []uint16:
		if x.DType() == F16 {
			return b.downloadAs(x, F16, bytesOf(h), len(h))
		}
		return b.downloadAs(x, BF16, bytesOf(h), len(h))
	case []int32:
		return b.downloadAs(x, I32, bytesOf(h), len(h))
	case []int64:
		return b.downloadAs(x, I64, bytesOf(h), len(h))
	case []byte:
		return b.downloadAs(x, U8, h, len(h))
	case []float64:
		return b.downloadAs(x, F64, bytesOf(h), len(h))
	}
	return fmt.Errorf("cuda: download into %T", host)
}

func (b *Backend) downloadAs(x Buf, want DType, raw []byte, n int) error {
	if x.DType() != want || n != x.Len() {
		return fmt.Errorf("cuda: download of %d %s values into %d %s", x.Len(), x.DType(), n, want)
	}
	if n == 0 {
		return b.Sync()
	}
	return b.d.download(raw, x.Addr())
}

// Copy copies src into dst (same type and length), on the device.
func (b *Backend) Copy(dst, src Buf) error {
	if err := firstErr(onDevice("dst", dst, 0), onDevice("src", src, 0)); err != nil {
		return err
	}
	if dst.DType() != src.DType() || dst.Len() != src.Len() {
		return fmt.Errorf("cuda: copy of %d %s into %d %s", src.Len(), src.DType(), dst.Len(), dst.DType())
	}
	b.d.enqueue(func(o *owner) error { return o.copyDtoD(dst.Addr(), src.Addr(), src.Bytes()) })
	return nil
}

// Zero clears x (a host view is left alone: not this backend's memory).
func (b *Backend) Zero(x Buf) {
	if x.IsHost() || x.Nil() {
		return
	}
	b.d.enqueue(func(o *owner) error { return o.memset(x.Addr(), 0, x.Bytes()) })
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
	if err := onDevice(name, x, n); err != nil {
		return err
	}
	if x.DType() != dt {
		return fmt.Errorf("cuda: %s is %s, want %s", name, x.DType(), dt)
	}
	return nil
}

// onDevice checks that x is device memory (or absent where no element is needed) of at
// least n elements.
func onDevice(name string, x Buf, n int) error {
	if x.IsHost() {
		return fmt.Errorf("cuda: %s is host memory (%v): the op takes buffers from this backend's Alloc", name, x)
	}
	if x.Len() < n {
		return fmt.Errorf("cuda: %s holds %d elements, the op needs %d", name, x.Len(), n)
	}
	return nil
}

// opt is need for a buffer that may be absent (zero Buf).
func opt(name string, x Buf, dt DType, n int) error {
	if x.Nil() {
		return nil
	}
	return need(name, x, dt, n)
}

// act checks an operand that may be bf16 or float32 (activations, their gradients).
func act(name string, x Buf, n int) error {
	if err := onDevice(name, x, n); err != nil {
		return err
	}
	if x.DType() != F32 && x.DType() != BF16 {
		return fmt.Errorf("cuda: %s is %s, want f32 or bf16", name, x.DType())
	}
	return nil
}

// optAct is act for an optional operand.
func optAct(name string, x Buf, n int) error {
	if x.Nil() {
		return nil
	}
	return act(name, x, n)
}

// sameType checks that operands share their element type (the kernels templated over it).
func sameType(op string, xs ...Buf) error {
	for _, x := range xs[1:] {
		if !x.Nil() && x.DType() != xs[0].DType() {
			return fmt.Errorf("cuda: %s with operands of %s and %s", op, xs[0].DType(), x.DType())
		}
	}
	return nil
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
