package model

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

// LowRank is an adapter of the form s·(x·Aᵀ)·Bᵀ (LoRA) whose factors the decode step may
// read: A [R,In] and B [Out,R], float32 on the model's backend. The step keeps copies of
// its own in the backend's activation precision (bf16 on a GPU), so that no product of the
// step rounds a float32 operand on the way.
type LowRank interface {
	Factors() (a, b backend.Buf, r int, scale float32)
}

// decoder is the decode step over fixed buffers: one new token for each of rows sequences
// of a cache, with every input of the step in device memory (the ids it feeds, which the
// step's own sampling overwrites; positions, which it advances; the uniforms, uploaded
// before each step), so that a backend.Capturer records it once and replays it per token.
// A finished sequence keeps its row (padded: its tokens are ignored, its position stays on
// its last slot) until Generate rebuilds the step for fewer rows.
type decoder struct {
	m        *Model
	c        *Cache
	p        *pass
	rows     int
	seqs     []int             // the cache slot of each row
	tok      backend.Buf       // I32 [2·rows (+ 10·rows)]: the sampled ids (the next step's input), their log-probs, the digit probabilities (F32 bits)
	digits   backend.Buf       // the digit tokens (I32 ids, then values), with OnDigits
	pos, seq backend.Buf       // I32 [rows]
	u        backend.Buf       // F64 [rows], the uniforms of the draws
	pen      backend.Penalties // min_p and repetition_penalty, drawn on the device (Seen: its bits)
	logits   backend.Buf       // F32 [rows,Vocab]
	host     []int32
	o        GenerateOptions
	graph    backend.Graph
	warm     bool // the step ran once uncaptured: every lazy allocation is made
	lin      map[*Linear]*lrLinear
	groups   []*lrGroup
	bufs     []backend.Buf
}

// lrGroup is the LoRA down-projections of linears sharing their input (q, k and v; gate and
// up), stacked so that one product gives every x·Aᵀ: xa [rows, width].
type lrGroup struct {
	first *Linear // the member whose forward computes the group's product
	a, xa backend.Buf
	width int
}

// lrLinear is one linear's share: its columns of the group's xa and its B.
type lrLinear struct {
	g     *lrGroup
	off   int
	b     backend.Buf
	r     int
	scale float32
}

// sharedInputs lists block l's linears by shared input: each group's x·Aᵀ is one product.
func sharedInputs(L *Layer) [][]*Linear {
	var gs [][]*Linear
	add := func(ls ...*Linear) {
		var g []*Linear
		for _, l := range ls {
			if l != nil {
				g = append(g, l)
			}
		}
		if len(g) > 0 {
			gs = append(gs, g)
		}
	}
	add(L.Q, L.K, L.V)
	add(L.QKV)
	add(L.O)
	add(L.Gate, L.Up)
	add(L.GateUp)
	add(L.Down)
	return gs
}

// newDecoder readies the step for the sequences seqs of c (row r decodes slot seqs[r]), each
// feeding ids[r] at position c.Len[seqs[r]]; seen(s) lists the tokens sequence s has so far
// (prompt and completion), for the repetition penalty.
func (m *Model) newDecoder(c *Cache, seqs []int, ids []int32, o GenerateOptions, digits backend.Buf, seen func(s int) []int) (*decoder, error) {
	b, rows := m.b, len(seqs)
	out := 2 * rows
	if digits.Len() > 0 {
		out += 10 * rows
	}
	d := &decoder{m: m, c: c, rows: rows, seqs: seqs, o: o, digits: digits, lin: map[*Linear]*lrLinear{}, host: make([]int32, out)}
	alloc := func(dt backend.DType, n int) backend.Buf {
		x, err := b.Alloc(dt, n)
		if err != nil {
			return backend.Buf{}
		}
		d.bufs = append(d.bufs, x)
		return x
	}
	d.tok, d.pos, d.seq = alloc(backend.I32, out), alloc(backend.I32, rows), alloc(backend.I32, rows)
	d.u, d.logits = alloc(backend.F64, rows), alloc(backend.F32, rows*m.Config.Vocab)
	if len(d.bufs) != 5 {
		d.free()
		return nil, fmt.Errorf("decode step: out of memory for %d rows", rows)
	}
	pos, seq := make([]int32, rows), make([]int32, rows)
	for r, s := range seqs {
		pos[r], seq[r] = int32(c.Len[s]), int32(s)
	}
	err := first(b.Upload(d.pos, pos),
		func() error { return b.Upload(d.seq, seq) },
		func() error { return b.Upload(d.tok.Slice(0, rows), ids) },
		func() error { return b.Upload(d.u, make([]float64, rows)) },
		func() error { return d.penalties(alloc, seen) })
	if err == nil && o.Adapters == AdaptersOn {
		err = d.lowRank(alloc)
	}
	if err == nil { // tables sized before any capture: the step must not allocate then
		for l := range m.Layers {
			if m.Config.RoPE(l) {
				if _, err = m.ropeTable(c.Capacity, l); err != nil {
					break
				}
			}
		}
	}
	if err != nil {
		d.free()
		return nil, fmt.Errorf("decode step: %w", err)
	}
	d.p = &pass{rows: rows, idsBuf: d.tok.Slice(0, rows), posBuf: d.pos, cache: c, ad: o.Adapters, dec: d, maxPos: c.Capacity}
	return d, nil
}

