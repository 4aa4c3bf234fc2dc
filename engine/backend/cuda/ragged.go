package cuda

import (
	"slices"
)

// Attention over every span of a pass in one launch (forward) and two (backward), over
// ragged lengths, flash-style on the tensor cores (kernels/attention.cu): no probabilities
// are kept, the backward recomputes them from the saved log-sum-exp. The kernels find their
// tiles through an index table on the device, the same for every layer of a pass (the
// layers' keys differ only in their base addresses), so it is uploaded once per pass and kept.

// tcTile is the rows of a query tile and the keys of a key tile of the tensor-core kernels.
const tcTile = 16

// raggedPlan is a batch of spans as the ragged kernels read it.
type raggedPlan struct {
	rows           int
	qtiles, ktiles int
	short          bool // every span has fewer than 8 rows (decode-like): the row kernel
	vol            attnVolume
	k, v, dk, dv   devptr[bf16]
	tab            Buf // I32: kbase[rows], pos[rows] (the row kernel's), 4 values a query tile, 6 a key tile
}

// attnVolume is a ragged batch's size as the tensor-core kernels' costs read it.
type attnVolume struct {
	pairs    int64 // (query tile, key tile) pairs a head computes
	rows     int64 // query rows
	keys     int64 // key rows (each span's positions 0..pos+n−1)
	rowKeys  int64 // (query row, key) pairs seen (the row kernel's)
	dkvPairs int64 // (key tile, query tile) pairs a query head computes in attn_bwd_dkv_tc
}

// raggedTable is the last index table uploaded, kept while the passes reuse it.
type raggedTable struct {
	host []int32
	buf  Buf
}

// raggedPlanOf lays out spans for the ragged kernels, or reports false when they do not fit
// them: the spans must cover rows [0, rows) in order, and every span's keys, values (and
// their gradients) must sit at one offset, a whole number of key rows, from one base each.
func (b *Backend) raggedPlanOf(spans []Span, a Attention, grads bool) (*raggedPlan, bool, error) {
	kw := a.KVHeads * a.HeadDim
	if a.HeadDim > 256 || kw == 0 {
		return nil, false, nil
	}
	p := &raggedPlan{short: true}
	first := true
	for _, s := range spans {
		if s.N == 0 {
			continue
		}
		if s.Row != p.rows {
			return nil, false, nil
		}
		p.rows += s.N
		p.short = p.short && s.N < 8
		if first {
			p.k, p.v = bf(s.K), bf(s.V)
			if grads {
				p.dk, p.dv = bf(s.DK), bf(s.DV)
			}
			first = false
		}
		p.k, p.v = min(p.k, bf(s.K)), min(p.v, bf(s.V))
		if grads {
			p.dk, p.dv = min(p.dk, bf(s.DK)), min(p.dv, bf(s.DV))
		}
	}
	if p.rows == 0 {
		return p, true, nil
	}
	host := make([]int32, 2*p.rows)
	kbase, pos := host[:p.rows], host[p.rows:]
	var qt, kt []int32
	for _, s := range spans {
		if s.N == 0 {
			continue
		}
		off := int64(s.K.Addr()) - int64(p.k)
		same := int64(s.V.Addr())-int64(p.v) == off
		if grads {
			same = same && int64(s.DK.Addr())-int64(p.dk) == off && int64(s.DV.Addr())-int64(p.dv) == off
		}
		if !same || off%int64(2*kw) != 0 || off/int64(2*kw) > 1<<30 {
			return nil, false, nil
		}
		krow := int32(off / int64(2*kw))
		for i := 0; i < s.N; i++ {
			kbase[s.Row+i], pos[s.Row+i] = krow, int32(s.Pos+i)
			p.vol.rowKeys += int64(s.Pos + i + 1 - a.FirstKey(s.Pos+i))
		}
		// query tiles: 16 rows, and the key tiles each sees
		for i := 0; i < s.N; i += tcTile {
			n := min(tcTile, s.N-i)
			qt = append(qt, int32(s.Row+i), int32(n), int32(s.Pos+i), krow)
			first, last := a.FirstKey(s.Pos+i), s.Pos+i+n-1
			p.vol.pairs += int64(ceilDiv(last+1-first, tcTile))
		}
		// key tiles over positions 0..pos+n−1, and the query tiles over the rows that see each
		L := s.Pos + s.N
		for j := 0; j < L; j += tcTile {
			nk := min(tcTile, L-j)
			kt = append(kt, krow+int32(j), int32(nk), int32(j), int32(s.Row), int32(s.Pos), int32(s.N))
			i0, i1 := max(0, j-s.Pos), s.N
			if a.Window > 0 {
				i1 = min(s.N, j+nk-1+a.Window-s.Pos)
			}
			if i1 > i0 {
				p.vol.dkvPairs += int64(ceilDiv(i1-i0, tcTile))
			}
		}
		p.vol.keys += int64(L)
	}
	p.vol.rows = int64(p.rows)
	p.qtiles, p.ktiles = len(qt)/4, len(kt)/6
	host = append(append(host, qt...), kt...)
	var err error
	p.tab, err = b.raggedUpload(host)
	return p, true, err
}

