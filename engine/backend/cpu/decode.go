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

// Q4Linears is one Q4Linear a linear, in one parallel region where the few-row kernels take
// them all (q4Linears).
func (b *Backend) Q4Linears(ls []backend.Q4Out, x, xa backend.Buf, ldxa int, rows int) error {
	return b.q4LinearsOf(b, false, ls, x, xa, ldxa, rows)
}

// q4LinearsOf is Q4Linears (sb's, MulTSampled's products when sampled): one q4Linears when
// every weight has the few-row kernels' form, else one sb.Q4Linear a linear.
func (b *Backend) q4LinearsOf(sb backend.Backend, sampled bool, ls []backend.Q4Out, x, xa backend.Buf, ldxa int, rows int) error {
	if rows == 0 || len(ls) == 0 {
		return nil
	}
	in := ls[0].W.Cols
	for i, l := range ls {
		// They share x: another width would read its rows at the wrong stride, fused or not.
		if l.W.Cols != in {
			return fmt.Errorf("cpu: Q4Linears: linear %d takes %d inputs, linear 0 %d", i, l.W.Cols, in)
		}
	}
	js := make([]q4Job, len(ls))
	for i, l := range ls {
		d := fewRows(l.W, rows)
		if d == nil {
			return backend.Q4LinearsOps(sb, ls, x, xa, ldxa, rows)
		}
		var xl backend.Buf
		if !l.B.Nil() {
			xl = xa.From(l.Off)
		}
		var a args
		js[i] = linearJob(&a, l.W, l.Y, backend.Buf{}, l.Bias, xl, ldxa, l.B, l.R, l.Scale, rows)
		if a.err != nil {
			return fmt.Errorf("Q4Linears linear %d: %w", i, a.err)
		}
		js[i].d = d
	}
	var a args
	xv := a.f32("x", x, rows*in)
	if a.err != nil {
		return a.err
	}
	q4Linears(sampled, js, xv, rows)
	return nil
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
	var a args
	j := linearJob(&a, w, y, res, bias, xa, ldxa, lb, r, scale, rows)
	if a.err != nil {
		return a.err
	}
	if d := fewRows(w, rows); d != nil {
		xv := a.f32("x", x, rows*w.Cols)
		if a.err != nil {
			return a.err
		}
		j.d = d
		q4Linears(sampled, []q4Job{j}, xv, rows)
		return nil
	}
	n := w.Rows
	tp := xScratch.Get().(*[]float32)
	defer xScratch.Put(tp)
	if cap(*tp) < rows*n {
		*tp = make([]float32, rows*n)
	}
	j.t = (*tp)[:rows*n]
	if err := b.q4MulT(sampled, backend.HostF32(j.t), x, w, rows); err != nil {
		return err
	}
	// The epilogue split over the cores by output columns: with an adapter it is rows·n·r
	// multiply-adds, which on one core would rival the product's own time at one row.
	For(n, max(64, (1<<13)/(rows*(j.r+1))), func(lo, hi int) { j.epilogue(rows, lo, hi) })
	return nil
}

// q4Job is one linear of a fused 4-bit product (q4Linears, q4Linear): its weight's few-row
// form (d), its product's scratch t and its output y [rows, n], and its epilogue's terms
// (linearEpilogue; res, bias and the adapter each optional: nil, r = 0).
type q4Job struct {
	d                       *Q4Dot
	i16                     bool
	y, t, res, bias, xa, lb []float32
	n, ldxa, r              int
	scale                   float32
}

// linearJob checks one fused linear's buffers (a keeps the first mistake) and returns its
// job, without d and t.
func linearJob(a *args, w *backend.Q4, y, res, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) q4Job {
	n := w.Rows
	j := q4Job{n: n, y: a.f32("y", y, rows*n), res: a.optF32("res", res, rows*n), bias: a.optF32("bias", bias, n), scale: scale}
	if !xa.Nil() || !lb.Nil() {
		if r <= 0 || ldxa < r {
			a.fail("Q4Linear of rank %d with xa %d apart", r, ldxa)
			return j
		}
		j.xa, j.lb, j.ldxa, j.r = a.f32("xa", xa, (rows-1)*ldxa+r), a.f32("lora B", lb, n*r), ldxa, r
	}
	return j
}

// epilogue sets the output columns lo..hi-1 of each row from the product t (linearEpilogue).
func (j *q4Job) epilogue(rows, lo, hi int) {
	n := j.n
	for i := 0; i < rows; i++ {
		var xr []float32
		if j.xa != nil {
			xr = j.xa[i*j.ldxa : i*j.ldxa+j.r]
		}
		linearEpilogue(j.y[i*n:(i+1)*n], j.t[i*n:(i+1)*n], optRow(j.res, i*n, n), j.bias, xr, j.lb, j.scale, lo, hi)
	}
}

// q4Linears runs fused linears sharing x [rows, in] (rows ≤ q4DotMaxRows, every d set) as
// one parallel region: x readied once, the outputs of all the linears cut into pieces
// together (ForPieces; a piece may span two weights), each piece its product, then its
// epilogue while its columns are in cache. So a block's k and v (128 rows at the 0.5B, under
// a piece's grain alone) share the cores with q, and the group pays one hand-off instead of
// one a linear and one more an epilogue. Each output is the same kernel's sum over the same
// weight row as in MulT (MulTSampled when sampled): the pieces only change who computes it.
func q4Linears(sampled bool, js []q4Job, x []float32, rows int) {
	in := js[0].d.W.Cols
	var p q4X
	total := 0
	for k := range js {
		j := &js[k]
		j.i16 = j.d.use16(rows, sampled)
		p.ready(x, rows, in, j.i16)
		total += j.d.W.Rows
	}
	tp := xScratch.Get().(*[]float32)
	if cap(*tp) < rows*total {
		*tp = make([]float32, rows*total)
	}
	t := (*tp)[:rows*total]
	for k := range js {
		n := js[k].d.W.Rows
		js[k].t, t = t[:rows*n], t[rows*n:]
	}
	ForPieces(total, q4PieceGrain(in), func(lo, hi int) {
		base := 0
		for k := range js {
			j := &js[k]
			n := j.n
			if a, b := max(lo, base)-base, min(hi, base+n)-base; a < b {
				for i := 0; i < rows; i++ {
					clear(j.t[i*n+a : i*n+b])
				}
				j.d.rowsInto(j.t, &p, j.i16, a, b)
				j.epilogue(rows, a, b)
			}
			base += n
		}
	})
	xScratch.Put(tp)
	p.release()
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
