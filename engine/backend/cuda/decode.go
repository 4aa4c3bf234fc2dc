package cuda

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// The decode step's ops and graph capture through the backend interface (backend.Capturer):
// the model records its own decode step once per (batch, cache capacity) and replays it.

var _ backend.Capturer = (*Backend)(nil)

// Capture records the ops record queues as a CUDA graph (Device.Capture).
func (b *Backend) Capture(record func() error) (backend.Graph, error) {
	g, err := b.d.Capture(record)
	if err != nil {
		return nil, err
	}
	return graphLaunch{g}, nil
}

// graphLaunch is a Graph as the backend interface has it.
type graphLaunch struct{ g *Graph }

func (l graphLaunch) Launch() error { l.g.Launch(); return nil }
func (l graphLaunch) Close()        { l.g.Close() }

// AppendKV writes row r of k and v into the caches at seq[r]·seqStride + pos[r]·width.
func (b *Backend) AppendKV(kc, vc, k, v, seq, pos Buf, rows, width, seqStride int) error {
	if rows == 0 {
		return nil
	}
	if err := firstErr(act("kc", kc, width), act("vc", vc, width), act("k", k, rows*width), act("v", v, rows*width),
		need("seq", seq, I32, rows), need("pos", pos, I32, rows), sameType("AppendKV", kc, vc, k, v)); err != nil {
		return err
	}
	d := dims{grid: [3]uint32{uint32(rows), 2, 1}, block: [3]uint32{uint32(min(256, 32*ceilDiv(width, 32))), 1, 1}}
	return b.queue(nil, func(o *owner) error {
		if kc.DType() == F32 {
			return o.appendKvF32(d, f32(kc), f32(vc), f32(k), f32(v), i32(seq), i32(pos), int32(width), int64(seqStride))
		}
		return o.appendKv(d, bf(kc), bf(vc), bf(k), bf(v), i32(seq), i32(pos), int32(width), int64(seqStride))
	})
}

// Advance sets pos[r] = min(pos[r]+1, limit−1).
func (b *Backend) Advance(pos Buf, rows, limit int) error {
	if rows == 0 {
		return nil
	}
	return b.queue(need("pos", pos, I32, rows), func(o *owner) error {
		return o.advancePos(grid1(ceilDiv(rows, 256), 256), i32(pos), int32(rows), int32(limit))
	})
}

// q4TensorRows is where Q4Linear moves to the tensor cores (m16n8k16 tiles of 16 rows).
const q4TensorRows = 16

// Q4Linear sets y = res + x·Wᵀ + bias + scale·xa·Bᵀ with one kernel (kernels/step.cu): W
// expanded in registers, x, xa and B bf16 (float32 callers' through copies), y and res bf16
// or float32 (the stream).
func (b *Backend) Q4Linear(y, res, x Buf, w *Q4, bias, xa Buf, ldxa int, lb Buf, r int, scale float32, rows int) error {
	st, err := state(w)
	if err != nil || rows == 0 {
		return err
	}
	n := w.Rows
	lora := !xa.Nil() || !lb.Nil()
	if lora && (r <= 0 || ldxa < r) {
		return fmt.Errorf("cuda: Q4Linear of rank %d with xa %d apart", r, ldxa)
	}
	if err := firstErr(act("y", y, rows*n), optAct("res", res, rows*n), act("x", x, rows*w.Cols), opt("bias", bias, F32, n),
		sameType("Q4Linear's y and res", y, res)); err != nil {
		return err
	}
	if lora {
		if err := firstErr(act("xa", xa, (rows-1)*ldxa+r), act("lora B", lb, n*r)); err != nil {
			return err
		}
	}
	if anyF32(x, xa, lb) {
		var t temps
		defer t.free(b)
		xb, ab, bb := t.bf(b, x, true), t.bf(b, xa, true), t.bf(b, lb, true)
		if t.err != nil {
			return t.err
		}
		return b.Q4Linear(y, res, xb, w, bias, ab, ldxa, bb, r, scale, rows)
	}
	q := &st.q
	vec := int32(0)
	if q.cols%16 == 0 && q.cols%8 == 0 && x.Addr()%16 == 0 {
		vec = 1
	}
	if rows >= q4TensorRows && q.cols%16 == 0 && x.Addr()%4 == 0 { // the tensor cores, 16 rows a block
		d := dims{grid: [3]uint32{uint32(ceilDiv(n, 64)), uint32(ceilDiv(rows, 16)), 1}, block: [3]uint32{128, 1, 1}}
		return b.queue(nil, func(o *owner) error {
			if y.DType() == F32 {
				return o.q4LinearTcF32(d, f32(y), f32(res), int32(n), bf(x), int32(q.cols), q.packed, q.absmax, q.qabsmax, q.nestedAbsmax,
					q.nestedCode, q.code, q.offset, f32(bias), bf(xa), int32(ldxa), bf(lb), int32(r), scale, int32(n), int32(q.cols),
					int32(rows), int32(q.blockShift))
			}
			return o.q4LinearTcBF16(d, bf(y), bf(res), int32(n), bf(x), int32(q.cols), q.packed, q.absmax, q.qabsmax, q.nestedAbsmax,
				q.nestedCode, q.code, q.offset, f32(bias), bf(xa), int32(ldxa), bf(lb), int32(r), scale, int32(n), int32(q.cols),
				int32(rows), int32(q.blockShift))
		})
	}
	d := q4LinearDims(n, rows, q.cols)
	return b.queue(nil, func(o *owner) error {
		if y.DType() == F32 {
			return o.q4LinearF32(d, f32(y), f32(res), int32(n), bf(x), int32(q.cols), q.packed, q.absmax, q.qabsmax, q.nestedAbsmax,
				q.nestedCode, q.code, q.offset, f32(bias), bf(xa), int32(ldxa), bf(lb), int32(r), scale, int32(n), int32(q.cols),
				int32(rows), int32(q.blockShift), vec)
		}
		return o.q4LinearBF16(d, bf(y), bf(res), int32(n), bf(x), int32(q.cols), q.packed, q.absmax, q.qabsmax, q.nestedAbsmax,
			q.nestedCode, q.code, q.offset, f32(bias), bf(xa), int32(ldxa), bf(lb), int32(r), scale, int32(n), int32(q.cols),
			int32(rows), int32(q.blockShift), vec)
	})
}

// q4LinearDims is q4_linear's launch: a block per 2 output features (n) and 8 rows of x, its
// warps splitting the cols columns, one warp per 512 (a thread takes 16 weights a step), 1 to 8.
func q4LinearDims(n, rows, cols int) dims {
	warps := min(max(ceilDiv(cols, 512), 1), 8)
	return dims{grid: [3]uint32{uint32(ceilDiv(n, 2)), uint32(ceilDiv(rows, 8)), 1}, block: [3]uint32{uint32(warps * 32), 1, 1}}
}
