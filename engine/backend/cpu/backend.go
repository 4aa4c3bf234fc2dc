package cpu

import (
	"fmt"
	"slices"

	"rlhfstation/engine/backend"
)

// Backend is the CPU behind backend.Backend: host float32 memory, the functions of this
// package on the slices its Bufs view (no copies), every op done when it returns.
type Backend struct {
	logits    []float32 // the LM head ops' scratch
	sampler   sampler
	penalised []float32 // a row under the repetition penalty (SampleInto)
}

var _ backend.Backend = (*Backend)(nil)

// New returns the CPU backend.
func New() *Backend { return &Backend{} }

func init() {
	backend.Register("cpu", func() (backend.Backend, error) { return New(), nil })
}

func (*Backend) Name() string { return "cpu" }

// Precision is float32 throughout.
func (*Backend) Precision() backend.Precision {
	return backend.Precision{Act: backend.F32, Stream: backend.F32, Weight: backend.F32}
}

func (*Backend) Close() error       { return nil }
func (*Backend) Sync() error        { return nil }
func (*Backend) Zero(x backend.Buf) { zero(x) }

func zero(x backend.Buf) {
	if x.Nil() {
		return
	}
	switch x.DType() {
	case backend.F32:
		clear(x.F32())
	case backend.U8:
		clear(x.U8())
	case backend.I32:
		clear(x.I32())
	case backend.I64:
		clear(x.I64())
	case backend.F64:
		clear(x.F64())
	case backend.BF16, backend.F16:
		clear(x.U16())
	}
}

// Alloc returns n zeroed elements of Go memory.
func (*Backend) Alloc(dt backend.DType, n int) (backend.Buf, error) {
	if n < 0 {
		return backend.Buf{}, fmt.Errorf("cpu: allocation of %d elements", n)
	}
	switch dt {
	case backend.F32:
		return backend.HostF32(make([]float32, n)), nil
	case backend.U8:
		return backend.HostU8(make([]byte, n)), nil
	case backend.I32:
		return backend.HostI32(make([]int32, n)), nil
	case backend.I64:
		return backend.HostI64(make([]int64, n)), nil
	case backend.F64:
		return backend.HostF64(make([]float64, n)), nil
	case backend.BF16:
		return backend.HostBF16(make([]uint16, n)), nil
	case backend.F16:
		return backend.HostF16(make([]uint16, n)), nil
	}
	return backend.Buf{}, fmt.Errorf("cpu: allocation of %s", dt)
}

// Place views the host slice itself when dt is its type, else allocates and uploads.
func (b *Backend) Place(host any, dt backend.DType) (backend.Buf, error) {
	switch h := host.(type) {
	case []float32:
		if dt == backend.F32 {
			return backend.HostF32(h), nil
		}
	case []int32:
		if dt == backend.I32 {
			return backend.HostI32(h), nil
		}
	case []int64:
		if dt == backend.I64 {
			return backend.HostI64(h), nil
		}
	case []byte:
		if dt == backend.U8 {
			return backend.HostU8(h), nil
		}
	case []float64:
		if dt == backend.F64 {
			return backend.HostF64(h), nil
		}
	case []uint16: // bf16 bits: a frozen head (model.Param.BF16)
		if dt == backend.BF16 {
			return backend.HostBF16(h), nil
		}
	}
	n := lenOf(host)
	if n < 0 {
		return backend.Buf{}, fmt.Errorf("cpu: place of %T", host)
	}
	x, err := b.Alloc(dt, n)
	if err != nil {
		return backend.Buf{}, err
	}
	return x, b.Upload(x, host)
}

// Free lets the garbage collector have the memory.
func (*Backend) Free(backend.Buf) error { return nil }

// Upload copies host values into x.
func (*Backend) Upload(x backend.Buf, host any) error {
	n := 0
	switch h := host.(type) {
	case []float32:
		if x.DType() == backend.BF16 {
			if len(h) != x.Len() {
				break
			}
			d := x.U16()
			for i, v := range h {
				d[i] = ToBF16(v)
			}
			return nil
		}
		n = copyAs(x, backend.F32, h, x.F32)
	case []uint16:
		if x.DType() == backend.F16 {
			n = copyAs(x, backend.F16, h, x.U16)
		} else {
			n = copyAs(x, backend.BF16, h, x.U16)
		}
	case []byte:
		n = copyAs(x, backend.U8, h, x.U8)
	case []int32:
		n = copyAs(x, backend.I32, h, x.I32)
	case []int64:
		n = copyAs(x, backend.I64, h, x.I64)
	case []float64:
		n = copyAs(x, backend.F64, h, x.F64)
	default:
		return fmt.Errorf("cpu: upload of %T", host)
	}
	if n < 0 {
		return fmt.Errorf("cpu: upload of %T (%d values) into %v", host, lenOf(host), x)
	}
	return nil
}

