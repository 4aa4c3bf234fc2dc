package model

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend/cpu"
)

// acts are one block's activations over the rows of a pass. Inference shares one set
// across blocks; a training tape keeps one per block for the backward.
type acts struct {
	in           []float32 // block input, the residual stream [rows,Dim]
	n1           []float32 // first norm's output [rows,Dim]
	mean1, rstd1 []float32 // its statistics [rows] (mean: LayerNorm only)
	qkv          []float32 // gpt2's fused projection [rows,3·Dim]
	q, k, v      []float32 // [rows,QDim], [rows,KVDim] ×2, after RoPE
	att          []float32 // attention output [rows,QDim]
	mid          []float32 // residual stream after attention [rows,Dim]
	n2           []float32 // second norm's output
	mean2, rstd2 []float32
	fc1          []float32 // gate (llama) or c_fc (gpt2) output [rows,Hidden]
	fc2          []float32 // up (llama) [rows,Hidden]
	act          []float32 // MLP activation, the down projection's input [rows,Hidden]
}

// arena carves slices out of one allocation; with a nil buffer it only counts.
type arena struct {
	buf []float32
	off int
}

func (a *arena) take(n int) []float32 {
	if n == 0 {
		return nil
	}
	a.off += n
	if a.buf == nil {
		return nil
	}
	return a.buf[a.off-n : a.off : a.off]
}

// carveActs lays out a block's activations for rows rows.
func (m *Model) carveActs(ar *arena, rows int, withIn bool) acts {
	c := &m.Config
	D, F, gpt2 := c.Dim, c.Hidden, c.Family() == GPT2
	var a acts
	if withIn {
		a.in = ar.take(rows * D)
	}
	a.n1 = ar.take(rows * D)
	a.rstd1 = ar.take(rows)
	if gpt2 {
		a.mean1 = ar.take(rows)
		a.qkv = ar.take(rows * 3 * D)
	}
	a.q = ar.take(rows * c.QDim())
	a.k = ar.take(rows * c.KVDim())
	a.v = ar.take(rows * c.KVDim())
	a.att = ar.take(rows * c.QDim())
	a.mid = ar.take(rows * D)
	a.n2 = ar.take(rows * D)
	a.rstd2 = ar.take(rows)
	if gpt2 {
		a.mean2 = ar.take(rows)
	} else {
		a.fc2 = ar.take(rows * F)
	}
	a.fc1 = ar.take(rows * F)
	a.act = ar.take(rows * F)
	return a
}

// scratch holds the inference buffers, grown to the largest pass seen.
type scratch struct {
	rows   int
	buf    []float32
	x      []float32 // residual stream [rows,Dim]
	tmp    []float32 // projection output before the residual add [rows,Dim]
	hidden []float32 // final norm output [rows,Dim]
	fmean  []float32
	frstd  []float32
	a      acts
	logits []float32
}

func (m *Model) scratchFor(rows int) *scratch {
	s := &m.scratch
	if s.rows >= rows {
		return s
	}
	D := m.Config.Dim
	var ar arena
	carve := func() {
		s.x, s.tmp, s.hidden = ar.take(rows*D), ar.take(rows*D), ar.take(rows*D)
		s.fmean, s.frstd = ar.take(rows), ar.take(rows)
		s.a = m.carveActs(&ar, rows, false)
	}
	carve()
	ar = arena{buf: make([]float32, ar.off)}
	carve()
	s.buf, s.rows = ar.buf, rows
	return s
}

// run is the part of a pass that belongs to one sequence: rows [row, row+n) at positions
// [pos, pos+n) of sequence seq (a cache slot, or an index into the sequences given).
type run struct{ seq, row, n, pos int }

// pass is one forward over packed rows.
type pass struct {
	rows     int
	ids, pos []int32
	runs     []run
	cache    *Cache // nil: every run starts at position 0 and attends within the pass
	train    bool
}