// raggedUpload gives the table on the device: the kept one when host is the same, else a
// new upload (the old table freed once the work queued before is done with it).
func (b *Backend) raggedUpload(host []int32) (Buf, error) {
	t := &b.d.ragged
	if !t.buf.Nil() && slices.Equal(t.host, host) {
		return t.buf, nil
	}
	if !t.buf.Nil() {
		_ = b.Free(t.buf)
		t.buf, t.host = Buf{}, nil
	}
	buf, err := b.Alloc(I32, len(host))
	if err != nil {
		return Buf{}, err
	}
	if err := b.Upload(buf, host); err != nil {
		_ = b.Free(buf)
		return Buf{}, err
	}
	t.buf, t.host = buf, slices.Clone(host)
	return buf, nil
}

// tcDims is the head dimension the tensor-core kernels' register tiles hold for hd (≤ 256):
// 64, 128 or 256.
func tcDims(hd int) int {
	switch {
	case hd <= 64:
		return 64
	case hd <= 128:
		return 128
	}
	return 256
}

// tcGradDims is the dims of dq (dK and dV) one block of attn_bwd_dq_tc (attn_bwd_dkv_tc)
// holds; the rest in blocks beside it (grid z), each forming the scores anew.
func tcGradDims(hd int) int { return min(tcDims(hd), 128) }

// raggedForward is the forward over the plan: the tensor-core kernel over query tiles, or
// the row kernel when every span is decode-short (a 16-row tile would be mostly empty).
func (o *owner) raggedForward(out, q devptr[bf16], p *raggedPlan, a attnShape) error {
	if p.rows == 0 {
		return nil
	}
	if p.short {
		o.hint = p.vol.rowKeys
		kbase, pos := i32(p.tab), i32(p.tab.Slice(p.rows, p.rows))
		return o.attentionRows(out, q, p.k, p.v, kbase, pos, int64(a.kw()), p.rows, a, a.kw())
	}
	tiles := i32(p.tab.Slice(2*p.rows, 4*p.qtiles))
	d := dims{grid: [3]uint32{uint32(p.qtiles), uint32(ceilDiv(a.heads, 4)), 1}, block: [3]uint32{4 * 32, 1, 1}}
	o.attnHint = p.vol
	args := func(f func(dims, devptr[bf16], devptr[bf16], devptr[bf16], devptr[bf16], devptr[int32], int32, int32, int32, int32, float32, int32, float32) error) error {
		return f(d, out, q, p.k, p.v, tiles, int32(a.heads), int32(a.kvHeads), int32(a.hd), int32(a.kw()), a.scale, int32(a.window), a.softcap)
	}
	switch tcDims(a.hd) {
	case 64:
		return args(o.attnFwdTc64)
	case 128:
		return args(o.attnFwdTc128)
	}
	return args(o.attnFwdTc256)
}

// raggedBackward accumulates dq, dk and dv over the plan: attn_bwd_dq_tc (which keeps each
// row's log-sum-exp and D in scratch), then attn_bwd_dkv_tc.
func (o *owner) raggedBackward(dq, dout, q devptr[bf16], p *raggedPlan, a attnShape) error {
	if p.rows == 0 {
		return nil
	}
	stats, err := o.tmp(8 * p.rows * a.heads)
	if err != nil {
		return err
	}
	defer o.done(stats)
	st := devptr[float32](stats)
	tiles := i32(p.tab.Slice(2*p.rows, 4*p.qtiles))
	keys := i32(p.tab.Slice(2*p.rows+4*p.qtiles, 6*p.ktiles))
	h, kvh, hd, ldk, w := int32(a.heads), int32(a.kvHeads), int32(a.hd), int32(a.kw()), int32(a.window)
	z := uint32(ceilDiv(a.hd, tcGradDims(a.hd)))
	d := dims{grid: [3]uint32{uint32(p.qtiles), uint32(ceilDiv(a.heads, 4)), z}, block: [3]uint32{4 * 32, 1, 1}}
	o.attnHint = p.vol
	switch tcDims(a.hd) {
	case 64:
		err = o.attnBwdDqTc64(d, dq, st, q, p.k, p.v, dout, tiles, h, kvh, hd, ldk, a.scale, w, a.softcap)
	case 128:
		err = o.attnBwdDqTc128(d, dq, st, q, p.k, p.v, dout, tiles, h, kvh, hd, ldk, a.scale, w, a.softcap)
	default:
		err = o.attnBwdDqTc256(d, dq, st, q, p.k, p.v, dout, tiles, h, kvh, hd, ldk, a.scale, w, a.softcap)
	}
	if err != nil {
		return err
	}
	d = dims{grid: [3]uint32{uint32(p.ktiles), uint32(a.kvHeads), z}, block: [3]uint32{32, 1, 1}}
	o.attnHint = p.vol
	switch tcDims(a.hd) {
	case 64:
		return o.attnBwdDkvTc64(d, p.dk, p.dv, st, q, p.k, p.v, dout, keys, h, kvh, hd, ldk, a.scale, w, a.softcap)
	case 128:
		return o.attnBwdDkvTc128(d, p.dk, p.dv, st, q, p.k, p.v, dout, keys, h, kvh, hd, ldk, a.scale, w, a.softcap)
	}
	return o.attnBwdDkvTc256(d, p.dk, p.dv, st, q, p.k, p.v, dout, keys, h, kvh, hd, ldk, a.scale, w, a.softcap)
}
