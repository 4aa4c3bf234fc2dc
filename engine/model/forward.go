package model

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// acts are one block's activations over the rows of a pass. Inference shares one set
// across blocks; a training tape keeps one per block for the backward.
type acts struct {
	in           backend.Buf // block input, the residual stream [rows,Dim]
	n1           backend.Buf // first norm's output [rows,Dim]
	mean1, rstd1 backend.Buf // its statistics [rows] (mean: LayerNorm only)
	qkv          backend.Buf // a fused projection: gpt2's [rows,3·Dim], phi3's [rows,QDim+2·KVDim]
	qpre, kpre   backend.Buf // q and k before their norms (QKNorm)
	qrstd, krstd backend.Buf // those norms' statistics, one per head (or per row: QKNormFull)
	q, k, v      backend.Buf // [rows,QDim], [rows,KVDim] ×2, after RoPE
	att          backend.Buf // attention output [rows,QDim]
	ao, aorstd   backend.Buf // gemma2/3, olmo2: the attention's projection before its norm [rows,Dim], the norm's rstd
	mid          backend.Buf // residual stream after attention [rows,Dim]
	n2           backend.Buf // second norm's output
	mean2, rstd2 backend.Buf
	gu           backend.Buf // phi3's fused gate and up projection [rows,2·Hidden]
	fc1          backend.Buf // gate (llama) or c_fc (gpt2) output [rows,Hidden]
	fc2          backend.Buf // up (llama) [rows,Hidden]
	act          backend.Buf // MLP activation, the down projection's input [rows,Hidden]
	mo, morstd   backend.Buf // gemma2/3, olmo2: the MLP's output before its norm [rows,Dim], the norm's rstd
}

// qkvWidth is the width of a fused q, k, v projection (gpt2, phi3), 0 without one.
func qkvWidth(c *Config) int {
	switch {
	case c.Family() == GPT2:
		return 3 * c.Dim
	case c.Fused:
		return c.QDim() + 2*c.KVDim()
	}
	return 0
}

// The kinds of buffer an arena hands out, each of its own element type (Precision).
const (
	kStream = iota // the residual stream and its gradient
	kAct           // activations
	kF32           // statistics, log-probs and the rest
	kinds
)

// arena carves views out of one allocation per kind. Laid out twice: once to count (no
// memory), then over the allocations.
type arena struct {
	off [kinds]int
	buf [kinds]backend.Buf
}

func (a *arena) take(kind, n int) backend.Buf {
	if n == 0 {
		return backend.Buf{}
	}
	a.off[kind] += n
	if a.buf[kind].Nil() {
		return backend.Buf{}
	}
	return a.buf[kind].Slice(a.off[kind]-n, n)
}

// grow makes mem hold what a counting arena took, reallocating the kinds that are too
// small (their old memory freed), and returns an arena over it for the second layout.
func grow(b backend.Backend, mem *[kinds]backend.Buf, count *arena) (*arena, error) {
	p := b.Precision()
	types := [kinds]backend.DType{p.Stream, p.Act, backend.F32}
	for k := range mem {
		if mem[k].Len() >= count.off[k] && (count.off[k] == 0 || mem[k].DType() == types[k]) {
			continue
		}
		if !mem[k].Nil() {
			b.Free(mem[k])
			mem[k] = backend.Buf{}
		}
		x, err := b.Alloc(types[k], count.off[k])
		if err != nil {
			return nil, fmt.Errorf("activations: %w", err)
		}
		mem[k] = x
	}
	return &arena{buf: *mem}, nil
}

