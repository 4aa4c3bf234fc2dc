package model

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// Tape keeps what a training forward computed, for its backward: every block's
// activations over the packed rows of whole sequences (no cache, no padding), on the model's
// backend. Make one with NewTape and reuse it across steps: its buffers grow to the largest
// batch seen.
type Tape struct {
	// LogProbs[s][i] = log p(seqs[s][i] | seqs[s][<i]) under softmax(logits/Temperature);
	// LogProbs[s][0] = 0. Entropy[s][i] is the entropy of that distribution (when asked).
	LogProbs [][]float32
	Entropy  [][]float32
	// EntropyGrad, when the caller sets it before Backward (shaped as dlogp), is the loss's
	// derivative with respect to Entropy (an entropy bonus): it flows back through the head's
	// softmax with the log-probs' own gradient. ForwardTrain clears it.
	EntropyGrad [][]float32
	// DigitLogits[s][j] are the logits of TrainOptions.Digits.IDs (raw: before the
	// temperature) in the distribution that predicts token Digits.At[s][j] of sequence s.
	// DigitGrad, when the caller sets it before Backward (of the same shape), is the loss's
	// derivative with respect to them (digits.go).
	DigitLogits [][][]float32
	DigitGrad   [][][]float32

	m       *Model
	seqs    [][]int
	p       *pass
	ad      Adapters
	invT    float32
	targets []int32
	layers  []acts
	final   backend.Buf // last block's output [rows,Dim]
	hidden  backend.Buf // final norm output [rows,Dim]
	fmean   backend.Buf
	frstd   backend.Buf
	tmp     backend.Buf // projection outputs before residual adds [rows,Dim]
	sel     []int32     // rows the LM head ran on
	tsel    []int32     // their targets
	hsel    backend.Buf // their final hidden states [len(sel),Dim]
	hselMem backend.Buf
	mem     [kinds]backend.Buf // the activation allocations
	xa      [][]backend.Buf    // each block's groups' x·Aᵀ (lowrank.go), kept for the backward
	lr      *lowRank           // the adapters' copies of the forward (nil: none)
	g       grads              // backward scratch
	dig     digitTape
}

// grads is the backward's scratch: one block's worth, reused from the last block down.
type grads struct {
	mem           [kinds]backend.Buf
	cleared       backend.Buf // fc1, fc2, q, k, v (qpre, kpre) side by side: zeroed at once per block
	res           backend.Buf // gradient of the residual stream [rows,Dim]
	hidden        backend.Buf // gradient of the final norm's output
	n, att        backend.Buf
	q, k, v, qkv  backend.Buf
	qpre, kpre    backend.Buf // q and k before their per-head norms (QKNorm)
	o             backend.Buf // a gemma2/3 post-norm's input [rows,Dim]
	fc1, fc2, act backend.Buf
	gu            backend.Buf // phi3's fused gate and up
	logits, dl    backend.Buf // a chunk of the head's logits and their gradient (full-parameter training)
	draw          backend.Buf // that gradient before the logits' soft-capping
	dhsel         backend.Buf // gradient of the head's gathered rows
}

// TrainOptions controls ForwardTrain.
type TrainOptions struct {
	Temperature float32 // log-probs under softmax(logits/Temperature); 0 means 1
	Entropy     bool    // also fill Tape.Entropy
	// FirstScored[s], when given, is the first token of sequence s whose log-prob is
	// wanted (a prompt's length, say): the LM head skips the positions before it, whose
	// LogProbs stay 0 and whose dlogp must be 0.
	FirstScored []int
	// Adapters: AdaptersOn (the zero value) trains the policy, the adapters in training mode
	// (dropout included); AdaptersOff runs the frozen base alone.
	Adapters Adapters
	// Digits, when set, asks for Tape.DigitLogits.
	Digits *DigitQuery
}

// NewTape makes an empty tape for m.
func (m *Model) NewTape() *Tape { return &Tape{m: m} }