// penalties readies min_p and repetition_penalty for the device's draw: with the penalty,
// each row's seen tokens as bits (uploaded once; the draws add theirs on the device).
func (d *decoder) penalties(alloc func(backend.DType, int) backend.Buf, seen func(s int) []int) error {
	d.pen = backend.Penalties{MinP: d.o.MinP, Repetition: d.o.RepetitionPenalty}
	if !d.pen.Penalised() {
		return nil
	}
	w := backend.SeenWords(d.m.Config.Vocab)
	bits := make([]int32, d.rows*w)
	for r, s := range d.seqs {
		for _, t := range seen(s) {
			if t >= 0 && t < d.m.Config.Vocab {
				bits[r*w+t>>5] |= 1 << (t & 31)
			}
		}
	}
	if d.pen.Seen = alloc(backend.I32, len(bits)); d.pen.Seen.Nil() {
		return fmt.Errorf("out of memory for the repetition penalty's bits")
	}
	return d.m.b.Upload(d.pen.Seen, bits)
}

// lowRank makes the step's copies of the LoRA factors, in the activation precision: each
// group's A stacked, each linear's B. Made per Generate, so an optimizer update between
// two rollouts is always seen.
func (d *decoder) lowRank(alloc func(backend.DType, int) backend.Buf) error {
	b, dt := d.m.b, d.m.b.Precision().Act
	for _, L := range d.m.Layers {
		for _, ls := range sharedInputs(&L) {
			g := &lrGroup{}
			var mine []*Linear
			for _, l := range ls {
				if lr, ok := l.Adapter.(LowRank); ok && l.Adapter != nil {
					_, _, r, _ := lr.Factors()
					g.width += r
					mine = append(mine, l)
				}
			}
			if len(mine) == 0 {
				continue
			}
			in := mine[0].In
			g.first, g.a, g.xa = mine[0], alloc(dt, g.width*in), alloc(dt, d.rows*g.width)
			if g.a.Nil() || g.xa.Nil() {
				return fmt.Errorf("out of memory for the adapters' copies")
			}
			off := 0
			for _, l := range mine {
				a, bb, r, s := l.Adapter.(LowRank).Factors()
				x := alloc(dt, bb.Len())
				if x.Nil() {
					return fmt.Errorf("out of memory for the adapters' copies")
				}
				if err := first(b.Cast(g.a.Slice(off*in, r*in), a), func() error { return b.Cast(x, bb) }); err != nil {
					return err
				}
				d.lin[l] = &lrLinear{g: g, off: off, b: x, r: r, scale: s}
				off += r
			}
			d.groups = append(d.groups, g)
		}
	}
	return nil
}

// free releases the step's buffers and graph (not the cache).
func (d *decoder) free() {
	if d.graph != nil {
		d.graph.Close()
		d.graph = nil
	}
	for _, x := range d.bufs {
		d.m.b.Free(x)
	}
	d.bufs = nil
}