// carveActs lays out a block's activations for rows rows.
func (m *Model) carveActs(ar *arena, rows int, withIn bool) acts {
	c := &m.Config
	D, F, gpt2 := c.Dim, c.Hidden, c.Family() == GPT2
	var a acts
	if withIn {
		a.in = ar.take(kStream, rows*D)
	}
	if !c.PostNorm { // olmo2 has no norms before attention and the MLP
		a.n1, a.rstd1 = ar.take(kAct, rows*D), ar.take(kF32, rows)
		a.n2, a.rstd2 = ar.take(kAct, rows*D), ar.take(kF32, rows)
	}
	if gpt2 {
		a.mean1 = ar.take(kF32, rows)
	}
	a.qkv = ar.take(kAct, rows*qkvWidth(c))
	if c.QKNorm {
		a.qpre, a.kpre = ar.take(kAct, rows*c.QDim()), ar.take(kAct, rows*c.KVDim())
		a.qrstd, a.krstd = ar.take(kF32, rows*c.Heads), ar.take(kF32, rows*c.KVHeads)
	}
	a.q = ar.take(kAct, rows*c.QDim())
	a.k = ar.take(kAct, rows*c.KVDim())
	a.v = ar.take(kAct, rows*c.KVDim())
	a.att = ar.take(kAct, rows*c.QDim())
	if c.Sandwich || c.PostNorm {
		a.ao, a.aorstd = ar.take(kAct, rows*D), ar.take(kF32, rows)
		a.mo, a.morstd = ar.take(kAct, rows*D), ar.take(kF32, rows)
	}
	a.mid = ar.take(kStream, rows*D)
	if gpt2 {
		a.mean2 = ar.take(kF32, rows)
	} else {
		a.fc2 = ar.take(kAct, rows*F)
	}
	if c.Fused {
		a.gu = ar.take(kAct, rows*2*F)
	}
	a.fc1 = ar.take(kAct, rows*F)
	a.act = ar.take(kAct, rows*F)
	return a
}

// scratch holds the inference buffers, grown to the largest pass seen.
type scratch struct {
	rows   int
	mem    [kinds]backend.Buf
	x      backend.Buf // residual stream [rows,Dim]
	tmp    backend.Buf // projection output before the residual add [rows,Dim]
	hidden backend.Buf // final norm output [rows,Dim]
	fmean  backend.Buf
	frstd  backend.Buf
	a      acts
	logits backend.Buf // [n,Vocab] float32, grown on demand
	last   backend.Buf // the last rows' hidden states [n,Dim]
	logp   backend.Buf // log-probs of a pass [rows]
	xa     backend.Buf // a group's x·Aᵀ [rows, width] (lowrank.go)
	host   []float32   // logits returned by Forward
}

// free releases the scratch memory.
func (s *scratch) free(b backend.Backend) {
	for _, x := range append(s.mem[:], s.logits, s.last, s.logp, s.xa) {
		if !x.Nil() {
			b.Free(x)
		}
	}
	*s = scratch{}
}

func (m *Model) scratchFor(rows int) (*scratch, error) {
	s := &m.scratch
	if s.rows >= rows {
		return s, nil
	}
	var count arena
	m.layScratch(s, &count, rows)
	ar, err := grow(m.b, &s.mem, &count)
	if err != nil {
		return nil, err
	}
	m.layScratch(s, ar, rows)
	s.rows = rows
	return s, nil
}

// layScratch carves the inference buffers for rows rows out of ar (FootprintOf counts them too).
func (m *Model) layScratch(s *scratch, ar *arena, rows int) {
	D := m.Config.Dim
	s.x, s.tmp, s.hidden = ar.take(kStream, rows*D), ar.take(kAct, rows*D), ar.take(kAct, rows*D)
	s.fmean, s.frstd = ar.take(kF32, rows), ar.take(kF32, rows)
	s.a = m.carveActs(ar, rows, false)
}

// scratchBuf returns n elements of dt of *x, reallocated when too small or of another type.
func (m *Model) scratchBuf(x *backend.Buf, n int, dt backend.DType) (backend.Buf, error) {
	if x.Len() < n || x.DType() != dt {
		if !x.Nil() {
			m.b.Free(*x)
			*x = backend.Buf{}
		}
		y, err := m.b.Alloc(dt, n)
		if err != nil {
			return backend.Buf{}, err
		}
		*x = y
	}
	return x.Slice(0, n), nil
}

// run is the part of a pass that belongs to one sequence: rows [row, row+n) at positions
// [pos, pos+n) of sequence seq (a cache slot, or an index into the sequences given).
type run struct{ seq, row, n, pos int }

// pass is one forward over packed rows.
type pass struct {
	rows     int
	ids, pos []int32
	idsBuf   backend.Buf // ids and pos on the backend
	posBuf   backend.Buf
	runs     []run
	cache    *Cache // nil: every run starts at position 0 and attends within the pass
	train    bool
	ad       Adapters
	dec      *decoder // the decode step: ids and positions already on the device, indices too
	maxPos   int      // with dec: the positions stay below it
	layer    int      // the block running
	// xa gives the buffer of a group's x·Aᵀ in block layer: a tape's (kept for the
	// backward), else nil and the scratch's
	xa func(layer int, g *lrGroup) (backend.Buf, error)
}

