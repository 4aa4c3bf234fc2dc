package cuda

import (
	"slices"
)

// Attention over every span of a pass in one launch (forward) and two (backward), over
// ragged lengths, flash-style: no probabilities are kept, the backward recomputes them from
// the scores. The kernels find each row's keys through an index table on the device, the
// same for every layer of a pass (the layers' keys differ only in their base addresses), so
// it is uploaded once per pass and kept.

// raggedPlan is a batch of spans as the ragged kernels read it.
type raggedPlan struct {
	rows, entries int
	keys          int64 // the (query row, key) pairs the rows see
	k, v, dk, dv  devptr[bf16]
	tab           Buf // I32: kbase[rows], pos[rows], then 5 values per key entry (see attn_bwd_dkv)
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
	p := &raggedPlan{}
	first := true
	for _, s := range spans {
		if s.N == 0 {
			continue
		}
		if s.Row != p.rows {
			return nil, false, nil
		}
		p.rows += s.N
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
	var entries []int32
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
			p.keys += int64(s.Pos + i + 1 - a.FirstKey(s.Pos+i))
		}
		// the key entries (the backward's), in the forward's table too: one table serves both
		for j := 0; j < s.Pos+s.N; j++ {
			entries = append(entries, krow+int32(j), int32(s.Row), int32(s.Pos), int32(s.N), int32(j))
		}
		p.entries += s.Pos + s.N
	}
	var err error
	p.tab, err = b.raggedUpload(append(host, entries...))
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

// raggedForward is the forward over the plan: attn_rows with each row's keys from its
// span's first key row.
func (o *owner) raggedForward(out, q devptr[bf16], p *raggedPlan, a attnShape) error {
	if p.rows == 0 {
		return nil
	}
	o.hint = p.keys
	kbase, pos := i32(p.tab), i32(p.tab.Slice(p.rows, p.rows))
	return o.attentionRows(out, q, p.k, p.v, kbase, pos, int64(a.kw()), p.rows, a, a.kw())
}

// raggedBackward accumulates dq, dk and dv over the plan: attn_bwd_dq (which keeps each
// row's log-sum-exp and D in scratch), then attn_bwd_dkv.
func (o *owner) raggedBackward(dq, dout, q devptr[bf16], p *raggedPlan, a attnShape) error {
	if p.rows == 0 {
		return nil
	}
	stats, err := o.tmp(8 * p.rows * a.heads)
	if err != nil {
		return err
	}
	defer o.done(stats)
	kbase, pos := i32(p.tab), i32(p.tab.Slice(p.rows, p.rows))
	d := dims{grid: [3]uint32{uint32(p.rows), uint32(a.heads), 1}, block: [3]uint32{4 * 32, 1, 1}}
	o.hint = p.keys
	if err := o.attnBwdDq(d, dq, devptr[float32](stats), q, p.k, p.v, dout, kbase, pos, int32(a.heads), int32(a.kvHeads), int32(a.hd),
		int32(a.kw()), a.scale, int32(a.window), a.softcap); err != nil {
		return err
	}
	if p.entries == 0 {
		return nil
	}
	d = dims{grid: [3]uint32{uint32(p.entries), uint32(a.kvHeads), 1}, block: [3]uint32{4 * 32, 1, 1}}
	o.hint = p.keys
	keys := i32(p.tab.Slice(2*p.rows, 5*p.entries))
	return o.attnBwdDkv(d, p.dk, p.dv, devptr[float32](stats), q, p.k, p.v, dout, keys, int32(a.heads), int32(a.kvHeads), int32(a.hd),
		int32(a.kw()), a.scale, int32(a.window), a.softcap)
}
