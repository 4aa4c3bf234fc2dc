package cuda

import (
	"fmt"
	"slices"

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
	return b.q4Linears([]q4Member{{st: st, y: y, res: res, bias: bias, lb: lb}}, x, xa, ldxa, r, scale, rows)
}

// Q4Linears runs up to three linears sharing x in one launch (q4_linears: a block's q, k and
// v, or gate and up): x, xa and the B's bf16 (float32 callers' through copies), every y of
// one type, the adapters of one rank and scale; other lists take one Q4Linear a linear.
func (b *Backend) Q4Linears(ls []Q4Out, x, xa Buf, ldxa int, rows int) error {
	if len(ls) == 0 || rows == 0 {
		return nil
	}
	if f32In := anyF32(x, xa) || slices.ContainsFunc(ls, func(l Q4Out) bool { return anyF32(l.B) }); f32In {
		var t temps
		defer t.free(b)
		bls := slices.Clone(ls)
		for i := range bls {
			bls[i].B = t.bf(b, ls[i].B, true)
		}
		xb, ab := t.bf(b, x, true), t.bf(b, xa, true)
		if t.err != nil {
			return t.err
		}
		return b.Q4Linears(bls, xb, ab, ldxa, rows)
	}
	fused := len(ls) <= 3
	ms := make([]q4Member, len(ls))
	r, scale := 0, float32(0)
	for i, l := range ls {
		st, err := state(l.W)
		if err != nil {
			return err
		}
		if l.W.Cols != ls[0].W.Cols {
			return fmt.Errorf("cuda: Q4Linears: linear %d takes %d inputs, linear 0 %d", i, l.W.Cols, ls[0].W.Cols)
		}
		if err := firstErr(act("y", l.Y, rows*l.W.Rows), act("x", x, rows*l.W.Cols), opt("bias", l.Bias, F32, l.W.Rows),
			sameType("Q4Linears' outputs", l.Y, ls[0].Y)); err != nil {
			return fmt.Errorf("Q4Linears linear %d: %w", i, err)
		}
		ms[i] = q4Member{st: st, y: l.Y, bias: l.Bias, lb: l.B, off: l.Off}
		if l.B.Nil() {
			continue
		}
		if l.R <= 0 || ldxa < l.Off+l.R {
			return fmt.Errorf("cuda: Q4Linears linear %d: rank %d at column %d of xa %d apart", i, l.R, l.Off, ldxa)
		}
		if err := firstErr(act("xa", xa, (rows-1)*ldxa+l.Off+l.R), act("lora B", l.B, l.W.Rows*l.R)); err != nil {
			return fmt.Errorf("Q4Linears linear %d: %w", i, err)
		}
		if r != 0 && (l.R != r || l.Scale != scale) {
			fused = false
		}
		r, scale = l.R, l.Scale
	}
	if !fused {
		return backend.Q4LinearsOps(b, ls, x, xa, ldxa, rows)
	}
	return b.q4Linears(ms, x, xa, ldxa, r, scale, rows)
}

// q4Member is one linear of a q4_linears launch (xa's columns at off).
type q4Member struct {
	st               *q4State
	y, res, bias, lb Buf
	off              int
}