// ForwardTrain runs whole sequences (each from position 0), keeping the activations the
// backward needs, and fills t.LogProbs (and t.Entropy).
func (m *Model) ForwardTrain(t *Tape, seqs [][]int, o TrainOptions) error {
	if t.m != m {
		return fmt.Errorf("train forward: the tape belongs to another model")
	}
	b := m.Backend()
	if t.p != nil {
		t.p.release(b)
	}
	p, err := m.newPass(seqs, func(int) int { return 0 }, o.Adapters)
	if err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	p.train = true
	t.seqs, t.p, t.ad, t.invT = seqs, p, o.Adapters, invTemperature(o.Temperature)
	t.DigitLogits, t.DigitGrad, t.dig.at, t.EntropyGrad = nil, nil, nil, nil
	t.targets = targetsOf(p, seqs)
	t.lr = nil
	if o.Adapters == AdaptersOn && m.hasLowRank() {
		if t.lr, err = m.lowRankCopies(); err != nil {
			return fmt.Errorf("train forward: %w", err)
		}
	}
	p.xa = func(layer int, g *lrGroup) (backend.Buf, error) { return t.xa[layer][g.idx], nil }
	rows := p.rows
	if rows == 0 {
		t.LogProbs, t.Entropy = make([][]float32, len(seqs)), nil
		return nil
	}
	if err := t.carve(p); err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	if err := p.place(b); err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	L := len(m.Layers)
	next := func(l int) backend.Buf {
		if l+1 < L {
			return t.layers[l+1].in
		}
		return t.final
	}
	x, err := m.blocks(p, func(l int) *acts { return &t.layers[l] }, next, t.tmp)
	if err == nil {
		err = m.norm(m.Final, t.hidden, t.fmean, t.frstd, x, rows)
	}
	if err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	if o.FirstScored != nil && len(o.FirstScored) != len(seqs) {
		return fmt.Errorf("train forward: %d FirstScored entries for %d sequences", len(o.FirstScored), len(seqs))
	}
	if err := t.selectRows(o.FirstScored); err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	n := len(t.sel)
	logpSel := make([]float32, n)
	var entSel []float32
	if o.Entropy {
		entSel = make([]float32, n)
	}
	if n > 0 {
		if err := m.headLogProbs(logpSel, entSel, t.hsel, t.tsel, n, t.invT, nil); err != nil {
			return fmt.Errorf("train forward: %w", err)
		}
	}
	if o.Digits != nil {
		if err := t.digitForward(o.Digits); err != nil {
			return fmt.Errorf("train forward: %w", err)
		}
	}
	logp := make([]float32, rows)
	var ent []float32
	if o.Entropy {
		ent = make([]float32, rows)
	}
	for k, r := range t.sel {
		logp[r] = logpSel[k]
		if o.Entropy {
			ent[r] = entSel[k]
		}
	}
	t.LogProbs = perToken(p, seqs, logp)
	t.Entropy = nil
	if o.Entropy {
		t.Entropy = perToken(p, seqs, ent)
	}
	return nil
}

// selectRows picks the rows the LM head runs on (those with a target, from
// FirstScored on) and gathers their final hidden states and targets.
func (t *Tape) selectRows(first []int) error {
	m := t.m
	D := m.Config.Dim
	t.sel, t.tsel = t.sel[:0], t.tsel[:0]
	for _, r := range t.p.runs {
		from := 0
		if first != nil {
			from = max(first[r.seq]-1, 0) // row j predicts token j+1
		}
		for j := from; j < r.n-1; j++ {
			t.sel = append(t.sel, int32(r.row+j))
			t.tsel = append(t.tsel, t.targets[r.row+j])
		}
	}
	n := len(t.sel)
	var err error
	if t.hsel, err = m.scratchBuf(&t.hselMem, n*D, t.hidden.DType()); err != nil || n == 0 {
		return err
	}
	return m.b.CopyRows(t.hsel, nil, D, t.hidden, rows64(t.sel), D, n, D)
}

