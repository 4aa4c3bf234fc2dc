package model

import (
	"fmt"
	"math"
	"slices"

	"rlhfstation/engine/backend"
)

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
	warm     bool                     // the step ran once uncaptured: every lazy allocation is made
	lr       *lowRank                 // the model's copies of the adapters' factors
	xa       map[*lrGroup]backend.Buf // each group's x·Aᵀ [rows, width]
	bufs     []backend.Buf
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
	d := &decoder{m: m, c: c, rows: rows, seqs: seqs, o: o, digits: digits, xa: map[*lrGroup]backend.Buf{}, host: make([]int32, out)}
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

// lowRank readies the step's LoRA terms: the model's copies of the factors (made or cast
// again here, before any capture, when an update made them stale) and each group's xa.
func (d *decoder) lowRank(alloc func(backend.DType, int) backend.Buf) error {
	lr, err := d.m.lowRankCopies()
	if err != nil {
		return err
	}
	d.lr = lr
	for _, gs := range lr.groups {
		for _, g := range gs {
			if d.xa[g] = alloc(d.m.b.Precision().Act, d.rows*g.width); d.xa[g].Nil() {
				return fmt.Errorf("out of memory for the adapters' products")
			}
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

// linears is linear for the 4-bit linears ls sharing x, without a residual (a block's q, k
// and v; gate and up): one Q4Linears after the group's x·Aᵀ. It reports false when one of
// them is dense or has an adapter without factors: the caller runs them one by one.
func (d *decoder) linears(ls []*Linear, ys []backend.Buf, x backend.Buf, rows int) (bool, error) {
	m, b := d.m, d.m.b
	outs := make([]backend.Q4Out, len(ls))
	var g *lrGroup
	for i, l := range ls {
		q, ok := l.W.(*Quantized)
		if !ok {
			return false, nil
		}
		var lr *lrLinear
		if d.lr != nil {
			lr = d.lr.lin[l]
		}
		if d.p.ad == AdaptersOn && l.Adapter != nil && lr == nil || lr != nil && g != nil && lr.g != g {
			return false, nil
		}
		h, err := q.handle(b)
		if err != nil {
			return true, err
		}
		outs[i] = backend.Q4Out{W: h, Y: ys[i]}
		if l.bias != nil {
			if outs[i].Bias, err = m.Buf(l.bias); err != nil {
				return true, err
			}
		}
		if lr != nil {
			g = lr.g
			outs[i].B, outs[i].R, outs[i].Off, outs[i].Scale = lr.b, lr.r, lr.off, lr.scale
		}
	}
	var xa backend.Buf
	ld := 0
	if g != nil {
		if !slices.Contains(ls, g.first) {
			return false, nil
		}
		xa, ld = d.xa[g], g.width
		if err := b.GEMM(false, true, rows, g.width, g.first.In, 1, x, g.first.In, g.a, g.first.In, 0, xa, g.width); err != nil {
			return true, err
		}
	}
	return true, backend.SamplingOf(b).Q4Linears(outs, x, xa, ld, rows)
}

// linear is linearForward in the decode step: out = res + x·Wᵀ + bias + s·xa·Bᵀ (res
// optional), one fused op for a 4-bit weight, with the LoRA term from the step's own copies
// (the group's x·Aᵀ computed by its first member). It reports false when it does not apply
// (an adapter without factors): the caller runs the generic path.
func (d *decoder) linear(l *Linear, out, res, x backend.Buf, rows int) (bool, error) {
	m, b := d.m, d.m.b
	var lr *lrLinear
	if d.lr != nil {
		lr = d.lr.lin[l]
	}
	if d.p.ad == AdaptersOn && l.Adapter != nil && lr == nil {
		return false, nil
	}
	var xa, lb backend.Buf
	var r, ld int
	var scale float32
	if lr != nil {
		g, gxa := lr.g, d.xa[lr.g]
		if g.first == l {
			if err := b.GEMM(false, true, rows, g.width, l.In, 1, x, l.In, g.a, l.In, 0, gxa, g.width); err != nil {
				return true, err
			}
		}
		xa, ld, lb, r, scale = gxa.Slice(lr.off, (rows-1)*g.width+lr.r), g.width, lr.b, lr.r, lr.scale
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
		return true, backend.SamplingOf(b).Q4Linear(out, res, x, h, bias, xa, ld, lb, r, scale, rows)
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