// q4Linears queues one q4_linears launch over ms (1 to 3, checked): the tensor cores' kernel
// from q4TensorRows rows, else the warps' (q4LinearDims).
func (b *Backend) q4Linears(ms []q4Member, x, xa Buf, ldxa, r int, scale float32, rows int) error {
	var m [3]q4Member
	copy(m[:], ms)
	cols := ms[0].st.q.cols
	vec := int32(0)
	if cols%16 == 0 && x.Addr()%16 == 0 {
		vec = 1
	}
	tc := rows >= q4TensorRows && cols%16 == 0 && x.Addr()%4 == 0
	feats, blocks := 0, 0
	var bytes int64 // the weights' codes and scales, read once (the ledger's hint)
	for _, e := range ms {
		feats += e.st.q.rows
		if tc {
			blocks += ceilDiv(e.st.q.rows, 16)
		} else {
			blocks += ceilDiv(e.st.q.rows, 2)
		}
		bytes += e.st.weightBytes()
	}
	d := q4LinearDims(blocks, rows, cols)
	if tc {
		if q4RanksVec(ms, xa, ldxa, r) {
			vec |= 2
		}
		tiles := blocks * ceilDiv(rows, 16)
		w := b.q4TcWarps(tiles, cols)
		d = dims{grid: [3]uint32{uint32(blocks), uint32(ceilDiv(rows, 16)), 1}, block: [3]uint32{uint32(32 * w), 1, 1}, shared: uint32(w << 10)}
	}
	w := func(i int) devptr[uint64] {
		if m[i].st == nil {
			return 0
		}
		return devptr[uint64](m[i].st.desc.Addr())
	}
	return b.queue(nil, func(o *owner) error {
		o.hint = bytes
		if m[0].y.DType() == F32 {
			launch := o.q4LinearsF32
			if tc {
				launch = o.q4LinearsTcF32
			}
			return launch(d, w(0), w(1), w(2), f32(m[0].y), f32(m[1].y), f32(m[2].y), f32(m[0].res), f32(m[1].res), f32(m[2].res),
				f32(m[0].bias), f32(m[1].bias), f32(m[2].bias), bf(m[0].lb), bf(m[1].lb), bf(m[2].lb), int32(m[0].off), int32(m[1].off),
				int32(m[2].off), bf(x), int32(cols), bf(xa), int32(ldxa), int32(r), scale, int32(cols), int32(rows), int32(feats), vec)
		}
		launch := o.q4LinearsBF16
		if tc {
			launch = o.q4LinearsTcBF16
		}
		return launch(d, w(0), w(1), w(2), bf(m[0].y), bf(m[1].y), bf(m[2].y), bf(m[0].res), bf(m[1].res), bf(m[2].res),
			f32(m[0].bias), f32(m[1].bias), f32(m[2].bias), bf(m[0].lb), bf(m[1].lb), bf(m[2].lb), int32(m[0].off), int32(m[1].off),
			int32(m[2].off), bf(x), int32(cols), bf(xa), int32(ldxa), int32(r), scale, int32(cols), int32(rows), int32(feats), vec)
	})
}

// q4RanksVec says whether the tensor-core kernel may read the LoRA terms' ranks 8 at a time
// (16-byte loads of xa's rows and B's): rank, ldxa and every member's offset multiples of 8,
// xa and the B's 16-byte aligned.
func q4RanksVec(ms []q4Member, xa Buf, ldxa, r int) bool {
	if r%8 != 0 || ldxa%8 != 0 || xa.Addr()%16 != 0 {
		return false
	}
	for _, m := range ms {
		if !m.lb.Nil() && (m.off%8 != 0 || m.lb.Addr()%16 != 0) {
			return false
		}
	}
	return true
}

// q4TcWarps is a block's warps in a tensor-core launch of q4_linears (tiles blocks over cols
// columns, each warp's 16 × 16 tile 1 KB of shared memory): enough that each walks at most 8 of
// the 16-column steps, up to 32, but no more in all than the device holds at once (SMs × 64
// warps) — a wide output's many blocks keep its warps busy as they are — and 8 at least.
func (b *Backend) q4TcWarps(tiles, cols int) int {
	w := min(ceilDiv(cols, 16*8), 32, 64*max(1, b.d.Info.SMs)/max(tiles, 1))
	return max(w, 8)
}

// q4LinearDims is q4_linears' launch: blocks (one per 2 output features) by 8 rows of x, its
// warps splitting the cols columns, one warp per 256 (a thread takes 8 weights a step), 1 to 8.
func q4LinearDims(blocks, rows, cols int) dims {
	warps := min(max(ceilDiv(cols, 256), 1), 8)
	return dims{grid: [3]uint32{uint32(blocks), uint32(ceilDiv(rows, 8)), 1}, block: [3]uint32{uint32(warps * 32), 1, 1}}
}