func rows64(x []int32) []int64 {
	out := make([]int64, len(x))
	for i, v := range x {
		out[i] = int64(v)
	}
	return out
}

// perToken turns row values (row j predicts token j+1) into per-token slices.
func perToken(p *pass, seqs [][]int, rowVals []float32) [][]float32 {
	out := make([][]float32, len(seqs))
	for i := range seqs {
		out[i] = make([]float32, len(seqs[i]))
	}
	for _, r := range p.runs {
		copy(out[r.seq][1:], rowVals[r.row:r.row+r.n-1])
	}
	return out
}

// carve lays out the tape's buffers for pass p, growing the allocations when needed.
func (t *Tape) carve(p *pass) error {
	var count arena
	t.lay(&count, p.rows)
	ar, err := grow(t.m.b, &t.mem, &count)
	if err != nil {
		return err
	}
	t.lay(ar, p.rows)
	return nil
}

// lay carves the tape's buffers for rows rows out of ar (FootprintOf counts them too).
func (t *Tape) lay(ar *arena, rows int) {
	m := t.m
	D := m.Config.Dim
	t.layers = t.layers[:0]
	for range m.Layers {
		// no attention probabilities: the backward recomputes them, which costs one
		// GEMM per head instead of a sequence-length-squared buffer per head and block
		t.layers = append(t.layers, m.carveActs(ar, rows, true))
	}
	t.xa = t.xa[:0]
	if t.lr != nil {
		for _, gs := range t.lr.groups {
			var xs []backend.Buf
			for _, g := range gs {
				xs = append(xs, ar.take(kAct, rows*g.width))
			}
			t.xa = append(t.xa, xs)
		}
	}
	t.final, t.hidden, t.tmp = ar.take(kStream, rows*D), ar.take(kAct, rows*D), ar.take(kAct, rows*D)
	t.fmean, t.frstd = ar.take(kF32, rows), ar.take(kF32, rows)
}

// carveGrads lays out the backward scratch.
func (t *Tape) carveGrads() error {
	var count arena
	t.layGrads(&count, t.p.rows)
	ar, err := grow(t.m.b, &t.g.mem, &count)
	if err != nil {
		return err
	}
	t.layGrads(ar, t.p.rows)
	return nil
}

// layGrads carves the backward's scratch for rows rows out of ar.
func (t *Tape) layGrads(ar *arena, rows int) {
	c := &t.m.Config
	D, F := c.Dim, c.Hidden
	chunk := min(len(t.sel), t.m.headRows())
	g := &t.g
	// the gradients the block's ops accumulate into from zero, side by side: one fill a block
	n := rows * (2*F + c.QDim() + 2*c.KVDim())
	if c.QKNorm {
		n += rows * (c.QDim() + c.KVDim())
	}
	g.cleared = ar.take(kAct, n)
	cl := arena{buf: [kinds]backend.Buf{kAct: g.cleared}}
	g.fc1, g.fc2 = cl.take(kAct, rows*F), cl.take(kAct, rows*F)
	g.q, g.k, g.v = cl.take(kAct, rows*c.QDim()), cl.take(kAct, rows*c.KVDim()), cl.take(kAct, rows*c.KVDim())
	if c.QKNorm {
		g.qpre, g.kpre = cl.take(kAct, rows*c.QDim()), cl.take(kAct, rows*c.KVDim())
	}
	// the norms' output gradients in the stream's precision, as their input gradients: the
	// norms' backward then reads them as they are
	g.res, g.hidden, g.n = ar.take(kStream, rows*D), ar.take(kStream, rows*D), ar.take(kStream, rows*D)
	g.att = ar.take(kAct, rows*c.QDim())
	g.qkv = ar.take(kAct, rows*qkvWidth(c))
	if c.Sandwich || c.PostNorm {
		g.o = ar.take(kAct, rows*D)
	}
	if c.Fused {
		g.gu = ar.take(kAct, rows*2*F)
	}
	g.act = ar.take(kAct, rows*F)
	g.logits, g.dl = ar.take(kF32, chunk*c.Vocab), ar.take(kF32, chunk*c.Vocab)
	if c.FinalSoftcap > 0 {
		g.draw = ar.take(kF32, chunk*c.Vocab)
	}
	g.dhsel = ar.take(kStream, len(t.sel)*D)
}

