package cuda

import (
	"fmt"
	"slices"
	"unsafe"

	"rlhfstation/engine/backend"
)

// LinearsBackward (backend.Backend): up to three linears sharing their input in three launches
// (kernels/lora.cu): lora_grads, one cuBLAS product over the bf16 expansions of the weights
// stacked (kept, as expandedQ4 keeps one weight's), lora_in. Other shapes and types take the
// composition of the other ops.
func (b *Backend) LinearsBackward(dx Buf, acc bool, x, xa Buf, ldxa int, ls []LinearGrad, rows int) error {
	if len(ls) == 0 || rows == 0 {
		return nil
	}
	in := ls[0].W.Cols
	sts := make([]*q4State, len(ls))
	tot, width, r := 0, 0, 0
	var scale float32
	fused := len(ls) <= 3 && x.DType() == BF16 && (dx.DType() == BF16 || dx.DType() == F32) && (xa.Nil() || xa.DType() == BF16)
	for i, l := range ls {
		st, err := state(l.W)
		if err != nil {
			return err
		}
		if l.W.Cols != in {
			return fmt.Errorf("cuda: LinearsBackward: linear %d takes %d inputs, linear 0 %d", i, l.W.Cols, in)
		}
		if err := firstErr(act("dy", l.DY, rows*l.W.Rows), sameType("the dy's", l.DY, ls[0].DY)); err != nil {
			return err
		}
		sts[i] = st
		tot += l.W.Rows
		if l.A.Nil() {
			continue
		}
		if err := firstErr(need("A", l.A, F32, l.R*in), need("B", l.B, F32, l.W.Rows*l.R), need("GradA", l.GradA, F32, l.R*in),
			need("GradB", l.GradB, F32, l.W.Rows*l.R), act("xa", xa, (rows-1)*ldxa+l.Off+l.R)); err != nil {
			return err
		}
		if r != 0 && (l.R != r || l.Scale != scale) || l.Off != width {
			fused = false // the kernels take one rank and scale, the adapters' columns in order
		}
		r, scale, width = l.R, l.Scale, width+l.R
	}
	if err := firstErr(act("dx", dx, rows*in), act("x", x, rows*in)); err != nil {
		return err
	}
	if !fused {
		return backend.LinearsBackwardOps(b, dx, acc, x, xa, ldxa, ls, rows)
	}
	return b.queue(nil, func(o *owner) error {
		var gb, ga, lb, la [3]devptr[float32]
		var out, off [3]int32
		var dy [3]uintptr
		for i, l := range ls {
			out[i], dy[i] = int32(l.W.Rows), l.DY.Addr()
			if !l.A.Nil() {
				gb[i], ga[i], lb[i], la[i], off[i] = f32(l.GradB), f32(l.GradA), f32(l.B), f32(l.A), int32(l.Off)
			}
		}
		dy16, err := o.tmp(2 * rows * tot)
		if err != nil {
			return err
		}
		defer o.done(dy16)
		var dxa uintptr
		if width > 0 {
			if dxa, err = o.tmp(4 * rows * width); err != nil {
				return err
			}
			defer o.done(dxa)
		}
		var nb int64
		for i := range ls {
			if lb[i] != 0 {
				nb += int64(out[i]) * int64(r)
			}
		}
		jobs := nb + int64(rows)*int64(width+tot)
		o.hint = nb * int64(rows) // dB's products
		d := o.flat(jobs)
		if ls[0].DY.DType() == F32 {
			err = o.loraGradsF32(d, devptr[bf16](dy16), devptr[float32](dxa), gb[0], gb[1], gb[2], devptr[float32](dy[0]), devptr[float32](dy[1]),
				devptr[float32](dy[2]), lb[0], lb[1], lb[2], out[0], out[1], out[2], off[0], off[1], off[2], bf(xa), int32(ldxa), int32(width),
				int32(rows), int32(r), scale)
		} else {
			err = o.loraGradsBF16(d, devptr[bf16](dy16), devptr[float32](dxa), gb[0], gb[1], gb[2], devptr[bf16](dy[0]), devptr[bf16](dy[1]),
				devptr[bf16](dy[2]), lb[0], lb[1], lb[2], out[0], out[1], out[2], off[0], off[1], off[2], bf(xa), int32(ldxa), int32(width),
				int32(rows), int32(r), scale)
		}
		if err != nil {
			return err
		}
		w, release, err := o.stackedQ4(sts)
		if err != nil {
			return err
		}
		defer release()
		beta := float32(0)
		if acc {
			beta = 1
		}
		if err := o.gemm(&gemmArgs{m: rows, n: in, k: tot, alpha: 1, beta: beta, a: dy16, aType: dtBF16, lda: tot,
			b: w, bType: dtBF16, ldb: in, c: dx.Addr(), cType: blasType(dx), ldc: in}); err != nil {
			return err
		}
		if width == 0 {
			return nil
		}
		o.hint = int64(rows) * int64(width) // dA's products
		d = o.flat(int64(width+rows) * int64(in))
		if dx.DType() == F32 {
			return o.loraInF32(d, ga[0], ga[1], ga[2], f32(dx), devptr[float32](dxa), bf(x), la[0], la[1], la[2], off[0], off[1], off[2],
				int32(width), int32(rows), int32(in), int32(r))
		}
		return o.loraInBF16(d, ga[0], ga[1], ga[2], bf(dx), devptr[float32](dxa), bf(x), la[0], la[1], la[2], off[0], off[1], off[2],
			int32(width), int32(rows), int32(in), int32(r))
	})
}

