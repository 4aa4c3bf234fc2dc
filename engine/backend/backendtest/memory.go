package backendtest

import (
	"fmt"
	"math"
	"slices"

	"rlhfstation/engine/backend"
)

func init() { register("memory", true, memoryOps) }

// memoryOps: uploads and downloads of every element type, Copy, Zero, Cast, and the row
// copies of the model (QKV split and merge, KV-cache appends, selected rows).
func memoryOps(e *env) {
	sizes := pick(e, []int{1, 7, 64, 4097})
	for _, n := range sizes {
		if e.mixed == nil { // every type is checked in the float32 run
			e.check("Upload/Download", fmt.Sprintf("n=%d", n), func() { roundTrips(e, n) })
			e.check("Cast", fmt.Sprintf("n=%d", n), func() { casts(e, n) })
		}
		e.check("Copy", fmt.Sprintf("n=%d", n), func() {
			x := e.randn(n, 1)
			e.twin(func(s *side) []backend.Buf {
				out := s.outAs(act, n)
				s.do("Copy", s.b.Copy(out, s.inAs(act, x)))
				return []backend.Buf{out}
			})
		})
		e.check("Zero", fmt.Sprintf("n=%d", n), func() {
			x := e.randn(n, 1)
			e.zerosOK = true
			got := e.twin(func(s *side) []backend.Buf {
				out := s.accAs(act, x)
				s.b.Zero(out)
				return []backend.Buf{out}
			})
			if got != nil {
				e.oracle("zeros", got[0], make([]float64, n), 0, 0)
			}
		})
	}

	if e.mixed == nil {
		e.check("CastAll", "5 tensors, twice", func() { castAll(e) })
	}

	for _, c := range pick(e, []struct{ rows, cols, ldd, lds int }{{1, 1, 1, 1}, {5, 7, 9, 7}, {33, 65, 65, 200}, {3, 4097, 4100, 4097}}) {
		shape := fmt.Sprintf("%d×%d ldd=%d lds=%d", c.rows, c.cols, c.ldd, c.lds)
		src := e.randn((c.rows-1)*c.lds+c.cols, 1)
		dst := e.randn((c.rows-1)*c.ldd+c.cols, 1)
		want2D := func(add bool) []float64 {
			w := f64s(dst)
			for r := 0; r < c.rows; r++ {
				for j := 0; j < c.cols; j++ {
					v := float64(src[r*c.lds+j])
					if add {
						v += w[r*c.ldd+j]
					}
					w[r*c.ldd+j] = v
				}
			}
			return w
		}
		e.check("Copy2D", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.accAs(act, dst)
				s.do("Copy2D", s.b.Copy2D(out, c.ldd, s.inAs(act, src), c.lds, c.rows, c.cols))
				return []backend.Buf{out}
			})
			if got != nil {
				e.oracle("copy", got[0], want2D(false), 0, 0)
			}
		})
		e.check("Add2D", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.accAs(act, dst)
				s.do("Add2D", s.b.Add2D(out, c.ldd, s.inAs(act, src), c.lds, c.rows, c.cols))
				return []backend.Buf{out}
			})
			if got != nil {
				e.oracle("sum", got[0], want2D(true), 0, 1e-7)
			}
		})
	}

	// CopyRows: the identity, a gather, a scatter (KV-cache append: one row per sequence into
	// slots of a cache), both indexed, and repeated source rows.
	for _, c := range pick(e, []struct {
		name               string
		n, cols, ldd, lds  int
		dstRows, srcRows   []int64
		dstTotal, srcTotal int // rows of each buffer
	}{
		{"identity", 3, 5, 5, 5, nil, nil, 3, 3},
		{"gather last rows", 3, 17, 17, 20, nil, []int64{4, 9, 2}, 3, 10},
		{"KV append", 4, 33, 33, 33, []int64{0*20 + 7, 1*20 + 0, 2*20 + 19, 3*20 + 3}, nil, 80, 4},
		{"indexed both, repeated source", 5, 4097, 4100, 4097, []int64{5, 0, 2, 6, 1}, []int64{1, 1, 0, 2, 0}, 7, 3},
	}) {
		e.check("CopyRows", c.name, func() {
			src := e.randn((c.srcTotal-1)*c.lds+c.cols, 1)
			dst := e.randn((c.dstTotal-1)*c.ldd+c.cols, 1)
			got := e.twin(func(s *side) []backend.Buf {
				out := s.accAs(act, dst)
				s.do("CopyRows", s.b.CopyRows(out, slices.Clone(c.dstRows), c.ldd, s.inAs(act, src), slices.Clone(c.srcRows), c.lds, c.n, c.cols))
				return []backend.Buf{out}
			})
			if got == nil {
				return
			}
			w := f64s(dst)
			for i := 0; i < c.n; i++ {
				dr, sr := int64(i), int64(i)
				if c.dstRows != nil {
					dr = c.dstRows[i]
				}
				if c.srcRows != nil {
					sr = c.srcRows[i]
				}
				for j := 0; j < c.cols; j++ {
					w[int(dr)*c.ldd+j] = float64(src[int(sr)*c.lds+j])
				}
			}
			e.oracle("row copy", got[0], w, 0, 0)
		})
	}
}