// newPass packs the token lists: tokens[i] continues sequence i from position start(i).
func (m *Model) newPass(tokens [][]int, start func(i int) int, ad Adapters) (*pass, error) {
	p := &pass{ad: ad}
	for i, toks := range tokens {
		if len(toks) == 0 {
			continue
		}
		p0 := start(i)
		if end := p0 + len(toks); end > m.Config.Context() {
			return nil, fmt.Errorf("sequence %d: %d tokens exceed the model's context of %d", i, end, m.Config.Context())
		}
		p.runs = append(p.runs, run{seq: i, row: p.rows, n: len(toks), pos: p0})
		for j, id := range toks {
			if id < 0 || id >= m.Config.Vocab {
				return nil, fmt.Errorf("sequence %d: token id %d outside the vocabulary [0,%d)", i, id, m.Config.Vocab)
			}
			p.ids = append(p.ids, int32(id))
			p.pos = append(p.pos, int32(p0+j))
		}
		p.rows += len(toks)
	}
	return p, nil
}

// place puts the pass's ids and positions on the backend.
func (p *pass) place(b backend.Backend) error {
	var err error
	if p.idsBuf, err = b.Place(p.ids, backend.I32); err != nil {
		return err
	}
	p.posBuf, err = b.Place(p.pos, backend.I32)
	return err
}

// release frees what place made.
func (p *pass) release(b backend.Backend) {
	b.Free(p.idsBuf)
	b.Free(p.posBuf)
	p.idsBuf, p.posBuf = backend.Buf{}, backend.Buf{}
}

// attention describes layer l's attention: its scale, window and soft-capping.
func (m *Model) attention(l int) backend.Attention {
	c := &m.Config
	return backend.Attention{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Scale: c.AttnScale(), Window: c.LayerWindow(l), Softcap: float32(c.AttnSoftcap)}
}

// spans lists the attention spans of a pass for block l: keys and values come from the
// cache (after appending the pass's own), or from the block's own k and v rows.
func (m *Model) spans(p *pass, l int, a *acts) ([]backend.Span, error) {
	kvd := m.Config.KVDim()
	sp := make([]backend.Span, len(p.runs))
	if p.cache != nil {
		c := p.cache
		dst := make([]int64, 0, p.rows)
		for _, r := range p.runs {
			for j := 0; j < r.n; j++ {
				dst = append(dst, int64(r.seq*c.Capacity+r.pos+j))
			}
		}
		if err := m.b.CopyRows(c.k[l], dst, kvd, a.k, nil, kvd, p.rows, kvd); err != nil {
			return nil, err
		}
		if err := m.b.CopyRows(c.v[l], dst, kvd, a.v, nil, kvd, p.rows, kvd); err != nil {
			return nil, err
		}
	}
	for i, r := range p.runs {
		s := backend.Span{Row: r.row, N: r.n, Pos: r.pos}
		if p.cache != nil {
			k, v := p.cache.slot(l, r.seq)
			s.K, s.V = k.Slice(0, (r.pos+r.n)*kvd), v.Slice(0, (r.pos+r.n)*kvd)
		} else {
			s.K, s.V = a.k.Slice(r.row*kvd, r.n*kvd), a.v.Slice(r.row*kvd, r.n*kvd)
		}
		sp[i] = s
	}
	return sp, nil
}

// blocks runs the embedding and every block. actsOf gives block l's activations, whose in
// field holds the block's input; out(l) is where block l writes its output (the next
// block's input, or the final norm's input). It returns the last block's output.
func (m *Model) blocks(p *pass, actsOf func(l int) *acts, out func(l int) backend.Buf, tmp backend.Buf) (backend.Buf, error) {
	c := &m.Config
	x := actsOf(0).in
	if err := m.embed(x, p); err != nil {
		return backend.Buf{}, err
	}
	if c.EmbedScale != 0 { // gemma: √hidden
		if err := m.b.ScaleAll([]backend.Buf{x}, float32(c.EmbedScale)); err != nil {
			return backend.Buf{}, err
		}
	}
	for l := range m.Layers {
		if err := m.blockForward(p, l, actsOf(l), out(l), tmp); err != nil {
			return backend.Buf{}, fmt.Errorf("block %d: %w", l, err)
		}
	}
	return out(len(m.Layers) - 1), nil
}