// record queues one step: the blocks over the fed ids, the logits, the draws into tok, the
// positions advanced.
func (d *decoder) record() error {
	m, b, rows, o := d.m, d.m.b, d.rows, d.o
	hidden, err := m.inference(d.p)
	if err != nil {
		return err
	}
	return first(m.logits(d.logits, hidden, rows),
		func() error {
			if d.digits.Len() == 0 {
				return nil
			}
			k := d.digits.Len() / 2
			return b.DigitProbs(d.tok.Slice(2*rows, 10*rows).As(backend.F32), d.logits, d.digits.Slice(0, k), d.digits.Slice(k, k), rows, m.Config.Vocab)
		},
		func() error {
			return b.SampleInto(d.tok.Slice(0, rows), d.tok.Slice(rows, rows).As(backend.F32), d.logits, d.u, rows, m.Config.Vocab,
				o.Temperature, o.TopK, o.TopP, d.pen)
		},
		func() error { return b.Advance(d.pos, rows, d.c.Capacity) })
}

// step runs one decode step with the uniforms u (nil: greedy) and returns the rows' tokens,
// log-probs and (with digit tokens) digit probabilities [rows·10], all from one download
// (views of buffers reused by the next step). The first step runs
// uncaptured (it makes every lazy allocation); later ones replay the step's graph when the
// backend can capture one and o.Eager is not set.
func (d *decoder) step(u []float64) ([]int32, []float32, []float32, error) {
	b := d.m.b
	if u != nil {
		if err := b.Upload(d.u, u); err != nil {
			return nil, nil, nil, err
		}
	}
	capt, ok := b.(backend.Capturer)
	switch {
	case d.graph != nil:
		if err := d.graph.Launch(); err != nil {
			return nil, nil, nil, err
		}
	case ok && d.warm && !d.o.Eager:
		g, err := capt.Capture(d.record)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("capturing the decode step: %w", err)
		}
		d.graph = g
		if err := g.Launch(); err != nil {
			return nil, nil, nil, err
		}
	default:
		if err := d.record(); err != nil {
			return nil, nil, nil, err
		}
		d.warm = true
	}
	if err := b.Download(d.host, d.tok); err != nil {
		return nil, nil, nil, err
	}
	f := make([]float32, len(d.host)-d.rows)
	for i := range f {
		f[i] = math.Float32frombits(uint32(d.host[d.rows+i]))
	}
	var probs []float32
	if len(f) > d.rows {
		probs = f[d.rows:]
	}
	return d.host[:d.rows], f[:d.rows], probs, nil
}

// linear is linearForward in the decode step: out = res + x·Wᵀ + bias + s·xa·Bᵀ (res
// optional), one fused op for a 4-bit weight, with the LoRA term from the step's own copies
// (the group's x·Aᵀ computed by its first member). It reports false when it does not apply
// (an adapter without factors): the caller runs the generic path.
func (d *decoder) linear(l *Linear, out, res, x backend.Buf, rows int) (bool, error) {
	m, b := d.m, d.m.b
	lr := d.lin[l]
	if d.p.ad == AdaptersOn && l.Adapter != nil && lr == nil {
		return false, nil
	}
	var xa, lb backend.Buf
	var r, ld int
	var scale float32
	if lr != nil {
		g := lr.g
		if g.first == l {
			if err := b.GEMM(false, true, rows, g.width, l.In, 1, x, l.In, g.a, l.In, 0, g.xa, g.width); err != nil {
				return true, err
			}
		}
		xa, ld, lb, r, scale = g.xa.Slice(lr.off, (rows-1)*g.width+lr.r), g.width, lr.b, lr.r, lr.scale
	}
	var bias backend.Buf
	if l.bias != nil {
		var err error
		if bias, err = m.Buf(l.bias); err != nil {
			return true, err
		}
	}
	if q, ok := l.W.(*Quantized); ok {
		h, err := q.handle(b)
		if err != nil {
			return true, err
		}
		return true, b.Q4Linear(out, res, x, h, bias, xa, ld, lb, r, scale, rows)
	}
	// A dense weight (never given res: see linearAdd): its product, the bias, the LoRA term
	// from the copies.
	y := out
	err := first(l.W.MulT(b, y, x, rows),
		func() error {
			if bias.Nil() {
				return nil
			}
			return b.BiasForward(y, bias, rows, l.Out)
		},
		func() error {
			if lr == nil {
				return nil
			}
			return b.GEMM(false, true, rows, l.Out, r, scale, xa, ld, lb, r, 1, y, l.Out)
		})
	return true, err
}