// newPass packs the token lists: tokens[i] continues sequence i from position start(i).
func (m *Model) newPass(tokens [][]int, start func(i int) int) (*pass, error) {
	p := &pass{}
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

func (m *Model) attention() cpu.Attention {
	c := &m.Config
	return cpu.Attention{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Window: c.Window}
}

// spans lists the attention spans of a pass for block l: keys and values come from the
// cache, or from the block's own k and v rows.
func (m *Model) spans(p *pass, l int, a *acts) []cpu.Span {
	kvd := m.Config.KVDim()
	sp := make([]cpu.Span, len(p.runs))
	for i, r := range p.runs {
		s := cpu.Span{Row: r.row, N: r.n, Pos: r.pos}
		if p.cache != nil {
			k, v := p.cache.slot(l, r.seq)
			copy(k[r.pos*kvd:], a.k[r.row*kvd:(r.row+r.n)*kvd])
			copy(v[r.pos*kvd:], a.v[r.row*kvd:(r.row+r.n)*kvd])
			s.K, s.V = k[:(r.pos+r.n)*kvd], v[:(r.pos+r.n)*kvd]
		} else {
			s.K, s.V = a.k[r.row*kvd:(r.row+r.n)*kvd], a.v[r.row*kvd:(r.row+r.n)*kvd]
		}
		sp[i] = s
	}
	return sp
}

// blocks runs the embedding and every block. actsOf gives block l's activations, whose in
// field holds the block's input; out(l) is where block l writes its output (the next
// block's input, or the final norm's input). It returns the last block's output.
func (m *Model) blocks(p *pass, actsOf func(l int) *acts, out func(l int) []float32, tmp []float32) []float32 {
	c := &m.Config
	var pos []float32
	if m.PosEmb != nil {
		pos = m.PosEmb.Data
	}
	cpu.EmbeddingForward(actsOf(0).in, p.ids, p.pos, m.Embed.Data, pos, c.Dim)
	var rope *cpu.RoPETable
	if c.Family() == Llama {
		maxPos := 0
		for _, r := range p.runs {
			maxPos = max(maxPos, r.pos+r.n)
		}
		rope = m.ropeTable(maxPos)
	}
	att := m.attention()
	for l := range m.Layers {
		a := actsOf(l)
		m.blockForward(p, l, a, out(l), tmp, rope, att)
	}
	return out(len(m.Layers) - 1)
}

// blockForward is one transformer block: out = mid + MLP(norm2(mid)),
// mid = in + Attention(norm1(in)).
func (m *Model) blockForward(p *pass, l int, a *acts, out, tmp []float32, rope *cpu.RoPETable, att cpu.Attention) {
	c, L := &m.Config, &m.Layers[l]
	rows, D, F := p.rows, c.Dim, c.Hidden
	ad := !m.AdaptersOff
	m.norm(L.Norm1, a.n1, a.mean1, a.rstd1, a.in, rows)
	if c.Family() == GPT2 {
		L.QKV.forward(a.qkv, a.n1, rows, p.train, ad)
		splitQKV(a.q, a.k, a.v, a.qkv, rows, D)
	} else {
		L.Q.forward(a.q, a.n1, rows, p.train, ad)
		L.K.forward(a.k, a.n1, rows, p.train, ad)
		L.V.forward(a.v, a.n1, rows, p.train, ad)
		cpu.RoPEForward(a.q, p.pos, c.Heads, rope)
		cpu.RoPEForward(a.k, p.pos, c.KVHeads, rope)
	}
	cpu.AttentionForward(a.att, nil, a.q, m.spans(p, l, a), att)
	L.O.forward(tmp, a.att, rows, p.train, ad)
	cpu.ResidualForward(a.mid, a.in, tmp, rows*D)
	m.norm(L.Norm2, a.n2, a.mean2, a.rstd2, a.mid, rows)
	if c.Family() == GPT2 {
		L.Up.forward(a.fc1, a.n2, rows, p.train, ad)
		cpu.GELUForward(a.act, a.fc1, rows*F)
	} else {
		L.Gate.forward(a.fc1, a.n2, rows, p.train, ad)
		L.Up.forward(a.fc2, a.n2, rows, p.train, ad)
		cpu.SwiGLUForward(a.act, a.fc1, a.fc2, rows*F)
	}
	L.Down.forward(tmp, a.act, rows, p.train, ad)
	cpu.ResidualForward(out, a.mid, tmp, rows*D)
}

// norm applies a LayerNorm (gpt2) or RMSNorm (llama).
func (m *Model) norm(n Norm, out, mean, rstd, in []float32, rows int) {
	if n.B != nil {
		cpu.LayerNormForward(out, mean, rstd, in, n.W.Data, n.B.Data, rows, m.Config.Dim, m.Config.NormEps)
	} else {
		cpu.RMSNormForward(out, rstd, in, n.W.Data, rows, m.Config.Dim, m.Config.NormEps, 0)
	}
}

// splitQKV copies the fused [rows,3·D] projection into q, k and v.
func splitQKV(q, k, v, qkv []float32, rows, d int) {
	cpu.For(rows, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			src := qkv[r*3*d : (r+1)*3*d]
			copy(q[r*d:(r+1)*d], src[:d])
			copy(k[r*d:(r+1)*d], src[d:2*d])
			copy(v[r*d:(r+1)*d], src[2*d:])
		}
	})
}