// blockForward is one transformer block: out = mid + [PostMLP](MLP(norm2(mid))),
// mid = in + [PostAttn](Attention(norm1(in))), the bracketed norms gemma2/3's and olmo2's
// (which has no norm1 and norm2).
func (m *Model) blockForward(p *pass, l int, a *acts, out, tmp backend.Buf) error {
	c, L, b := &m.Config, &m.Layers[l], m.b
	rows, D, F := p.rows, c.Dim, c.Hidden
	post := c.Sandwich || c.PostNorm
	p.layer = l
	x1, x2 := a.n1, a.n2 // the inputs of attention and the MLP: the pre-norms' outputs
	var err error
	if c.PostNorm { // olmo2: the stream itself
		x1, x2 = a.in, a.mid
	} else {
		err = m.norm(L.Norm1, a.n1, a.mean1, a.rstd1, a.in, rows)
	}
	q, k := a.q, a.k // where the projections land: before the q/k norms when there are some
	if c.QKNorm {
		q, k = a.qpre, a.kpre
	}
	if L.QKV != nil {
		err = first(err,
			func() error { return m.linearFwd(p, L.QKV, a.qkv, x1, rows) },
			func() error { return splitQKV(b, q, k, a.v, a.qkv, rows, c.QDim(), c.KVDim()) })
	} else {
		err = first(err, func() error { return m.linearsFwd(p, []*Linear{L.Q, L.K, L.V}, []backend.Buf{q, k, a.v}, x1, rows) })
	}
	if c.QKNorm {
		qr, qd, kr, kd := c.qkNormRows(rows)
		err = first(err,
			func() error { return m.normRows(L.QNorm, a.q, a.qrstd, a.qpre, qr, qd) },
			func() error { return m.normRows(L.KNorm, a.k, a.krstd, a.kpre, kr, kd) })
	}
	if c.RoPE(l) {
		rope, err2 := m.ropeTable(maxPosOf(p), l)
		err = first(err, func() error { return err2 },
			func() error { return b.RoPEForward(a.q, p.posBuf, c.Heads, rope) },
			func() error { return b.RoPEForward(a.k, p.posBuf, c.KVHeads, rope) })
	}
	if err != nil {
		return err
	}
	if p.dec != nil { // every sequence's row at once, indices on the device
		kvd, cc := c.KVDim(), p.cache
		err = first(b.AppendKV(cc.k[l], cc.v[l], a.k, a.v, p.dec.seq, p.posBuf, rows, kvd, cc.Capacity*kvd),
			func() error {
				return b.AttentionRows(a.att, a.q, cc.k[l], cc.v[l], p.dec.seq, p.posBuf, rows, m.attention(l), cc.Capacity*kvd)
			})
	} else {
		var spans []backend.Span
		if spans, err = m.spans(p, l, a); err == nil {
			err = b.AttentionForward(a.att, backend.Buf{}, a.q, spans, m.attention(l))
		}
	}
	if post {
		err = first(err,
			func() error { return m.linearFwd(p, L.O, a.ao, a.att, rows) },
			func() error { return m.norm(L.PostAttn, tmp, backend.Buf{}, a.aorstd, a.ao, rows) },
			func() error { return b.ResidualForward(a.mid, a.in, tmp, rows*D) })
	} else {
		err = first(err, func() error { return m.linearAdd(p, L.O, a.mid, a.in, a.att, tmp, rows) })
	}
	if !c.PostNorm {
		err = first(err, func() error { return m.norm(L.Norm2, a.n2, a.mean2, a.rstd2, a.mid, rows) })
	}
	switch {
	case c.Family() == GPT2:
		err = first(err,
			func() error { return m.linearFwd(p, L.Up, a.fc1, x2, rows) },
			func() error { return b.GELUForward(a.act, a.fc1, rows*F) })
	case L.GateUp != nil: // gate and up side by side in each row
		err = first(err,
			func() error { return m.linearFwd(p, L.GateUp, a.gu, x2, rows) },
			func() error { return b.Copy2D(a.fc1, F, a.gu, 2*F, rows, F) },
			func() error { return b.Copy2D(a.fc2, F, a.gu.From(F), 2*F, rows, F) })
	default:
		err = first(err, func() error { return m.linearsFwd(p, []*Linear{L.Gate, L.Up}, []backend.Buf{a.fc1, a.fc2}, x2, rows) })
	}
	switch c.MLP {
	case SwiGLU:
		err = first(err, func() error { return b.SwiGLUForward(a.act, a.fc1, a.fc2, rows*F) })
	case GeGLU:
		err = first(err, func() error { return b.GeGLUForward(a.act, a.fc1, a.fc2, rows*F) })
	}
	if post {
		err = first(err,
			func() error { return m.linearFwd(p, L.Down, a.mo, a.act, rows) },
			func() error { return m.norm(L.PostMLP, tmp, backend.Buf{}, a.morstd, a.mo, rows) })
		return first(err, func() error { return b.ResidualForward(out, a.mid, tmp, rows*D) })
	}
	return first(err, func() error { return m.linearAdd(p, L.Down, out, a.mid, a.act, tmp, rows) })
}