// Backward propagates a loss back through the tape's forward. dlogp[s][i] is the loss's
// derivative with respect to LogProbs[s][i] (0 for tokens outside the loss, and ignored at
// i = 0): −1/N on every target token makes the mean cross-entropy; GRPO passes its
// per-token coefficients. Parameter gradients accumulate into g; with g nil the base is
// frozen and only the adapters (when the forward ran them) accumulate theirs (the input
// gradients still flow through every frozen weight to reach them).
func (m *Model) Backward(t *Tape, dlogp [][]float32, g *Grads) error {
	if t.m != m || t.p == nil {
		return fmt.Errorf("backward: the tape holds no forward of this model")
	}
	if len(dlogp) != len(t.seqs) {
		return fmt.Errorf("backward: %d dlogp rows for %d sequences", len(dlogp), len(t.seqs))
	}
	if err := t.checkDigitGrad(); err != nil {
		return fmt.Errorf("backward: %w", err)
	}
	if t.EntropyGrad != nil && len(t.EntropyGrad) != len(t.seqs) {
		return fmt.Errorf("backward: %d entropy gradient rows for %d sequences", len(t.EntropyGrad), len(t.seqs))
	}
	p := t.p
	selGrad, err := t.selected(dlogp, "dlogp")
	if err != nil {
		return err
	}
	var selEnt []float32
	if t.EntropyGrad != nil {
		if selEnt, err = t.selected(t.EntropyGrad, "entropy gradient"); err != nil {
			return err
		}
	}
	if p.rows == 0 {
		return nil
	}
	if err := m.backward(t, selGrad, selEnt, g); err != nil {
		return fmt.Errorf("backward: %w", err)
	}
	return nil
}

// selected gathers per-token values (row j of a sequence is token j+1's) onto the rows the
// head ran on, refusing a value on a token before FirstScored.
func (t *Tape) selected(perTok [][]float32, what string) ([]float32, error) {
	rowGrad := make([]float32, t.p.rows)
	for _, r := range t.p.runs {
		if len(perTok[r.seq]) != r.n {
			return nil, fmt.Errorf("backward: sequence %d has %d tokens but %d %s values", r.seq, r.n, len(perTok[r.seq]), what)
		}
		copy(rowGrad[r.row:r.row+r.n-1], perTok[r.seq][1:])
	}
	sel := make([]float32, len(t.sel))
	for k, r := range t.sel {
		sel[k], rowGrad[r] = rowGrad[r], 0
	}
	if !allZero(rowGrad) {
		return nil, fmt.Errorf("backward: the %s is not zero on a token before FirstScored", what)
	}
	return sel, nil
}

func (m *Model) backward(t *Tape, selGrad, selEnt []float32, g *Grads) error {
	if err := t.carveGrads(); err != nil {
		return err
	}
	gr, p, b := &t.g, t.p, m.b
	c := &m.Config
	rows, D := p.rows, c.Dim
	if err := m.headBackward(t, selGrad, selEnt, g); err != nil {
		return err
	}
	if err := t.digitBackward(g); err != nil {
		return err
	}
	b.Zero(gr.res)
	if err := m.normBackward(m.Final, gr.res, gr.hidden, t.final, t.fmean, t.frstd, rows, g); err != nil {
		return err
	}
	for l := len(m.Layers) - 1; l >= 0; l-- {
		if err := m.blockBackward(t, l, g); err != nil {
			return fmt.Errorf("block %d: %w", l, err)
		}
	}
	if g == nil {
		return nil
	}
	if c.EmbedScale != 0 {
		if err := b.ScaleAll([]backend.Buf{gr.res}, float32(c.EmbedScale)); err != nil {
			return err
		}
	}
	var dpos, pos backend.Buf
	if m.PosEmb != nil {
		dpos, pos = g.Of(m.PosEmb), p.posBuf
	}
	if m.Embed == nil && dpos.Nil() { // the embedding is the frozen 4-bit head
		return nil
	}
	return b.EmbeddingBackward(g.Of(m.Embed), dpos, gr.res, p.idsBuf, pos, D)
}