// roundTrips uploads and downloads every element type through views at an offset.
func roundTrips(e *env, n int) {
	b := e.b
	view := func(dt backend.DType) (backend.Buf, backend.Buf) {
		base, err := b.Alloc(dt, n+padFront+padBack)
		if !e.must("Alloc "+dt.String(), err) {
			return backend.Buf{}, backend.Buf{}
		}
		return base, base.Slice(padFront, n)
	}
	type trip struct {
		dt       backend.DType
		up, down any
		same     func() bool
	}
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(e.rng.NormFloat64()) // not bf16 values: the upload rounds them
	}
	bits := make([]uint16, n)
	for i := range bits {
		bits[i] = uint16(e.rng.Uint32())
		if bits[i]&0x7f80 == 0x7f80 {
			bits[i] &^= 0x4000 // no infinities or NaNs
		}
	}
	u8 := make([]byte, n)
	i32 := make([]int32, n)
	i64 := make([]int64, n)
	f64 := make([]float64, n)
	for i := 0; i < n; i++ {
		u8[i], i32[i], i64[i], f64[i] = byte(e.rng.Uint32()), int32(e.rng.Uint32()), int64(e.rng.Uint64()), e.rng.NormFloat64()
	}
	gf, gbits, gbits2 := make([]float32, n), make([]uint16, n), make([]uint16, n)
	gu8, gi32, gi64, gf64 := make([]byte, n), make([]int32, n), make([]int64, n), make([]float64, n)
	bfOf := make([]float32, n)
	for i, v := range f {
		bfOf[i] = roundBF16(v)
	}
	gbf := make([]float32, n)
	for _, tr := range []trip{
		{backend.F32, f, gf, func() bool { return slices.Equal(gf, f) }},
		{backend.BF16, f, gbf, func() bool { return slices.Equal(gbf, bfOf) }},
		{backend.BF16, bits, gbits, func() bool { return slices.Equal(gbits, bits) }},
		{backend.F16, bits, gbits2, func() bool { return slices.Equal(gbits2, bits) }},
		{backend.U8, u8, gu8, func() bool { return slices.Equal(gu8, u8) }},
		{backend.I32, i32, gi32, func() bool { return slices.Equal(gi32, i32) }},
		{backend.I64, i64, gi64, func() bool { return slices.Equal(gi64, i64) }},
		{backend.F64, f64, gf64, func() bool { return slices.Equal(gf64, f64) }},
	} {
		base, v := view(tr.dt)
		if base.Nil() {
			continue
		}
		if e.must(fmt.Sprintf("Upload %T into %s", tr.up, tr.dt), b.Upload(v, tr.up)) &&
			e.must(fmt.Sprintf("Download %s into %T", tr.dt, tr.down), b.Download(tr.down, v)) && !tr.same() {
			e.errorf("%T through a %s buffer came back changed (bf16 from float32 must round to nearest even)", tr.up, tr.dt)
		}
		b.Free(base)
	}
	// a length mismatch is an error, not a partial copy
	if base, v := view(backend.F32); !base.Nil() {
		if b.Upload(v, make([]float32, n+1)) == nil {
			e.errorf("Upload of %d values into a view of %d was accepted", n+1, n)
		}
		b.Free(base)
	}
}