// linearFwd is linearForward within a pass: the decode step's own path there, a fast
// group's fused 4-bit op (lowrank.go) in the other passes.
func (m *Model) linearFwd(p *pass, l *Linear, y, x backend.Buf, rows int) error {
	if p.dec != nil {
		if ok, err := p.dec.linear(l, y, backend.Buf{}, x, rows); ok || err != nil {
			return err
		}
	} else if ok, err := m.q4Linear(p, p.layer, l, y, backend.Buf{}, x, rows, m.xaOf(p)); ok || err != nil {
		return err
	}
	return m.linearForward(l, y, x, rows, p.train, p.ad)
}

// linearsFwd is linearFwd for linears sharing x (q, k and v; gate and up): one op in the
// decode step (decoder.linears), else one linearFwd each.
func (m *Model) linearsFwd(p *pass, ls []*Linear, ys []backend.Buf, x backend.Buf, rows int) error {
	if p.dec != nil {
		if ok, err := p.dec.linears(ls, ys, x, rows); ok || err != nil {
			return err
		}
	}
	for i, l := range ls {
		if err := m.linearFwd(p, l, ys[i], x, rows); err != nil {
			return err
		}
	}
	return nil
}

// linearAdd sets out = res + linear(x) (out may be res): one fused op for a 4-bit weight (in
// the decode step, or a fast group), else the product into tmp and a residual add.
func (m *Model) linearAdd(p *pass, l *Linear, out, res, x, tmp backend.Buf, rows int) error {
	if _, q4 := l.W.(*Quantized); q4 && p.dec != nil {
		if ok, err := p.dec.linear(l, out, res, x, rows); ok || err != nil {
			return err
		}
	} else if q4 {
		if ok, err := m.q4Linear(p, p.layer, l, out, res, x, rows, m.xaOf(p)); ok || err != nil {
			return err
		}
	}
	return first(m.linearFwd(p, l, tmp, x, rows), func() error { return m.b.ResidualForward(out, res, tmp, rows*m.Config.Dim) })
}

// xaOf gives a pass's buffers of the groups' x·Aᵀ: the tape's, or one scratch buffer the
// groups take in turn (each group's linears run one after the other).
func (m *Model) xaOf(p *pass) func(g *lrGroup) (backend.Buf, error) {
	return func(g *lrGroup) (backend.Buf, error) {
		if p.xa != nil {
			return p.xa(p.layer, g)
		}
		return m.scratchBuf(&m.scratch.xa, p.rows*g.width, m.b.Precision().Act)
	}
}

// first runs the steps in order while they succeed: err, or the first step's failure.
func first(err error, steps ...func() error) error {
	for _, s := range steps {
		if err != nil {
			return err
		}
		err = s()
	}
	return err
}

// norm applies a LayerNorm (gpt2) or RMSNorm (llama) over rows of Dim.
func (m *Model) norm(n Norm, out, mean, rstd, in backend.Buf, rows int) error {
	w, err := m.Buf(n.W)
	if err != nil {
		return err
	}
	if n.B != nil {
		bias, err := m.Buf(n.B)
		if err != nil {
			return err
		}
		return m.b.LayerNormForward(out, mean, rstd, in, w, bias, rows, m.Config.Dim, m.Config.NormEps)
	}
	return m.normRows(n, out, rstd, in, rows, m.Config.Dim)
}

// normRows applies an RMSNorm (with the family's weight offset) over rows of dim: the
// blocks' norms, and the per-head norms of q and k.
func (m *Model) normRows(n Norm, out, rstd, in backend.Buf, rows, dim int) error {
	w, err := m.Buf(n.W)
	if err != nil {
		return err
	}
	return m.b.RMSNormForward(out, rstd, in, w, rows, dim, m.Config.NormEps, m.Config.NormOffset)
}

