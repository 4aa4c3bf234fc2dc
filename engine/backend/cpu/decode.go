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
	t := make([]float32, rows*n)
	if err := b.q4MulT(sampled, backend.HostF32(t), x, w, rows); err != nil {
		return err
	}
	For(rows, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for j := 0; j < n; j++ {
				v := t[i*n+j]
				if bv != nil {
					v += bv[j]
				}
				if xv != nil {
					var s float32
					for k := 0; k < r; k++ {
						s += xv[i*ldxa+k] * lv[j*r+k]
					}
					v += scale * s
				}
				if rv != nil {
					v = rv[i*n+j] + v
				}
				yv[i*n+j] = v
			}
		}
	})
	return nil
}