// casts checks Cast both ways, bit for bit: float32 → bf16 rounds to nearest even.
func casts(e *env, n int) {
	b := e.b
	f := make([]float32, n)
	for i := range f {
		switch i % 4 {
		case 0: // a tie: the low half exactly 0x8000
			f[i] = math.Float32frombits(uint32(e.rng.Uint32())&0xbfff0000 | 0x8000)
		default:
			f[i] = float32(e.rng.NormFloat64() * math.Pow(2, float64(e.rng.IntN(40)-20)))
		}
	}
	src, err := b.Alloc(backend.F32, n)
	if !e.must("Alloc", err) {
		return
	}
	defer b.Free(src)
	bf, err := b.Alloc(backend.BF16, n)
	if !e.must("Alloc", err) {
		return
	}
	defer b.Free(bf)
	back, err := b.Alloc(backend.F32, n)
	if !e.must("Alloc", err) {
		return
	}
	defer b.Free(back)
	if !e.must("Upload", b.Upload(src, f)) || !e.must("Cast f32→bf16", b.Cast(bf, src)) || !e.must("Cast bf16→f32", b.Cast(back, bf)) {
		return
	}
	bits, got := make([]uint16, n), make([]float32, n)
	if !e.must("Download", b.Download(bits, bf)) || !e.must("Download", b.Download(got, back)) {
		return
	}
	for i, v := range f {
		if want := bf16Bits(v); bits[i] != want {
			e.errorf("Cast of %v (%#08x) to bf16: %#04x, want %#04x (nearest, ties to even)", v, math.Float32bits(v), bits[i], want)
			return
		}
		if got[i] != roundBF16(v) {
			e.errorf("Cast of bf16 %#04x to float32: %v, want %v", bits[i], got[i], roundBF16(v))
			return
		}
	}
}

// castAll checks NewCasts and CastAll against Cast, bit for bit: float32 → bf16 pairs of
// several sizes (the batched path), a bf16 → float32 and a float32 copy beside them, run
// twice with new sources in between (the table made once serves every refresh).
func castAll(e *env) {
	b := e.b
	type pair struct {
		n      int
		dt, st backend.DType
	}
	pairs := []pair{{1, backend.BF16, backend.F32}, {300, backend.BF16, backend.F32}, {4097, backend.BF16, backend.F32},
		{33, backend.F32, backend.BF16}, {17, backend.F32, backend.F32}, {64, backend.BF16, backend.F32}}
	var dst, src, ref []backend.Buf
	alloc := func(dt backend.DType, n int) backend.Buf {
		x, err := b.Alloc(dt, n)
		if !e.must("Alloc", err) {
			return backend.Buf{}
		}
		return x
	}
	for _, p := range pairs {
		dst, src, ref = append(dst, alloc(p.dt, p.n)), append(src, alloc(p.st, p.n)), append(ref, alloc(p.dt, p.n))
	}
	defer func() {
		for _, x := range slices.Concat(dst, src, ref) {
			b.Free(x)
		}
	}()
	if _, err := b.NewCasts(dst[:2], src[:1]); err == nil {
		e.errorf("NewCasts of 1 source into 2 destinations: no error")
	}
	if _, err := b.NewCasts([]backend.Buf{ref[1]}, []backend.Buf{src[2]}); err == nil {
		e.errorf("NewCasts of %d values into %d: no error", src[2].Len(), ref[1].Len())
	}
	c, err := b.NewCasts(dst, src)
	if !e.must("NewCasts", err) {
		return
	}
	defer b.FreeCasts(c)
	for round := range 2 {
		for i, p := range pairs {
			f := make([]float32, p.n)
			for j := range f {
				f[j] = float32(e.rng.NormFloat64() * math.Pow(2, float64(e.rng.IntN(40)-20)))
				if j%4 == 0 { // a tie
					f[j] = math.Float32frombits(uint32(e.rng.Uint32())&0xbfff0000 | 0x8000)
				}
			}
			if !e.must("Upload", b.Upload(src[i], f)) || !e.must("Cast", b.Cast(ref[i], src[i])) {
				return
			}
		}
		if !e.must("CastAll", b.CastAll(c)) {
			return
		}
		for i, p := range pairs {
			if p.dt == backend.BF16 {
				got, want := make([]uint16, p.n), make([]uint16, p.n)
				if !e.must("Download", b.Download(got, dst[i])) || !e.must("Download", b.Download(want, ref[i])) {
					return
				}
				if j := slices.Compare(got, want); j != 0 {
					e.errorf("CastAll, round %d, tensor %d (%d values): differs from Cast", round, i, p.n)
					return
				}
				continue
			}
			got, want := make([]float32, p.n), make([]float32, p.n)
			if !e.must("Download", b.Download(got, dst[i])) || !e.must("Download", b.Download(want, ref[i])) {
				return
			}
			if !slices.Equal(got, want) {
				e.errorf("CastAll, round %d, tensor %d (%s → %s): differs from Cast", round, i, p.st, p.dt)
				return
			}
		}
	}
}

func f64s(x []float32) []float64 {
	r := make([]float64, len(x))
	for i, v := range x {
		r[i] = float64(v)
	}
	return r
}