// copyAs copies src into x's slice when the types and lengths agree, else returns −1.
func copyAs[T any](x backend.Buf, dt backend.DType, src []T, slice func() []T) int {
	if x.DType() != dt || len(src) != x.Len() || x.Nil() && len(src) > 0 {
		return -1
	}
	return copy(slice(), src)
}

func lenOf(host any) int {
	switch h := host.(type) {
	case []float32:
		return len(h)
	case []uint16:
		return len(h)
	case []byte:
		return len(h)
	case []int32:
		return len(h)
	case []int64:
		return len(h)
	case []float64:
		return len(h)
	}
	return -1
}

// Download copies x into host values.
func (*Backend) Download(host any, x backend.Buf) error {
	n := 0
	switch h := host.(type) {
	case []float32:
		if x.DType() == backend.BF16 {
			if len(h) != x.Len() {
				break
			}
			for i, v := range x.U16() {
				h[i] = FromBF16(v)
			}
			return nil
		}
		n = copyFrom(h, x, backend.F32, x.F32)
	case []uint16:
		if x.DType() == backend.F16 {
			n = copyFrom(h, x, backend.F16, x.U16)
		} else {
			n = copyFrom(h, x, backend.BF16, x.U16)
		}
	case []byte:
		n = copyFrom(h, x, backend.U8, x.U8)
	case []int32:
		n = copyFrom(h, x, backend.I32, x.I32)
	case []int64:
		n = copyFrom(h, x, backend.I64, x.I64)
	case []float64:
		n = copyFrom(h, x, backend.F64, x.F64)
	default:
		return fmt.Errorf("cpu: download into %T", host)
	}
	if n < 0 {
		return fmt.Errorf("cpu: download of %v into %T (%d values)", x, host, lenOf(host))
	}
	return nil
}

func copyFrom[T any](dst []T, x backend.Buf, dt backend.DType, slice func() []T) int {
	if x.DType() != dt || len(dst) != x.Len() || x.Nil() && len(dst) > 0 {
		return -1
	}
	return copy(dst, slice())
}

// Copy copies src into dst (same type and length).
func (b *Backend) Copy(dst, src backend.Buf) error {
	if dst.DType() != src.DType() || dst.Len() != src.Len() {
		return fmt.Errorf("cpu: copy of %v into %v", src, dst)
	}
	if src.Len() == 0 {
		return nil
	}
	switch src.DType() {
	case backend.F32:
		copy(dst.F32(), src.F32())
	case backend.U8:
		copy(dst.U8(), src.U8())
	case backend.I32:
		copy(dst.I32(), src.I32())
	case backend.I64:
		copy(dst.I64(), src.I64())
	case backend.F64:
		copy(dst.F64(), src.F64())
	default:
		copy(dst.U16(), src.U16())
	}
	return nil
}

// Cast converts between F32 and BF16 (round to nearest even), or copies.
func (b *Backend) Cast(dst, src backend.Buf) error {
	if dst.Len() != src.Len() {
		return fmt.Errorf("cpu: cast of %v into %v", src, dst)
	}
	switch {
	case dst.DType() == src.DType():
		return b.Copy(dst, src)
	case dst.DType() == backend.BF16 && src.DType() == backend.F32:
		d := dst.U16()
		for i, v := range src.F32() {
			d[i] = ToBF16(v)
		}
	case dst.DType() == backend.F32 && src.DType() == backend.BF16:
		d := dst.F32()
		for i, v := range src.U16() {
			d[i] = FromBF16(v)
		}
	default:
		return fmt.Errorf("cpu: cast of %s to %s", src.DType(), dst.DType())
	}
	return nil
}

// NewCasts checks the pairs; the CPU runs them one by one.
func (b *Backend) NewCasts(dst, src []backend.Buf) (*backend.Casts, error) {
	if err := backend.CheckCasts(dst, src); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return &backend.Casts{Dst: slices.Clone(dst), Src: slices.Clone(src)}, nil
}

// CastAll runs c's casts.
func (b *Backend) CastAll(c *backend.Casts) error {
	for i := range c.Dst {
		if err := b.Cast(c.Dst[i], c.Src[i]); err != nil {
			return err
		}
	}
	return nil
}

// FreeCasts has nothing to release.
func (*Backend) FreeCasts(*backend.Casts) {}

// Copy2D copies rows×cols float32 values between row-major views.
func (b *Backend) Copy2D(dst backend.Buf, ldd int, src backend.Buf, lds int, rows, cols int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	var a args
	d := a.f32("dst", dst, (rows-1)*ldd+cols)
	s := a.f32("src", src, (rows-1)*lds+cols)
	if a.err != nil {
		return a.err
	}
	For(rows, grainFor(cols)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copy(d[r*ldd:r*ldd+cols], s[r*lds:r*lds+cols])
		}
	})
	return nil
}