// splitQKV copies a fused [rows,qd+2·kd] projection into q [rows,qd], k and v [rows,kd].
func splitQKV(b backend.Backend, q, k, v, qkv backend.Buf, rows, qd, kd int) error {
	w := qd + 2*kd
	return first(b.Copy2D(q, qd, qkv, w, rows, qd),
		func() error { return b.Copy2D(k, kd, qkv.From(qd), w, rows, kd) },
		func() error { return b.Copy2D(v, kd, qkv.From(qd+kd), w, rows, kd) })
}

// inference runs a pass with the shared scratch buffers and returns the final hidden
// states [rows,Dim].
func (m *Model) inference(p *pass) (backend.Buf, error) {
	s, err := m.scratchFor(p.rows)
	if err != nil {
		return backend.Buf{}, err
	}
	if p.dec == nil {
		if err := p.place(m.b); err != nil {
			return backend.Buf{}, err
		}
		defer p.release(m.b)
	}
	D := m.Config.Dim
	a := sliceActs(s.a, p.rows, &m.Config)
	a.in = s.x.Slice(0, p.rows*D)
	x, err := m.blocks(p, func(int) *acts { return &a }, func(int) backend.Buf { return a.in }, s.tmp)
	if err != nil {
		return backend.Buf{}, err
	}
	h := s.hidden.Slice(0, p.rows*D)
	return h, m.norm(m.Final, h, s.fmean, s.frstd, x, p.rows)
}

// sliceActs trims scratch activations to rows (they were sized for the largest pass).
func sliceActs(a acts, rows int, c *Config) acts {
	D, F := c.Dim, c.Hidden
	cut := func(s backend.Buf, w int) backend.Buf {
		if s.Nil() {
			return s
		}
		return s.Slice(0, rows*w)
	}
	return acts{in: cut(a.in, D), n1: cut(a.n1, D), mean1: cut(a.mean1, 1), rstd1: cut(a.rstd1, 1),
		qkv: cut(a.qkv, qkvWidth(c)), qpre: cut(a.qpre, c.QDim()), kpre: cut(a.kpre, c.KVDim()),
		qrstd: cut(a.qrstd, c.Heads), krstd: cut(a.krstd, c.KVHeads),
		q: cut(a.q, c.QDim()), k: cut(a.k, c.KVDim()), v: cut(a.v, c.KVDim()),
		att: cut(a.att, c.QDim()), ao: cut(a.ao, D), aorstd: cut(a.aorstd, 1), mid: cut(a.mid, D),
		n2: cut(a.n2, D), mean2: cut(a.mean2, 1), rstd2: cut(a.rstd2, 1), gu: cut(a.gu, 2*F),
		fc1: cut(a.fc1, F), fc2: cut(a.fc2, F), act: cut(a.act, F), mo: cut(a.mo, D), morstd: cut(a.morstd, 1)}
}

// logits sets out[rows,Vocab] (float32) = hidden[rows,Dim]·Headᵀ, soft-capped where the
// family caps its logits (gemma2); a 4-bit head through the backend's 4-bit product.
func (m *Model) logits(out, hidden backend.Buf, rows int) error {
	c := &m.Config
	var err error
	if m.q4Ops() {
		err = m.HeadQ.MulT(m.b, out, hidden, rows)
	} else {
		var head backend.Buf
		if head, err = m.headBuf(); err != nil {
			return err
		}
		err = m.b.Logits(out, hidden, head, rows, c.Dim, c.Vocab)
	}
	if err == nil && c.FinalSoftcap > 0 {
		err = m.b.SoftcapForward(out, out, rows*c.Vocab, float32(c.FinalSoftcap))
	}
	return err
}

