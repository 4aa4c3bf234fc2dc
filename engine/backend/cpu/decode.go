package cpu

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// The decode step's ops (every index in a buffer) and graph capture as plain execution: the
// CPU has no launch cost to save, and running the recording function again on each Launch
// keeps one code path for both backends.

var _ backend.Capturer = (*Backend)(nil)

// replay is a "graph" on the CPU: the recording function itself.
type replay struct{ record func() error }

func (r *replay) Launch() error { return r.record() }
func (r *replay) Close()        {}

// Capture returns record to be run on each Launch (nothing runs now).
func (*Backend) Capture(record func() error) (backend.Graph, error) { return &replay{record}, nil }

func (*Backend) AppendKV(kc, vc, k, v, seq, pos backend.Buf, rows, width, seqStride int) error {
	if rows == 0 {
		return nil
	}
	var a args
	kd, vd := a.f32("kc", kc, width), a.f32("vc", vc, width)
	ks, vs := a.f32("k", k, rows*width), a.f32("v", v, rows*width)
	sq, ps := a.i32("seq", seq, rows), a.i32("pos", pos, rows)
	if a.err != nil {
		return a.err
	}
	for r := 0; r < rows; r++ {
		o := int(sq[r])*seqStride + int(ps[r])*width
		if sq[r] < 0 || ps[r] < 0 || o+width > len(kd) || o+width > len(vd) {
			return fmt.Errorf("cpu: AppendKV row %d (sequence %d, position %d) outside the cache of %d values", r, sq[r], ps[r], len(kd))
		}
		copy(kd[o:o+width], ks[r*width:(r+1)*width])
		copy(vd[o:o+width], vs[r*width:(r+1)*width])
	}
	return nil
}

func (*Backend) Advance(pos backend.Buf, rows, limit int) error {
	var a args
	p := a.i32("pos", pos, rows)
	if a.err != nil {
		return a.err
	}
	for r := range p[:rows] {
		p[r] = min(p[r]+1, int32(limit-1))
	}
	return nil
}

// Q4Linears is one Q4Linear a linear.
func (b *Backend) Q4Linears(ls []backend.Q4Out, x, xa backend.Buf, ldxa int, rows int) error {
	return backend.Q4LinearsOps(b, ls, x, xa, ldxa, rows)
}

// Q4Linear is Q4MulT, then the bias, the LoRA term and the residual added in that order (the
// order of the unfused ops).
func (b *Backend) Q4Linear(y, res, x backend.Buf, w *backend.Q4, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) error {
	return b.q4Linear(false, y, res, x, w, bias, xa, ldxa, lb, r, scale, rows)
}

// q4Linear is Q4Linear, its product by Q4Dot.MulTSampled when sampled (the decode step's:
// see sampling).
func (b *Backend) q4Linear(sampled bool, y, res, x backend.Buf, w *backend.Q4, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) error {
	if rows == 0 {
		return nil
	}
	n := w.Rows
	var a args
	yv, rv := a.f32("y", y, rows*n), a.optF32("res", res, rows*n)
	bv := a.optF32("bias", bias, n)
	var xv, lv []float32
	if !xa.Nil() || !lb.Nil() {
		if r <= 0 || ldxa < r {
			return fmt.Errorf("cpu: Q4Linear of rank %d with xa %d apart", r, ldxa)
		}
		xv, lv = a.f32("xa", xa, (rows-1)*ldxa+r), a.f32("lora B", lb, n*r)
	}
	if a.err != nil {
		return a.err
	}
	tp := xScratch.Get().(*[]float32)
	defer xScratch.Put(tp)
	if cap(*tp) < rows*n {
		*tp = make([]float32, rows*n)
	}
	t := (*tp)[:rows*n]
	if err := b.q4MulT(sampled, backend.HostF32(t), x, w, rows); err != nil {
		return err
	}
	// The epilogue split over the cores by output columns: with an adapter it is rows·n·r
	// multiply-adds, which on one core would rival the product's own time at one row.
	rank := 0
	if xv != nil {
		rank = r
	}
	For(n, max(64, (1<<13)/(rows*(rank+1))), func(lo, hi int) {
		for i := 0; i < rows; i++ {
			var xr []float32
			if xv != nil {
				xr = xv[i*ldxa : i*ldxa+r]
			}
			linearEpilogue(yv[i*n:(i+1)*n], t[i*n:(i+1)*n], optRow(rv, i*n, n), bv, xr, lv, scale, lo, hi)
		}
	})
	return nil
}

// optRow is v[o:o+n], or nil for an absent v.
func optRow(v []float32, o, n int) []float32 {
	if v == nil {
		return nil
	}
	return v[o : o+n]
}

// linearEpilogue sets y[j] = res[j] + (t[j] + bias[j] + scale·Σₖ xa[k]·lb[j·r+k]) for j in
// [lo, hi), each term optional (nil; r = len(xa)), in the order of the unfused ops. The
// adapter's sums run four columns at a time: four independent chains, each still summed
// over k in order.
func linearEpilogue(y, t, res, bias, xa, lb []float32, scale float32, lo, hi int) {
	r := len(xa)
	j := lo
	if xa != nil {
		for ; j+4 <= hi; j += 4 {
			b0, b1 := lb[j*r:j*r+r], lb[(j+1)*r:(j+1)*r+r]
			b2, b3 := lb[(j+2)*r:(j+2)*r+r], lb[(j+3)*r:(j+3)*r+r]
			var s0, s1, s2, s3 float32
			for k, v := range xa {
				s0 += v * b0[k]
				s1 += v * b1[k]
				s2 += v * b2[k]
				s3 += v * b3[k]
			}
			for q, s := range [4]float32{s0, s1, s2, s3} {
				y[j+q] = epilogue(t[j+q], res, bias, j+q, scale, s, true)
			}
		}
	}
	for ; j < hi; j++ {
		var s float32
		if xa != nil {
			bj := lb[j*r : j*r+r]
			for k, v := range xa {
				s += v * bj[k]
			}
		}
		y[j] = epilogue(t[j], res, bias, j, scale, s, xa != nil)
	}
}

// epilogue is one output of linearEpilogue from its product v and adapter sum s.
func epilogue(v float32, res, bias []float32, j int, scale, s float32, lora bool) float32 {
	if bias != nil {
		v += bias[j]
	}
	if lora {
		v += scale * s
	}
	if res != nil {
		v = res[j] + v
	}
	return v
}