// stackedQ4 is the weights' bf16 expansions one above the other [Σ rows, cols]: one weight's
// kept expansion (expandedQ4), or for several a stacked one kept the same way (under a
// q4State of its own, so that dropExpanded gives it back too).
func (o *owner) stackedQ4(sts []*q4State) (uintptr, func(), error) {
	if len(sts) == 1 {
		return o.expandedQ4(sts[0])
	}
	var key [3]*q4State
	copy(key[:], sts)
	if o.stacked == nil {
		o.stacked = map[[3]*q4State]*q4State{}
	}
	s := o.stacked[key]
	if s == nil {
		s = &q4State{q: q4{cols: sts[0].q.cols}}
		for _, st := range sts {
			s.q.rows += st.q.rows
		}
		o.stacked[key] = s
	}
	if s.expanded != 0 && !o.capturing {
		return s.expanded, func() {}, nil
	}
	n := 2 * int64(s.q.rows) * int64(s.q.cols)
	keep := false
	if !o.capturing && !o.d.noKeep {
		var free, total uintptr
		if call(o.d.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))) == 0 {
			keep = int64(free)-n >= int64(total)/4
		}
	}
	p, err := o.tmp(int(n))
	if err != nil {
		return 0, nil, err
	}
	at := p
	for _, st := range sts {
		m := 2 * st.q.rows * st.q.cols
		if at%16 == 0 {
			err = o.dequant(devptr[bf16](at), &st.q)
		} else { // the kernel stores 16 bytes at a time: expand aligned, then copy
			var t uintptr
			if t, err = o.tmp(m); err == nil {
				if err = o.dequant(devptr[bf16](t), &st.q); err == nil {
					err = o.copyDtoD(at, t, m)
				}
				o.done(t)
			}
		}
		if err != nil {
			o.done(p)
			return 0, nil, err
		}
		at += uintptr(m)
	}
	if keep {
		s.expanded = p
		o.expandedBytes += n
		o.kept = append(o.kept, s)
		return p, func() {}, nil
	}
	return p, func() { o.done(p) }, nil
}

// dropStacked forgets the stacked expansions that hold st (FreeQ4), freeing their memory.
func (o *owner) dropStacked(st *q4State) {
	for k, s := range o.stacked {
		if !slices.Contains(k[:], st) {
			continue
		}
		if s.expanded != 0 {
			o.expandedBytes -= 2 * int64(s.q.rows) * int64(s.q.cols)
			o.kept = slices.DeleteFunc(o.kept, func(x *q4State) bool { return x == s })
			_ = o.d.mem.free(s.expanded)
			s.expanded = 0
		}
		delete(o.stacked, k)
	}
}