// headBackward sets t.g.hidden to the gradient of the final norm's output from the
// log-probs' coefficients and the entropies' (selEnt, nil without an entropy term), and
// accumulates the head's gradient into g: the logits are recomputed a chunk at a time.
func (m *Model) headBackward(t *Tape, selGrad, selEnt []float32, g *Grads) error {
	gr, b := &t.g, m.b
	D, V, n := m.Config.Dim, m.Config.Vocab, len(t.sel)
	b.Zero(gr.hidden)
	if allZero(selEnt) {
		selEnt = nil
	}
	if n == 0 || (allZero(selGrad) && selEnt == nil) {
		return nil
	}
	var head backend.Buf
	var err error
	if !m.q4Ops() {
		if head, err = m.headBuf(); err != nil {
			return err
		}
	}
	sg, err := b.Place(selGrad, backend.F32)
	if err != nil {
		return err
	}
	defer b.Free(sg)
	var se backend.Buf // the entropies' coefficients, or none
	if selEnt != nil {
		if se, err = b.Place(selEnt, backend.F32); err != nil {
			return err
		}
		defer b.Free(se)
	}
	entAt := func(k0, cn int) backend.Buf {
		if se.Nil() {
			return se
		}
		return se.Slice(k0, cn)
	}
	tb, err := b.Place(t.tsel, backend.I32)
	if err != nil {
		return err
	}
	defer b.Free(tb)
	dh := gr.dhsel.Slice(0, n*D)
	b.Zero(dh)
	softcap := float32(m.Config.FinalSoftcap)
	if g == nil && !m.q4Ops() {
		err = b.HeadLogProbsBackward(dh, t.hsel, head, sg, se, tb, n, D, V, t.invT, softcap)
	} else { // full-parameter training, or a 4-bit head (frozen: dhidden += dlogits·W only)
		var dHead backend.Buf
		if g != nil {
			dHead = g.Of(m.Head)
		}
		chunk := m.headRows()
		for k0 := 0; k0 < n && err == nil; k0 += chunk {
			cn := min(chunk, n-k0)
			if allZero(selGrad[k0:k0+cn]) && (selEnt == nil || allZero(selEnt[k0:k0+cn])) {
				continue
			}
			h, lg, dl := t.hsel.Slice(k0*D, cn*D), gr.logits.Slice(0, cn*V), gr.dl.Slice(0, cn*V)
			b.Zero(dl)
			err = first(m.logits(lg, h, cn),
				func() error {
					return b.LogProbBackward(dl, sg.Slice(k0, cn), entAt(k0, cn), lg, tb.Slice(k0, cn), cn, V, t.invT)
				})
			if softcap > 0 { // through the cap: the gradient of the raw logits
				raw := gr.draw.Slice(0, cn*V)
				b.Zero(raw)
				err = first(err, func() error { return b.SoftcapBackward(raw, dl, lg, cn*V, softcap) })
				dl = raw
			}
			err = first(err, func() error {
				if m.q4Ops() {
					return m.HeadQ.MulAcc(b, dh.Slice(k0*D, cn*D), dl, cn)
				}
				return b.MatmulBackward(dh.Slice(k0*D, cn*D), dHead, backend.Buf{}, dl, h, head, cn, D, V)
			})
		}
	}
	if err != nil {
		return err
	}
	return b.CopyRows(gr.hidden, rows64(t.sel), D, dh, nil, D, n, D) // the rows are distinct
}

