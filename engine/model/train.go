package model

import (
	"fmt"

	"rlhfstation/engine/backend/cpu"
)

// Tape keeps what a training forward computed, for its backward: every block's
// activations over the packed rows of whole sequences (no cache, no padding). Make one
// with NewTape and reuse it across steps: its buffers grow to the largest batch seen.
type Tape struct {
	// LogProbs[s][i] = log p(seqs[s][i] | seqs[s][<i]) under softmax(logits/Temperature);
	// LogProbs[s][0] = 0. Entropy[s][i] is the entropy of that distribution (when asked).
	LogProbs [][]float32
	Entropy  [][]float32

	m       *Model
	seqs    [][]int
	p       *pass
	invT    float32
	targets []int32
	layers  []acts
	final   []float32 // last block's output [rows,Dim]
	hidden  []float32 // final norm output [rows,Dim]
	fmean   []float32
	frstd   []float32
	tmp     []float32 // projection outputs before residual adds [rows,Dim]
	sel     []int32   // rows the LM head ran on
	tsel    []int32   // their targets
	hsel    []float32 // their final hidden states [len(sel),Dim]
	buf     []float32 // the one activation allocation
	g       grads     // backward scratch
}

// grads is the backward's scratch: one block's worth, reused from the last block down.
type grads struct {
	buf           []float32
	res           []float32 // gradient of the residual stream [rows,Dim]
	hidden        []float32
	n, att        []float32
	q, k, v, qkv  []float32
	fc1, fc2, act []float32
	logits        []float32
	hsel          []float32 // gradient of a chunk of the head's gathered rows
}

// TrainOptions controls ForwardTrain.
type TrainOptions struct {
	Temperature float32 // log-probs under softmax(logits/Temperature); 0 means 1
	Entropy     bool    // also fill Tape.Entropy
	// FirstScored[s], when given, is the first token of sequence s whose log-prob is
	// wanted (a prompt's length, say): the LM head skips the positions before it, whose
	// LogProbs stay 0 and whose dlogp must be 0.
	FirstScored []int
}

// NewTape makes an empty tape for m.
func (m *Model) NewTape() *Tape { return &Tape{m: m} }