// inference runs a pass with the shared scratch buffers and returns the final hidden
// states [rows,Dim].
func (m *Model) inference(p *pass) []float32 {
	s := m.scratchFor(p.rows)
	a := s.a
	a.in = s.x[:p.rows*m.Config.Dim]
	resized := sliceActs(a, p.rows, &m.Config)
	x := m.blocks(p, func(int) *acts { return &resized }, func(int) []float32 { return resized.in }, s.tmp)
	m.norm(m.Final, s.hidden, s.fmean, s.frstd, x, p.rows)
	return s.hidden[:p.rows*m.Config.Dim]
}

// sliceActs trims scratch activations to rows (they were sized for the largest pass).
func sliceActs(a acts, rows int, c *Config) acts {
	D, F := c.Dim, c.Hidden
	cut := func(s []float32, w int) []float32 {
		if s == nil {
			return nil
		}
		return s[:rows*w]
	}
	return acts{in: cut(a.in, D), n1: cut(a.n1, D), mean1: cut(a.mean1, 1), rstd1: cut(a.rstd1, 1),
		qkv: cut(a.qkv, 3*D), q: cut(a.q, c.QDim()), k: cut(a.k, c.KVDim()), v: cut(a.v, c.KVDim()),
		att: cut(a.att, c.QDim()), mid: cut(a.mid, D), n2: cut(a.n2, D), mean2: cut(a.mean2, 1),
		rstd2: cut(a.rstd2, 1), fc1: cut(a.fc1, F), fc2: cut(a.fc2, F), act: cut(a.act, F)}
}

// logits sets out[rows,Vocab] = hidden[rows,Dim]·Headᵀ.
func (m *Model) logits(out, hidden []float32, rows int) {
	cpu.MatmulForward(out, hidden, m.Head.Data, nil, rows, m.Config.Dim, m.Config.Vocab)
}

func (m *Model) logitsBuf(n int) []float32 {
	if cap(m.scratch.logits) < n {
		m.scratch.logits = make([]float32, n)
	}
	return m.scratch.logits[:n]
}

