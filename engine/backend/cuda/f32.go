package cuda

// float32 operands. The kernels keep activations in bf16; a caller may hold them in float32
// (the conformance suite, a model built with the CPU's precision). Element-wise kernels come
// in both types; the rest take float32 operands through bf16 copies made here: correct, at
// the cost of the copies.

// anyF32 reports whether an operand is float32.
func anyF32(xs ...Buf) bool {
	for _, x := range xs {
		if !x.Nil() && x.DType() == F32 {
			return true
		}
	}
	return false
}

// spansF32 reports whether a span's keys or values (or, with grads, their gradients) are float32.
func spansF32(spans []Span, grads bool) bool {
	for _, s := range spans {
		if anyF32(s.K, s.V) || grads && anyF32(s.DK, s.DV) {
			return true
		}
	}
	return false
}

// temps are the bf16 copies of one op's float32 operands, freed in queue order after it.
type temps struct {
	bufs []Buf
	err  error
}

func (t *temps) alloc(b *Backend, n int) Buf { return t.allocT(b, BF16, n) }

func (t *temps) allocT(b *Backend, dt DType, n int) Buf {
	if t.err != nil {
		return Buf{}
	}
	x, err := b.Alloc(dt, n)
	if err != nil {
		t.err = err
		return Buf{}
	}
	t.bufs = append(t.bufs, x)
	return x
}

// bf is x itself when bf16 or absent, else a bf16 copy (holding x's values when fill).
func (t *temps) bf(b *Backend, x Buf, fill bool) Buf {
	if x.Nil() || x.DType() == BF16 {
		return x
	}
	c := t.alloc(b, x.Len())
	if fill && t.err == nil {
		t.err = b.Cast(c, x)
	}
	return c
}

// grad is x itself when bf16 or absent, else a zeroed bf16 buffer to accumulate into (acc
// adds it to x afterwards).
func (t *temps) grad(b *Backend, x Buf) Buf {
	if x.Nil() || x.DType() == BF16 {
		return x
	}
	c := t.alloc(b, x.Len())
	if t.err == nil {
		b.Zero(c)
	}
	return c
}

// f32 is x itself when float32 or absent, else a float32 copy (holding x's values when fill).
func (t *temps) f32(b *Backend, x Buf, fill bool) Buf {
	if x.Nil() || x.DType() == F32 {
		return x
	}
	c := t.allocT(b, F32, x.Len())
	if fill && t.err == nil {
		t.err = b.Cast(c, x)
	}
	return c
}

// f32grad is x itself when float32 or absent, else a zeroed float32 buffer to accumulate
// into (acc adds it to x afterwards).
func (t *temps) f32grad(b *Backend, x Buf) Buf {
	if x.Nil() || x.DType() == F32 {
		return x
	}
	c := t.allocT(b, F32, x.Len())
	if t.err == nil {
		b.Zero(c)
	}
	return c
}

// mixedTypes reports whether the operands are not all of one type.
func mixedTypes(xs ...Buf) bool { return sameType("", xs...) != nil }

// inF32 runs an element-wise op whose operands mix bf16 and float32 on float32 copies: outs
// are overwritten (copied back), accs accumulated into (their copies added back), ins read.
// run gets the float32 forms in the same order.
func (b *Backend) inF32(outs, accs, ins []Buf, run func(outs, accs, ins []Buf) error) error {
	var t temps
	defer t.free(b)
	o2, a2, i2 := make([]Buf, len(outs)), make([]Buf, len(accs)), make([]Buf, len(ins))
	for i, x := range outs {
		o2[i] = t.f32(b, x, true) // filled: an op may write part of it (strided views)
	}
	for i, x := range accs {
		a2[i] = t.f32grad(b, x)
	}
	for i, x := range ins {
		i2[i] = t.f32(b, x, true)
	}
	if t.err != nil {
		return t.err
	}
	if err := run(o2, a2, i2); err != nil {
		return err
	}
	var err error
	for i, x := range outs {
		err = firstErr(err, t.back(b, x, o2[i]))
	}
	for i, x := range accs {
		err = firstErr(err, t.acc(b, x, a2[i]))
	}
	return err
}

// back stores a copy's values in x (nothing when c is x).
func (t *temps) back(b *Backend, x, c Buf) error {
	if x.Nil() || c == x {
		return nil
	}
	return b.Cast(x, c)
}

// acc adds a gradient copy to x (nothing when c is x).
func (t *temps) acc(b *Backend, x, c Buf) error {
	if x.Nil() || c == x {
		return nil
	}
	return b.Add(x, c, 1, x.Len())
}

func (t *temps) free(b *Backend) {
	for _, x := range t.bufs {
		_ = b.Free(x)
	}
}

// blasType is cuBLAS's name for a bf16 or float32 buffer's type.
func blasType(x Buf) int {
	if x.DType() == F32 {
		return dtF32
	}
	return dtBF16
}

// bfIn gives x's first n values as bf16 on the owning thread: x itself, or a rounded copy in
// scratch; release returns the scratch.
func (o *owner) bfIn(x Buf, n int) (devptr[bf16], func(), error) {
	if x.DType() == BF16 {
		return bf(x), func() {}, nil
	}
	p, err := o.tmp(2 * n)
	if err != nil {
		return 0, nil, err
	}
	if err := o.castF32ToBF16(devptr[bf16](p), f32(x), n); err != nil {
		o.done(p)
		return 0, nil, err
	}
	return devptr[bf16](p), func() { o.done(p) }, nil
}