// ForwardTrain runs whole sequences (each from position 0), keeping the activations the
// backward needs, and fills t.LogProbs (and t.Entropy). Linears run their adapters in
// training mode (dropout), unless m.AdaptersOff.
func (m *Model) ForwardTrain(t *Tape, seqs [][]int, o TrainOptions) error {
	if t.m != m {
		return fmt.Errorf("train forward: the tape belongs to another model")
	}
	p, err := m.newPass(seqs, func(int) int { return 0 })
	if err != nil {
		return fmt.Errorf("train forward: %w", err)
	}
	p.train = true
	t.seqs, t.p, t.invT = seqs, p, invTemperature(o.Temperature)
	t.carve(p)
	t.targets = targetsOf(p, seqs)
	rows := p.rows
	if rows == 0 {
		t.LogProbs, t.Entropy = make([][]float32, len(seqs)), nil
		return nil
	}
	L := len(m.Layers)
	next := func(l int) []float32 {
		if l+1 < L {
			return t.layers[l+1].in
		}
		return t.final
	}
	x := m.blocks(p, func(l int) *acts { return &t.layers[l] }, next, t.tmp)
	m.norm(m.Final, t.hidden, t.fmean, t.frstd, x, rows)
	if o.FirstScored != nil && len(o.FirstScored) != len(seqs) {
		return fmt.Errorf("train forward: %d FirstScored entries for %d sequences", len(o.FirstScored), len(seqs))
	}
	t.selectRows(o.FirstScored)
	n := len(t.sel)
	logpSel := make([]float32, n)
	var entSel []float32
	if o.Entropy {
		entSel = make([]float32, n)
	}
	m.headLogProbs(logpSel, entSel, t.hsel, t.tsel, n, t.invT, nil)
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
func (t *Tape) selectRows(first []int) {
	D := t.m.Config.Dim
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
	if cap(t.hsel) < len(t.sel)*D {
		t.hsel = make([]float32, len(t.sel)*D)
	}
	t.hsel = t.hsel[:len(t.sel)*D]
	for k, r := range t.sel {
		copy(t.hsel[k*D:(k+1)*D], t.hidden[int(r)*D:(int(r)+1)*D])
	}
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

// carve lays out the tape's buffers for pass p, growing the allocation when needed.
func (t *Tape) carve(p *pass) {
	m := t.m
	D, rows := m.Config.Dim, p.rows
	lay := func(ar *arena) {
		t.layers = t.layers[:0]
		for range m.Layers {
			// no attention probabilities: the backward recomputes them, which costs one
			// GEMM per head instead of a sequence-length-squared buffer per head and block
			t.layers = append(t.layers, m.carveActs(ar, rows, true))
		}
		t.final, t.hidden, t.tmp = ar.take(rows*D), ar.take(rows*D), ar.take(rows*D)
		t.fmean, t.frstd = ar.take(rows), ar.take(rows)
	}
	var count arena
	lay(&count)
	if len(t.buf) < count.off {
		t.buf = make([]float32, count.off)
	}
	lay(&arena{buf: t.buf})
}

// carveGrads lays out the backward scratch.
func (t *Tape) carveGrads() {
	c := &t.m.Config
	rows, D, F := t.p.rows, c.Dim, c.Hidden
	lay := func(ar *arena) {
		g := &t.g
		g.res, g.hidden, g.n = ar.take(rows*D), ar.take(rows*D), ar.take(rows*D)
		g.att, g.q = ar.take(rows*c.QDim()), ar.take(rows*c.QDim())
		g.k, g.v = ar.take(rows*c.KVDim()), ar.take(rows*c.KVDim())
		if c.Family() == GPT2 {
			g.qkv = ar.take(rows * 3 * D)
		} else {
			g.fc2 = ar.take(rows * F)
		}
		g.fc1, g.act = ar.take(rows*F), ar.take(rows*F)
		g.logits = ar.take(min(rows, t.m.headRows()) * c.Vocab)
		g.hsel = ar.take(min(rows, t.m.headRows()) * D)
	}
	var count arena
	lay(&count)
	if len(t.g.buf) < count.off {
		t.g.buf = make([]float32, count.off)
	}
	lay(&arena{buf: t.g.buf})
}

// Backward propagates a loss back through the tape's forward. dlogp[s][i] is the loss's
// derivative with respect to LogProbs[s][i] (0 for tokens outside the loss, and ignored at
// i = 0): −1/N on every target token makes the mean cross-entropy; GRPO passes its
// per-token coefficients. Parameter gradients accumulate into g; with g nil the base is
// frozen and only the adapters accumulate theirs (the input gradients still flow through
// every frozen weight to reach them).
func (m *Model) Backward(t *Tape, dlogp [][]float32, g *Grads) error {
	if t.m != m || t.p == nil {
		return fmt.Errorf("backward: the tape holds no forward of this model")
	}
	if len(dlogp) != len(t.seqs) {
		return fmt.Errorf("backward: %d dlogp rows for %d sequences", len(dlogp), len(t.seqs))
	}
	p := t.p
	rowGrad := make([]float32, p.rows)
	for _, r := range p.runs {
		if len(dlogp[r.seq]) != r.n {
			return fmt.Errorf("backward: sequence %d has %d tokens but %d dlogp values", r.seq, r.n, len(dlogp[r.seq]))
		}
		copy(rowGrad[r.row:r.row+r.n-1], dlogp[r.seq][1:])
	}
	selGrad := make([]float32, len(t.sel))
	for k, r := range t.sel {
		selGrad[k], rowGrad[r] = rowGrad[r], 0
	}
	if !allZero(rowGrad) {
		return fmt.Errorf("backward: dlogp is not zero on a token before FirstScored")
	}
	if p.rows == 0 {
		return nil
	}
	t.carveGrads()
	gr := &t.g
	c := &m.Config
	rows, D, V := p.rows, c.Dim, c.Vocab
	ad := !m.AdaptersOff

	// LM head, logits recomputed a chunk at a time.
	clear(gr.hidden)
	var dHead []float32
	if g != nil {
		dHead = g.Of(m.Head)
	}
	chunk := m.headRows()
	for k0 := 0; k0 < len(t.sel); k0 += chunk {
		n := min(chunk, len(t.sel)-k0)
		if allZero(selGrad[k0 : k0+n]) {
			continue
		}
		h := t.hsel[k0*D : (k0+n)*D]
		logits, dl, dh := m.logitsBuf(n*V), gr.logits[:n*V], gr.hsel[:n*D]
		m.logits(logits, h, n)
		clear(dl)
		clear(dh)
		cpu.LogProbBackward(dl, selGrad[k0:k0+n], logits, t.tsel[k0:k0+n], n, V, t.invT)
		cpu.MatmulBackward(dh, dHead, nil, dl, h, m.Head.Data, n, D, V)
		for k := 0; k < n; k++ {
			r := int(t.sel[k0+k])
			copy(gr.hidden[r*D:(r+1)*D], dh[k*D:(k+1)*D]) // rows are distinct
		}
	}
	clear(gr.res)
	m.normBackward(m.Final, gr.res, gr.hidden, t.final, t.fmean, t.frstd, rows, g)

	att := m.attention()
	for l := len(m.Layers) - 1; l >= 0; l-- {
		m.blockBackward(t, l, att, g, ad)
	}
	if g != nil {
		var dpos []float32
		if m.PosEmb != nil {
			dpos = g.Of(m.PosEmb)
		}
		cpu.EmbeddingBackward(g.Of(m.Embed), dpos, gr.res, p.ids, p.pos, D)
	}
	return nil
}

// blockBackward turns the gradient of block l's output (t.g.res) into the gradient of
// its input, in place, accumulating parameter gradients on the way.
func (m *Model) blockBackward(t *Tape, l int, att cpu.Attention, g *Grads, ad bool) {
	c, L, a, gr, p := &m.Config, &m.Layers[l], &t.layers[l], &t.g, t.p
	rows, D, F := p.rows, c.Dim, c.Hidden
	// out = mid + Down(MLP(norm2(mid)))
	clear(gr.act)
	L.Down.backward(gr.act, gr.res, a.act, rows, g, ad)
	clear(gr.fc1)
	clear(gr.n)
	if c.Family() == GPT2 {
		cpu.GELUBackward(gr.fc1, gr.act, a.fc1, rows*F)
		L.Up.backward(gr.n, gr.fc1, a.n2, rows, g, ad)
	} else {
		clear(gr.fc2)
		cpu.SwiGLUBackward(gr.fc1, gr.fc2, gr.act, a.fc1, a.fc2, rows*F)
		L.Gate.backward(gr.n, gr.fc1, a.n2, rows, g, ad)
		L.Up.backward(gr.n, gr.fc2, a.n2, rows, g, ad)
	}
	m.normBackward(L.Norm2, gr.res, gr.n, a.mid, a.mean2, a.rstd2, rows, g)
	// mid = in + O(Attention(norm1(in)))
	clear(gr.att)
	L.O.backward(gr.att, gr.res, a.att, rows, g, ad)
	clear(gr.q)
	clear(gr.k)
	clear(gr.v)
	kvd := c.KVDim()
	spans := make([]cpu.Span, len(p.runs))
	for i, r := range p.runs {
		lo, hi := r.row*kvd, (r.row+r.n)*kvd
		spans[i] = cpu.Span{Row: r.row, N: r.n, Pos: r.pos, K: a.k[lo:hi], V: a.v[lo:hi], DK: gr.k[lo:hi], DV: gr.v[lo:hi]}
	}
	cpu.AttentionBackward(gr.q, gr.att, nil, a.q, spans, att)
	clear(gr.n)
	if c.Family() == GPT2 {
		mergeQKV(gr.qkv, gr.q, gr.k, gr.v, rows, D)
		L.QKV.backward(gr.n, gr.qkv, a.n1, rows, g, ad)
	} else {
		rope := m.ropeTable(maxPosOf(p))
		cpu.RoPEBackward(gr.q, p.pos, c.Heads, rope)
		cpu.RoPEBackward(gr.k, p.pos, c.KVHeads, rope)
		L.Q.backward(gr.n, gr.q, a.n1, rows, g, ad)
		L.K.backward(gr.n, gr.k, a.n1, rows, g, ad)
		L.V.backward(gr.n, gr.v, a.n1, rows, g, ad)
	}
	m.normBackward(L.Norm1, gr.res, gr.n, a.in, a.mean1, a.rstd1, rows, g)
}

// normBackward adds the norm's input gradient to din and its parameter gradients to g.
func (m *Model) normBackward(n Norm, din, dout, in, mean, rstd []float32, rows int, g *Grads) {
	var dw, db []float32
	if g != nil {
		dw = g.Of(n.W)
		if n.B != nil {
			db = g.Of(n.B)
		}
	}
	if n.B != nil {
		cpu.LayerNormBackward(din, dw, db, dout, in, n.W.Data, mean, rstd, rows, m.Config.Dim)
	} else {
		cpu.RMSNormBackward(din, dw, dout, in, n.W.Data, rstd, rows, m.Config.Dim, 0)
	}
}

// mergeQKV is splitQKV's backward: the three gradients side by side in [rows,3·D].
func mergeQKV(qkv, q, k, v []float32, rows, d int) {
	cpu.For(rows, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dst := qkv[r*3*d : (r+1)*3*d]
			copy(dst[:d], q[r*d:(r+1)*d])
			copy(dst[d:2*d], k[r*d:(r+1)*d])
			copy(dst[2*d:], v[r*d:(r+1)*d])
		}
	})
}

func maxPosOf(p *pass) int {
	n := 0
	for _, r := range p.runs {
		n = max(n, r.pos+r.n)
	}
	return n
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}
