package backendtest

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

// side is one backend's half of a case: the buffers made on it, each a view at an odd offset
// into a larger allocation whose other elements hold a guard value, so that a write outside
// an output, or any write to an input, shows.
type side struct {
	e      *env
	b      backend.Backend
	ref    bool
	allocs []*alloc
	failed bool
	prec   *backend.Precision // the operand types of the roles; nil: float32 throughout
}

// role is what an operand is to the model, which decides its type under a Precision: the
// residual stream (and its gradient), an activation, a frozen weight, or float32 always
// (norm weights, biases, statistics, LoRA tensors, gradients of parameters, log-probs).
type role uint8

const (
	f32 role = iota
	stream
	act
	weight
	// frozen is a frozen matrix that a float32 backend may be given in bf16 (the embedding
	// and head of a 4-bit base whose values are bf16, model.Param.BF16): bf16 on the backend
	// under test, float32 on the reference, for values that are bf16 already (bf16Exact).
	frozen
)

// dtype is the element type of an operand of role r on this side.
func (s *side) dtype(r role) backend.DType {
	if r == frozen && !s.ref {
		return backend.BF16
	}
	if s.prec == nil {
		return backend.F32
	}
	switch r {
	case stream:
		return s.prec.Stream
	case act:
		return s.prec.Act
	case weight:
		return s.prec.Weight
	}
	return backend.F32
}

type alloc struct {
	base, view backend.Buf
	input      bool // the whole allocation must be left as uploaded
	f32        []float32
	i32        []int32
	f64        []float64
}

const (
	padFront = 3
	padBack  = 5
	guard    = 12288 // exactly representable in bf16
)

// fail reports a backend's error in this side's case.
func (s *side) fail(what string, err error) {
	s.e.t.Helper()
	if err == nil {
		return
	}
	s.failed = true
	s.e.errorf("%s: %s: %v", s.b.Name(), what, err)
}

// do reports an op's error.
func (s *side) do(op string, err error) { s.e.t.Helper(); s.fail(op, err) }

func (s *side) alloc(dt backend.DType, n int) *alloc {
	s.e.t.Helper()
	base, err := s.b.Alloc(dt, padFront+n+padBack)
	if err != nil {
		s.fail("Alloc", err)
		return &alloc{} // absent: the case has failed, the op will refuse it
	}
	a := &alloc{base: base, view: base.Slice(padFront, n)}
	s.allocs = append(s.allocs, a)
	return a
}

// floats uploads x into a guarded view of role r's type (float32 or bf16); input marks an
// input (all of it must stay).
func (s *side) floats(r role, x []float32, input bool) backend.Buf {
	s.e.t.Helper()
	dt := s.dtype(r)
	a := s.alloc(dt, len(x))
	a.input = input
	a.f32 = make([]float32, padFront+len(x)+padBack)
	for i := range a.f32 {
		a.f32[i] = guard
	}
	copy(a.f32[padFront:], x)
	if a.base.Nil() {
		return a.view
	}
	s.fail("Upload", s.b.Upload(a.base, a.f32))
	if dt == backend.BF16 { // what the buffer holds
		for i, v := range a.f32 {
			a.f32[i] = roundBF16(v)
		}
	}
	return a.view
}

// in is a float32 input; inAs one of role r.
func (s *side) in(x []float32) backend.Buf           { return s.floats(f32, x, true) }
func (s *side) inAs(r role, x []float32) backend.Buf { return s.floats(r, x, true) }

// out is a float32 output of n values, NaN until the op writes them; outAs one of role r.
func (s *side) out(n int) backend.Buf { return s.outAs(f32, n) }
func (s *side) outAs(r role, n int) backend.Buf {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return s.floats(r, x, false)
}

// acc is a float32 output the op accumulates into (or rewrites in place), starting at init;
// accAs one of role r.
func (s *side) acc(init []float32) backend.Buf           { return s.floats(f32, init, false) }
func (s *side) accAs(r role, init []float32) backend.Buf { return s.floats(r, init, false) }

// i32 is an int32 input.
func (s *side) i32(x []int32) backend.Buf {
	s.e.t.Helper()
	a := s.alloc(backend.I32, len(x))
	a.input = true
	a.i32 = make([]int32, padFront+len(x)+padBack)
	for i := range a.i32 {
		a.i32[i] = -7
	}
	copy(a.i32[padFront:], x)
	if !a.base.Nil() {
		s.fail("Upload", s.b.Upload(a.base, a.i32))
	}
	return a.view
}

// outI32 is an int32 output of n values.
func (s *side) outI32(n int) backend.Buf {
	s.e.t.Helper()
	a := s.alloc(backend.I32, n)
	a.i32 = make([]int32, padFront+n+padBack)
	for i := range a.i32 {
		a.i32[i] = -7
	}
	if !a.base.Nil() {
		s.fail("Upload", s.b.Upload(a.base, a.i32))
	}
	return a.view
}

// f64 is a float64 input.
func (s *side) f64(x []float64) backend.Buf {
	s.e.t.Helper()
	a := s.alloc(backend.F64, len(x))
	a.input = true
	a.f64 = make([]float64, padFront+len(x)+padBack)
	for i := range a.f64 {
		a.f64[i] = guard
	}
	copy(a.f64[padFront:], x)
	if !a.base.Nil() {
		s.fail("Upload", s.b.Upload(a.base, a.f64))
	}
	return a.view
}

// get downloads a float32 (or bf16) buffer.
func (s *side) get(x backend.Buf) []float32 {
	s.e.t.Helper()
	h := make([]float32, x.Len())
	s.fail("Download", s.b.Download(h, x))
	return h
}

// getI32 downloads an int32 buffer.
func (s *side) getI32(x backend.Buf) []int32 {
	s.e.t.Helper()
	h := make([]int32, x.Len())
	s.fail("Download", s.b.Download(h, x))
	return h
}

// checkUntouched checks the guards around every view and every input.
func (s *side) checkUntouched() {
	s.e.t.Helper()
	for k, a := range s.allocs {
		n := a.base.Len()
		outside := func(i int) bool { return i < padFront || i >= n-padBack || a.input }
		var bad string
		switch {
		case a.f32 != nil:
			h := make([]float32, n)
			s.fail("Download", s.b.Download(h, a.base))
			for i := range h {
				same := math.Float32bits(h[i]) == math.Float32bits(a.f32[i]) || h[i] != h[i] && a.f32[i] != a.f32[i]
				if outside(i) && !same {
					bad = fmt.Sprintf("element %d is %v, was %v", i-padFront, h[i], a.f32[i])
					break
				}
			}
		case a.i32 != nil:
			h := make([]int32, n)
			s.fail("Download", s.b.Download(h, a.base))
			for i := range h {
				if outside(i) && h[i] != a.i32[i] {
					bad = fmt.Sprintf("element %d is %v, was %v", i-padFront, h[i], a.i32[i])
					break
				}
			}
		case a.f64 != nil:
			h := make([]float64, n)
			s.fail("Download", s.b.Download(h, a.base))
			for i := range h {
				if outside(i) && h[i] != a.f64[i] {
					bad = fmt.Sprintf("element %d is %v, was %v", i-padFront, h[i], a.f64[i])
					break
				}
			}
		}
		if bad != "" {
			what := "beside output"
			if a.input {
				what = "input"
			}
			s.failed = true
			s.e.errorf("%s: %s buffer %d (%d values at offset %d) written: %s", s.b.Name(), what, k, a.view.Len(), padFront, bad)
		}
	}
}

func (s *side) free() {
	for _, a := range s.allocs {
		s.b.Free(a.base)
	}
	s.allocs = nil
}