// Forward appends tokens[i] to sequence i of the cache (len(tokens) ≤ c.Batch; an empty
// entry leaves its sequence alone) and returns logits. With lastOnly the result is
// [len(tokens),Vocab]: row i holds the logits after the last new token of sequence i
// (zeros for sequences without new tokens). Otherwise it is [Σ len(tokens[i]),Vocab], one
// row per new token in order. The slice is reused by the next call.
func (m *Model) Forward(c *Cache, tokens [][]int, lastOnly bool) ([]float32, error) {
	if len(tokens) > c.Batch {
		return nil, fmt.Errorf("forward: %d sequences for a cache of %d", len(tokens), c.Batch)
	}
	for i, t := range tokens {
		if c.Len[i]+len(t) > c.Capacity {
			return nil, fmt.Errorf("forward: sequence %d would hold %d tokens, cache capacity %d", i, c.Len[i]+len(t), c.Capacity)
		}
	}
	p, err := m.newPass(tokens, func(i int) int { return c.Len[i] })
	if err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	p.cache = c
	V, D := m.Config.Vocab, m.Config.Dim
	if p.rows == 0 {
		if lastOnly {
			out := m.logitsBuf(len(tokens) * V)
			clear(out)
			return out, nil
		}
		return nil, nil
	}
	hidden := m.inference(p)
	for _, r := range p.runs {
		c.Len[r.seq] += r.n
	}
	if !lastOnly {
		out := m.logitsBuf(p.rows * V)
		m.logits(out, hidden, p.rows)
		return out, nil
	}
	last := make([]float32, len(p.runs)*D)
	for i, r := range p.runs {
		copy(last[i*D:(i+1)*D], hidden[(r.row+r.n-1)*D:(r.row+r.n)*D])
	}
	packed := make([]float32, len(p.runs)*V)
	m.logits(packed, last, len(p.runs))
	out := m.logitsBuf(len(tokens) * V)
	clear(out)
	for i, r := range p.runs {
		copy(out[r.seq*V:(r.seq+1)*V], packed[i*V:(i+1)*V])
	}
	return out, nil
}

// headRows is how many rows of logits are formed at a time when only log-probabilities
// are wanted: about 4M floats, so memory does not grow with the batch and a large
// vocabulary stays affordable, yet enough rows to amortise the GEMM's packing of the head.
func (m *Model) headRows() int { return min(1024, max(64, (4<<20)/m.Config.Vocab)) }

// LogProbs returns, for each sequence, out[i] = log p(seq[i] | seq[<i]) for i ≥ 1 under
// softmax(logits/temperature) (temperature 0 means 1); out[0] is 0, as the first token has
// no context. Sequences run packed, without a cache, at most maxPassRows rows at a time.
func (m *Model) LogProbs(seqs [][]int, temperature float32) ([][]float32, error) {
	return m.LogProbsSeeing(seqs, temperature, nil)
}

// LogProbsSeeing is LogProbs that also shows see the raw logits (before the temperature) that
// predict token i+1 of sequence s, for every i: one pass gives both. The slice is reused.
func (m *Model) LogProbsSeeing(seqs [][]int, temperature float32, see func(s, i int, logits []float32)) ([][]float32, error) {
	invT := invTemperature(temperature)
	out := make([][]float32, len(seqs))
	for i := range seqs {
		out[i] = make([]float32, len(seqs[i]))
	}
	for lo := 0; lo < len(seqs); {
		hi, rows := lo, 0
		for hi < len(seqs) && (hi == lo || rows+len(seqs[hi]) <= maxPassRows) {
			rows += len(seqs[hi])
			hi++
		}
		group := seqs[lo:hi]
		p, err := m.newPass(group, func(int) int { return 0 })
		if err != nil {
			return nil, fmt.Errorf("log-probs: %w", err)
		}
		if p.rows > 0 {
			hidden := m.inference(p)
			logp := make([]float32, p.rows)
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
			m.headLogProbs(logp, nil, hidden, targetsOf(p, group), p.rows, invT, seeRow)
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

// headLogProbs computes log-probabilities (and entropies when ent is not nil) of the
// targets, forming logits headRows rows at a time; see, when set, is shown each row's logits
// first.
func (m *Model) headLogProbs(logp, ent, hidden []float32, targets []int32, rows int, invT float32, see func(row int, logits []float32)) {
	V, D := m.Config.Vocab, m.Config.Dim
	chunk := m.headRows()
	buf := m.logitsBuf(min(rows, chunk) * V)
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		m.logits(buf, hidden[r0*D:(r0+n)*D], n)
		if see != nil {
			for j := 0; j < n; j++ {
				see(r0+j, buf[j*V:(j+1)*V])
			}
		}
		var e []float32
		if ent != nil {
			e = ent[r0 : r0+n]
		}
		cpu.LogProbForward(logp[r0:r0+n], e, buf, targets[r0:r0+n], n, V, invT)
	}
}

// invTemperature is 1/T, with T = 0 (greedy) scoring under T = 1.
func invTemperature(t float32) float32 {
	if t <= 0 {
		return 1
	}
	return 1 / t
}