// Add2D accumulates src into dst between row-major views.
func (b *Backend) Add2D(dst backend.Buf, ldd int, src backend.Buf, lds int, rows, cols int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	var a args
	d := a.f32("dst", dst, (rows-1)*ldd+cols)
	s := a.f32("src", src, (rows-1)*lds+cols)
	if a.err != nil {
		return a.err
	}
	For(rows, grainFor(cols)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr, sr := d[r*ldd:r*ldd+cols], s[r*lds:r*lds+cols]
			for j, v := range sr {
				dr[j] += v
			}
		}
	})
	return nil
}

// CopyRows copies row srcRows[i] of src to row dstRows[i] of dst (nil: the identity), both
// float32 or both bf16 (rows of a bf16 head).
func (b *Backend) CopyRows(dst backend.Buf, dstRows []int64, ldd int, src backend.Buf, srcRows []int64, lds int, n, cols int) error {
	if n == 0 {
		return nil
	}
	var a args
	if dst.DType() == backend.BF16 && src.DType() == backend.BF16 {
		d := hostSlice(&a, "dst", dst, cols, backend.BF16, dst.U16)
		s := hostSlice(&a, "src", src, cols, backend.BF16, src.U16)
		if a.err != nil {
			return a.err
		}
		return copyRows(d, dstRows, ldd, s, srcRows, lds, n, cols)
	}
	d := a.f32("dst", dst, cols)
	s := a.f32("src", src, cols)
	if a.err != nil {
		return a.err
	}
	return copyRows(d, dstRows, ldd, s, srcRows, lds, n, cols)
}

func copyRows[T any](d []T, dstRows []int64, ldd int, s []T, srcRows []int64, lds int, n, cols int) error {
	if dstRows != nil && len(dstRows) < n || srcRows != nil && len(srcRows) < n {
		return fmt.Errorf("cpu: CopyRows of %d rows with %d and %d indices", n, len(dstRows), len(srcRows))
	}
	row := func(idx []int64, i int) int {
		if idx == nil {
			return i
		}
		return int(idx[i])
	}
	for i := 0; i < n; i++ {
		dr, sr := row(dstRows, i), row(srcRows, i)
		if dr < 0 || dr*ldd+cols > len(d) {
			return fmt.Errorf("cpu: CopyRows destination row %d outside %d values", dr, len(d))
		}
		if sr < 0 || sr*lds+cols > len(s) {
			return fmt.Errorf("cpu: CopyRows source row %d outside %d values", sr, len(s))
		}
	}
	For(n, grainFor(cols)*4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dr, sr := row(dstRows, i), row(srcRows, i)
			copy(d[dr*ldd:dr*ldd+cols], s[sr*lds:sr*lds+cols])
		}
	})
	return nil
}

// args checks an op's buffers, keeping the first mistake: the ops report it instead of
// panicking on a short or mistyped slice.
type args struct{ err error }

func (a *args) fail(format string, v ...any) {
	if a.err == nil {
		a.err = fmt.Errorf("cpu: "+format, v...)
	}
}

// f32 returns the host float32 slice of x (its whole view), which must hold n values.
func (a *args) f32(name string, x backend.Buf, n int) []float32 {
	return hostSlice(a, name, x, n, backend.F32, x.F32)
}

// optF32 is f32 for an optional buffer: nil when absent.
func (a *args) optF32(name string, x backend.Buf, n int) []float32 {
	if x.Nil() {
		return nil
	}
	return a.f32(name, x, n)
}

// i32 returns the host int32 slice of x, which must hold n values.
func (a *args) i32(name string, x backend.Buf, n int) []int32 {
	return hostSlice(a, name, x, n, backend.I32, x.I32)
}

func (a *args) optI32(name string, x backend.Buf, n int) []int32 {
	if x.Nil() {
		return nil
	}
	return a.i32(name, x, n)
}

// hostSlice checks that x is a host buffer of type dt holding at least n values (absent
// only when n is 0) and returns its slice; a failed check is recorded in a and gives nil.
func hostSlice[T any](a *args, name string, x backend.Buf, n int, dt backend.DType, slice func() []T) []T {
	switch {
	case x.Nil():
		if n == 0 {
			return nil
		}
		a.fail("%s is absent", name)
	case x.DType() != dt || !x.IsHost():
		a.fail("%s is %v, want host %v", name, x, dt)
	case x.Len() < n:
		a.fail("%s holds %d values, the op needs %d", name, x.Len(), n)
	default:
		return slice()
	}
	return nil
}