// blockBackward turns the gradient of block l's output (t.g.res) into the gradient of
// its input, in place, accumulating parameter gradients on the way.
func (m *Model) blockBackward(t *Tape, l int, g *Grads) error {
	c, L, a, gr, p, b := &m.Config, &m.Layers[l], &t.layers[l], &t.g, t.p, m.b
	rows, D, F := p.rows, c.Dim, c.Hidden
	post := c.Sandwich || c.PostNorm
	x1, x2 := a.n1, a.n2 // the inputs of attention and the MLP (olmo2: the stream itself)
	if c.PostNorm {
		x1, x2 = a.in, a.mid
	}
	// out = mid + [PostMLP](Down(MLP(norm2(mid))))
	var err error
	b.Zero(gr.cleared) // fc1, fc2, q, k, v: accumulated into below
	dDown := gr.res    // the gradient of Down's output
	if post {
		b.Zero(gr.o)
		err, dDown = m.normRowsBackward(L.PostMLP, gr.o, gr.res, a.mo, a.morstd, rows, D, g), gr.o
	}
	err = first(err, func() error {
		return m.linearsBackward(t, l, []*Linear{L.Down}, gr.act, false, []backend.Buf{dDown}, a.act, g)
	})
	if c.Family() == GPT2 {
		err = first(err,
			func() error { return b.GELUBackward(gr.fc1, gr.act, a.fc1, rows*F) },
			func() error {
				return m.linearsBackward(t, l, []*Linear{L.Up}, gr.n, false, []backend.Buf{gr.fc1}, x2, g)
			})
	} else {
		switch c.MLP {
		case SwiGLU:
			err = first(err, func() error { return b.SwiGLUBackward(gr.fc1, gr.fc2, gr.act, a.fc1, a.fc2, rows*F) })
		case GeGLU:
			err = first(err, func() error { return b.GeGLUBackward(gr.fc1, gr.fc2, gr.act, a.fc1, a.fc2, rows*F) })
		}
		if L.GateUp != nil {
			err = first(err,
				func() error { return b.Copy2D(gr.gu, 2*F, gr.fc1, F, rows, F) },
				func() error { return b.Copy2D(gr.gu.From(F), 2*F, gr.fc2, F, rows, F) },
				func() error {
					return m.linearsBackward(t, l, []*Linear{L.GateUp}, gr.n, false, []backend.Buf{gr.gu}, x2, g)
				})
		} else {
			err = first(err, func() error {
				return m.linearsBackward(t, l, []*Linear{L.Gate, L.Up}, gr.n, false, []backend.Buf{gr.fc1, gr.fc2}, x2, g)
			})
		}
	}
	err = first(err, func() error { return m.preNormBackward(L.Norm2, gr.res, gr.n, a.mid, a.mean2, a.rstd2, rows, g) })
	if err != nil {
		return err
	}
	// mid = in + [PostAttn](O(Attention(norm1(in))))
	dO := gr.res
	if post {
		b.Zero(gr.o)
		if err := m.normRowsBackward(L.PostAttn, gr.o, gr.res, a.ao, a.aorstd, rows, D, g); err != nil {
			return err
		}
		dO = gr.o
	}
	if err := m.linearsBackward(t, l, []*Linear{L.O}, gr.att, false, []backend.Buf{dO}, a.att, g); err != nil {
		return err
	}
	kvd := c.KVDim()
	spans := make([]backend.Span, len(p.runs))
	for i, r := range p.runs {
		lo, n := r.row*kvd, r.n*kvd
		spans[i] = backend.Span{Row: r.row, N: r.n, Pos: r.pos, K: a.k.Slice(lo, n), V: a.v.Slice(lo, n),
			DK: gr.k.Slice(lo, n), DV: gr.v.Slice(lo, n)}
	}
	if err := b.AttentionBackward(gr.q, gr.att, backend.Buf{}, a.q, spans, m.attention(l)); err != nil {
		return err
	}
	if c.RoPE(l) {
		rope, err := m.ropeTable(maxPosOf(p), l)
		err = first(err,
			func() error { return b.RoPEBackward(gr.q, p.posBuf, c.Heads, rope) },
			func() error { return b.RoPEBackward(gr.k, p.posBuf, c.KVHeads, rope) })
		if err != nil {
			return err
		}
	}
	dq, dk := gr.q, gr.k // gradients of the projections' outputs
	if c.QKNorm {        // qpre and kpre: cleared with the others
		qr, qd, kr, kd := c.qkNormRows(rows)
		err := first(m.normRowsBackward(L.QNorm, gr.qpre, gr.q, a.qpre, a.qrstd, qr, qd, g),
			func() error { return m.normRowsBackward(L.KNorm, gr.kpre, gr.k, a.kpre, a.krstd, kr, kd, g) })
		if err != nil {
			return err
		}
		dq, dk = gr.qpre, gr.kpre
	}
	if L.QKV != nil {
		err = first(mergeQKV(b, gr.qkv, dq, dk, gr.v, rows, c.QDim(), kvd),
			func() error {
				return m.linearsBackward(t, l, []*Linear{L.QKV}, gr.n, false, []backend.Buf{gr.qkv}, x1, g)
			})
	} else {
		err = m.linearsBackward(t, l, []*Linear{L.Q, L.K, L.V}, gr.n, false, []backend.Buf{dq, dk, gr.v}, x1, g)
	}
	return first(err, func() error { return m.preNormBackward(L.Norm1, gr.res, gr.n, a.in, a.mean1, a.rstd1, rows, g) })
}

