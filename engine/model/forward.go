package model

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

// acts are one block's activations over the rows of a pass. Inference shares one set
// across blocks; a training tape keeps one per block for the backward.
type acts struct {
	in           backend.Buf // block input, the residual stream [rows,Dim]
	n1           backend.Buf // first norm's output [rows,Dim]
	mean1, rstd1 backend.Buf // its statistics [rows] (mean: LayerNorm only)
	qkv          backend.Buf // gpt2's fused projection [rows,3·Dim]
	q, k, v      backend.Buf // [rows,QDim], [rows,KVDim] ×2, after RoPE
	att          backend.Buf // attention output [rows,QDim]
	mid          backend.Buf // residual stream after attention [rows,Dim]
	n2           backend.Buf // second norm's output
	mean2, rstd2 backend.Buf
	fc1          backend.Buf // gate (llama) or c_fc (gpt2) output [rows,Hidden]
	fc2          backend.Buf // up (llama) [rows,Hidden]
	act          backend.Buf // MLP activation, the down projection's input [rows,Hidden]
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
	a.n1 = ar.take(kAct, rows*D)
	a.rstd1 = ar.take(kF32, rows)
	if gpt2 {
		a.mean1 = ar.take(kF32, rows)
		a.qkv = ar.take(kAct, rows*3*D)
	}
	a.q = ar.take(kAct, rows*c.QDim())
	a.k = ar.take(kAct, rows*c.KVDim())
	a.v = ar.take(kAct, rows*c.KVDim())
	a.att = ar.take(kAct, rows*c.QDim())
	a.mid = ar.take(kStream, rows*D)
	a.n2 = ar.take(kAct, rows*D)
	a.rstd2 = ar.take(kF32, rows)
	if gpt2 {
		a.mean2 = ar.take(kF32, rows)
	} else {
		a.fc2 = ar.take(kAct, rows*F)
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
	host   []float32   // logits returned by Forward
}

// free releases the scratch memory.
func (s *scratch) free(b backend.Backend) {
	for _, x := range append(s.mem[:], s.logits, s.last, s.logp) {
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
	D := m.Config.Dim
	carve := func(ar *arena) {
		s.x, s.tmp, s.hidden = ar.take(kStream, rows*D), ar.take(kAct, rows*D), ar.take(kAct, rows*D)
		s.fmean, s.frstd = ar.take(kF32, rows), ar.take(kF32, rows)
		s.a = m.carveActs(ar, rows, false)
	}
	var count arena
	carve(&count)
	ar, err := grow(m.b, &s.mem, &count)
	if err != nil {
		return nil, err
	}
	carve(ar)
	s.rows = rows
	return s, nil
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
}

// newPass packs the token lists: tokens[i] continues sequence i from position start(i).
func (m *Model) newPass(tokens [][]int, start func(i int) int, ad Adapters) (*pass, error) {
	p := &pass{ad: ad}
	for i, toks := range tokens {
		if len(toks) == 0 {
			continue
		}
		p0 := start(i)
		if end := p0 + len(toks); end > m.Config.MaxPos {
			return nil, fmt.Errorf("sequence %d: %d tokens exceed the model's context of %d", i, end, m.Config.MaxPos)
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

func (m *Model) attention() backend.Attention {
	c := &m.Config
	return backend.Attention{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Window: c.Window}
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
	wte, err := m.Buf(m.Embed)
	if err != nil {
		return backend.Buf{}, err
	}
	wpe, err := m.bufOf(m.PosEmb)
	if err != nil {
		return backend.Buf{}, err
	}
	var pos backend.Buf
	if !wpe.Nil() {
		pos = p.posBuf
	}
	if err := m.b.EmbeddingForward(actsOf(0).in, p.idsBuf, pos, wte, wpe, c.Dim); err != nil {
		return backend.Buf{}, err
	}
	var rope *backend.RoPETable
	if c.Family() == Llama {
		if rope, err = m.ropeTable(maxPosOf(p)); err != nil {
			return backend.Buf{}, err
		}
	}
	att := m.attention()
	for l := range m.Layers {
		if err := m.blockForward(p, l, actsOf(l), out(l), tmp, rope, att); err != nil {
			return backend.Buf{}, fmt.Errorf("block %d: %w", l, err)
		}
	}
	return out(len(m.Layers) - 1), nil
}

// blockForward is one transformer block: out = mid + MLP(norm2(mid)),
// mid = in + Attention(norm1(in)).
func (m *Model) blockForward(p *pass, l int, a *acts, out, tmp backend.Buf, rope *backend.RoPETable, att backend.Attention) error {
	c, L, b := &m.Config, &m.Layers[l], m.b
	rows, D, F := p.rows, c.Dim, c.Hidden
	ad, train := p.ad, p.train
	err := m.norm(L.Norm1, a.n1, a.mean1, a.rstd1, a.in, rows)
	if c.Family() == GPT2 {
		err = first(err,
			func() error { return m.linearForward(L.QKV, a.qkv, a.n1, rows, train, ad) },
			func() error { return splitQKV(b, a.q, a.k, a.v, a.qkv, rows, D) })
	} else {
		err = first(err,
			func() error { return m.linearForward(L.Q, a.q, a.n1, rows, train, ad) },
			func() error { return m.linearForward(L.K, a.k, a.n1, rows, train, ad) },
			func() error { return m.linearForward(L.V, a.v, a.n1, rows, train, ad) },
			func() error { return b.RoPEForward(a.q, p.posBuf, c.Heads, rope) },
			func() error { return b.RoPEForward(a.k, p.posBuf, c.KVHeads, rope) })
	}
	if err != nil {
		return err
	}
	spans, err := m.spans(p, l, a)
	if err != nil {
		return err
	}
	err = first(b.AttentionForward(a.att, backend.Buf{}, a.q, spans, att),
		func() error { return m.linearForward(L.O, tmp, a.att, rows, train, ad) },
		func() error { return b.ResidualForward(a.mid, a.in, tmp, rows*D) },
		func() error { return m.norm(L.Norm2, a.n2, a.mean2, a.rstd2, a.mid, rows) })
	if c.Family() == GPT2 {
		err = first(err,
			func() error { return m.linearForward(L.Up, a.fc1, a.n2, rows, train, ad) },
			func() error { return b.GELUForward(a.act, a.fc1, rows*F) })
	} else {
		err = first(err,
			func() error { return m.linearForward(L.Gate, a.fc1, a.n2, rows, train, ad) },
			func() error { return m.linearForward(L.Up, a.fc2, a.n2, rows, train, ad) },
			func() error { return b.SwiGLUForward(a.act, a.fc1, a.fc2, rows*F) })
	}
	return first(err,
		func() error { return m.linearForward(L.Down, tmp, a.act, rows, train, ad) },
		func() error { return b.ResidualForward(out, a.mid, tmp, rows*D) })
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

// norm applies a LayerNorm (gpt2) or RMSNorm (llama).
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
	return m.b.RMSNormForward(out, rstd, in, w, rows, m.Config.Dim, m.Config.NormEps, 0)
}

// splitQKV copies the fused [rows,3·D] projection into q, k and v.
func splitQKV(b backend.Backend, q, k, v, qkv backend.Buf, rows, d int) error {
	return first(b.Copy2D(q, d, qkv, 3*d, rows, d),
		func() error { return b.Copy2D(k, d, qkv.From(d), 3*d, rows, d) },
		func() error { return b.Copy2D(v, d, qkv.From(2*d), 3*d, rows, d) })
}

// inference runs a pass with the shared scratch buffers and returns the final hidden
// states [rows,Dim].
func (m *Model) inference(p *pass) (backend.Buf, error) {
	s, err := m.scratchFor(p.rows)
	if err != nil {
		return backend.Buf{}, err
	}
	if err := p.place(m.b); err != nil {
		return backend.Buf{}, err
	}
	defer p.release(m.b)
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
		qkv: cut(a.qkv, 3*D), q: cut(a.q, c.QDim()), k: cut(a.k, c.KVDim()), v: cut(a.v, c.KVDim()),
		att: cut(a.att, c.QDim()), mid: cut(a.mid, D), n2: cut(a.n2, D), mean2: cut(a.mean2, 1),
		rstd2: cut(a.rstd2, 1), fc1: cut(a.fc1, F), fc2: cut(a.fc2, F), act: cut(a.act, F)}
}

// logits sets out[rows,Vocab] (float32) = hidden[rows,Dim]·Headᵀ.
func (m *Model) logits(out, hidden backend.Buf, rows int) error {
	head, err := m.Buf(m.Head)
	if err != nil {
		return err
	}
	return m.b.Logits(out, hidden, head, rows, m.Config.Dim, m.Config.Vocab)
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
// set, logits formed headRows rows at a time and each row shown to see first.
func (m *Model) headLogProbs(logp, ent []float32, hidden backend.Buf, targets []int32, rows int, invT float32, see func(row int, logits []float32)) error {
	b, V, D, s := m.b, m.Config.Vocab, m.Config.Dim, &m.scratch
	head, err := m.Buf(m.Head)
	if err != nil {
		return err
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
	if see == nil {
		err = b.HeadLogProbs(lp, eb, hidden, head, tb, rows, D, V, invT, 0)
	} else {
		chunk := m.headRows()
		var lg backend.Buf
		if lg, err = m.scratchBuf(&s.logits, min(rows, chunk)*V, backend.F32); err != nil {
			return err
		}
		host := make([]float32, min(rows, chunk)*V)
		for r0 := 0; r0 < rows && err == nil; r0 += chunk {
			n := min(chunk, rows-r0)
			if err = b.Logits(lg, hidden.Slice(r0*D, n*D), head, n, D, V); err != nil {
				break
			}
			if err = b.Download(host[:n*V], lg.Slice(0, n*V)); err != nil {
				break
			}
			for j := 0; j < n; j++ {
				see(r0+j, host[j*V:(j+1)*V])
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
	n := 0
	for _, r := range p.runs {
		n = max(n, r.pos+r.n)
	}
	return n
}