// Forward appends tokens[i] to sequence i of the cache (len(tokens) ≤ c.Batch; an empty
// entry leaves its sequence alone) and returns logits. With lastOnly the result is
// [len(tokens),Vocab]: row i holds the logits after the last new token of sequence i
// (zeros for sequences without new tokens). Otherwise it is [Σ len(tokens[i]),Vocab], one
// row per new token in order. The slice is reused by the next call. The logits cross to
// the host: generation keeps them on the backend (see Generate).
func (m *Model) Forward(c *Cache, tokens [][]int, lastOnly bool, ad Adapters) ([]float32, error) {
	V := m.Config.Vocab
	lg, p, err := m.forward(c, tokens, lastOnly, ad)
	if err != nil {
		return nil, err
	}
	if p.rows == 0 && !lastOnly {
		return nil, nil
	}
	s := &m.scratch
	n := len(tokens) * V
	if !lastOnly {
		n = p.rows * V
	}
	if cap(s.host) < n {
		s.host = make([]float32, n)
	}
	out := s.host[:n]
	if !lastOnly {
		return out, m.b.Download(out, lg)
	}
	clear(out)
	for i, r := range p.runs {
		if err := m.b.Download(out[r.seq*V:(r.seq+1)*V], lg.Slice(i*V, V)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// forward is Forward leaving the logits on the backend: with lastOnly one row per run of
// the pass (in the order of p.runs), else one per row.
func (m *Model) forward(c *Cache, tokens [][]int, lastOnly bool, ad Adapters) (backend.Buf, *pass, error) {
	if len(tokens) > c.Batch {
		return backend.Buf{}, nil, fmt.Errorf("forward: %d sequences for a cache of %d", len(tokens), c.Batch)
	}
	for i, t := range tokens {
		if c.Len[i]+len(t) > c.Capacity {
			return backend.Buf{}, nil, fmt.Errorf("forward: sequence %d would hold %d tokens, cache capacity %d", i, c.Len[i]+len(t), c.Capacity)
		}
	}
	p, err := m.newPass(tokens, func(i int) int { return c.Len[i] }, ad)
	if err != nil {
		return backend.Buf{}, nil, fmt.Errorf("forward: %w", err)
	}
	if p.rows == 0 {
		return backend.Buf{}, p, nil
	}
	b := m.Backend()
	if err := c.alloc(b); err != nil {
		return backend.Buf{}, nil, fmt.Errorf("forward: %w", err)
	}
	p.cache = c
	hidden, err := m.inference(p)
	if err != nil {
		return backend.Buf{}, nil, fmt.Errorf("forward: %w", err)
	}
	for _, r := range p.runs {
		c.Len[r.seq] += r.n
	}
	V, D, s := m.Config.Vocab, m.Config.Dim, &m.scratch
	rows := p.rows
	if lastOnly {
		rows = len(p.runs)
		src := make([]int64, len(p.runs))
		for i, r := range p.runs {
			src[i] = int64(r.row + r.n - 1)
		}
		last, err := m.scratchBuf(&s.last, rows*D, hidden.DType())
		if err == nil {
			err = b.CopyRows(last, nil, D, hidden, src, D, rows, D)
		}
		if err != nil {
			return backend.Buf{}, nil, fmt.Errorf("forward: %w", err)
		}
		hidden = last
	}
	lg, err := m.scratchBuf(&s.logits, rows*V, backend.F32)
	if err == nil {
		err = m.logits(lg, hidden, rows)
	}
	if err != nil {
		return backend.Buf{}, nil, fmt.Errorf("forward: %w", err)
	}
	return lg, p, nil
}

// headRows is how many rows of logits are formed at a time when the logits are shown to a
// caller: about 4M floats, as the backend's HeadLogProbs.
func (m *Model) headRows() int { return min(1024, max(64, (4<<20)/m.Config.Vocab)) }

// LogProbs returns, for each sequence, out[i] = log p(seq[i] | seq[<i]) for i ≥ 1 under
// softmax(logits/temperature) (temperature 0 means 1); out[0] is 0, as the first token has
// no context. Sequences run packed, without a cache, at most maxPassRows rows at a time.
func (m *Model) LogProbs(seqs [][]int, temperature float32, ad Adapters) ([][]float32, error) {
	return m.LogProbsSeeing(seqs, temperature, ad, nil)
}

// LogProbsSeeing is LogProbs that also shows see the raw logits (before the temperature) that
// predict token i+1 of sequence s, for every i: one pass gives both. The slice is reused.
func (m *Model) LogProbsSeeing(seqs [][]int, temperature float32, ad Adapters, see func(s, i int, logits []float32)) ([][]float32, error) {
	invT := invTemperature(temperature)
	out := make([][]float32, len(seqs))
	for i := range seqs {
		out[i] = make([]float32, len(seqs[i]))
	}
	m.Backend()
	for lo := 0; lo < len(seqs); {
		hi, rows := lo, 0
		for hi < len(seqs) && (hi == lo || rows+len(seqs[hi]) <= maxPassRows) {
			rows += len(seqs[hi])
			hi++
		}
		group := seqs[lo:hi]
		p, err := m.newPass(group, func(int) int { return 0 }, ad)
		if err != nil {
			return nil, fmt.Errorf("log-probs: %w", err)
		}
		if p.rows > 0 {
			hidden, err := m.inference(p)
			if err != nil {
				return nil, fmt.Errorf("log-probs: %w", err)
			}
			var seeRow func(row int, logits []float32)
			if see != nil {
				k := 0 // rows come in order: the run holding row is k or later
				seeRow = func(row int, logits []float32) {
					for row >= p.runs[k].row+p.runs[k].n {
						k++
					}
					see(lo+p.runs[k].seq, row-p.runs[k].row, logits)
				}
			}
			logp := make([]float32, p.rows)
			if err := m.headLogProbs(logp, nil, hidden, targetsOf(p, group), p.rows, invT, seeRow); err != nil {
				return nil, fmt.Errorf("log-probs: %w", err)
			}
			for _, r := range p.runs {
				copy(out[lo+r.seq][1:], logp[r.row:r.row+r.n-1])
			}
		}
		lo = hi
	}
	return out, nil
}

// maxPassRows bounds the rows of one inference pass of LogProbs and of Generate's
// prefill (a variable so that tests can make the grouping split).
var maxPassRows = 4096

// targetsOf gives each row the next token of its sequence, −1 for the last row.
func targetsOf(p *pass, seqs [][]int) []int32 {
	t := make([]int32, p.rows)
	for _, r := range p.runs {
		for j := 0; j < r.n; j++ {
			if j+1 < r.n {
				t[r.row+j] = int32(seqs[r.seq][j+1])
			} else {
				t[r.row+j] = -1
			}
		}
	}
	return t
}

// headLogProbs computes on the host logp (and ent, when not nil) of the targets from the
// final hidden states on the backend: the backend's chunked HeadLogProbs, or, when see is
// set or the head is 4-bit, logits formed headRows rows at a time (each row shown to see
// first) before LogProbForward.
func (m *Model) headLogProbs(logp, ent []float32, hidden backend.Buf, targets []int32, rows int, invT float32, see func(row int, logits []float32)) error {
	b, V, D, s := m.b, m.Config.Vocab, m.Config.Dim, &m.scratch
	var head backend.Buf
	var err error
	if !m.q4Ops() {
		if head, err = m.headBuf(); err != nil {
			return err
		}
	}
	tb, err := b.Place(targets, backend.I32)
	if err != nil {
		return err
	}
	defer b.Free(tb)
	n := rows
	if ent != nil {
		n = 2 * rows
	}
	out, err := m.scratchBuf(&s.logp, n, backend.F32)
	if err != nil {
		return err
	}
	lp := out.Slice(0, rows)
	var eb backend.Buf
	if ent != nil {
		eb = out.Slice(rows, rows)
	}
	if see == nil && !m.q4Ops() {
		err = b.HeadLogProbs(lp, eb, hidden, head, tb, rows, D, V, invT, float32(m.Config.FinalSoftcap))
	} else {
		chunk := m.headRows()
		var lg backend.Buf
		if lg, err = m.scratchBuf(&s.logits, min(rows, chunk)*V, backend.F32); err != nil {
			return err
		}
		var host []float32
		if see != nil {
			host = make([]float32, min(rows, chunk)*V)
		}
		for r0 := 0; r0 < rows && err == nil; r0 += chunk {
			n := min(chunk, rows-r0)
			if err = m.logits(lg, hidden.Slice(r0*D, n*D), n); err != nil {
				break
			}
			if see != nil {
				if err = b.Download(host[:n*V], lg.Slice(0, n*V)); err != nil {
					break
				}
				for j := 0; j < n; j++ {
					see(r0+j, host[j*V:(j+1)*V])
				}
			}
			var e backend.Buf
			if ent != nil {
				e = eb.Slice(r0, n)
			}
			err = b.LogProbForward(lp.Slice(r0, n), e, lg, tb.Slice(r0, n), n, V, invT)
		}
	}
	if err != nil {
		return err
	}
	if err := b.Download(logp, lp); err != nil {
		return err
	}
	if ent != nil {
		return b.Download(ent, eb)
	}
	return nil
}

// invTemperature is 1/T, with T = 0 (greedy) scoring under T = 1.
func invTemperature(t float32) float32 {
	if t <= 0 {
		return 1
	}
	return 1 / t
}

func maxPosOf(p *pass) int {
	n := p.maxPos
	for _, r := range p.runs {
		n = max(n, r.pos+r.n)
	}
	return n
}