// preNormBackward adds to din the gradient that reaches a block's input through a pre-norm
// (dout is the gradient of the norm's output), or straight from dout where the block has
// no pre-norms (olmo2).
func (m *Model) preNormBackward(n Norm, din, dout, in, mean, rstd backend.Buf, rows int, g *Grads) error {
	if n.W == nil {
		return m.b.Add(din, dout, 1, rows*m.Config.Dim)
	}
	return m.normBackward(n, din, dout, in, mean, rstd, rows, g)
}

// normBackward adds the norm's input gradient to din and its parameter gradients to g.
func (m *Model) normBackward(n Norm, din, dout, in, mean, rstd backend.Buf, rows int, g *Grads) error {
	if n.B == nil {
		return m.normRowsBackward(n, din, dout, in, rstd, rows, m.Config.Dim, g)
	}
	var dw, db backend.Buf
	if g != nil {
		dw, db = g.Of(n.W), g.Of(n.B)
	}
	w, err := m.Buf(n.W)
	if err != nil {
		return err
	}
	return m.b.LayerNormBackward(din, dw, db, dout, in, w, mean, rstd, rows, m.Config.Dim)
}

// normRowsBackward is normRows' backward: din += the input gradient, g gets the weight's.
func (m *Model) normRowsBackward(n Norm, din, dout, in, rstd backend.Buf, rows, dim int, g *Grads) error {
	var dw backend.Buf
	if g != nil {
		dw = g.Of(n.W)
	}
	w, err := m.Buf(n.W)
	if err != nil {
		return err
	}
	return m.b.RMSNormBackward(din, dw, dout, in, w, rstd, rows, dim, m.Config.NormOffset)
}

// mergeQKV is splitQKV's backward: the three gradients side by side in [rows,qd+2·kd].
func mergeQKV(b backend.Backend, qkv, q, k, v backend.Buf, rows, qd, kd int) error {
	w := qd + 2*kd
	return first(b.Copy2D(qkv, w, q, qd, rows, qd),
		func() error { return b.Copy2D(qkv.From(qd), w, k, kd, rows, kd) },
		func() error { return b.Copy2D(qkv.From(qd+kd), w, v, kd, rows, kd) })
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}
