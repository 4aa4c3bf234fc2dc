package model

import (
	"fmt"

	"rlhfstation/engine/backend"
)

// DigitQuery asks ForwardTrain for the logits of the tokens IDs (distinct) in the
// distributions that predict the tokens At[s] of each sequence s (distinct token indices, at
// least 1 and at or after FirstScored[s]): NTL as an auxiliary loss reads the policy's digit
// distributions there and sends its gradient back through Tape.DigitGrad.
type DigitQuery struct {
	IDs []int
	At  [][]int
}

// digitTape is what a digit query's backward needs, on the backend: only the queried rows and
// the digit tokens' rows of the head are multiplied, never the whole vocabulary.
type digitTape struct {
	at    [][2]int // (sequence, slot in At[s]) of each queried row, in order
	rows  []int64  // their rows among the LM head's (indices into Tape.sel)
	ids   []int64
	h     backend.Buf // the rows' final hidden states [nd,D]
	w     backend.Buf // the digit tokens' head rows [K,D]
	z     backend.Buf // their logits [nd,K] (after the final soft-cap, when the model has one)
	scrap [5]backend.Buf
}

// digitForward fills Tape.DigitLogits for q from the LM head's gathered rows (t.hsel).
func (t *Tape) digitForward(q *DigitQuery) error {
	m, d := t.m, &t.dig
	b, D, K := m.b, m.Config.Dim, len(q.IDs)
	if len(q.At) != len(t.seqs) {
		return fmt.Errorf("%d digit query rows for %d sequences", len(q.At), len(t.seqs))
	}
	d.ids = d.ids[:0]
	seen := map[int]bool{}
	for _, id := range q.IDs {
		if id < 0 || id >= m.Config.Vocab || seen[id] {
			return fmt.Errorf("digit token %d is outside the vocabulary or given twice", id)
		}
		seen[id] = true
		d.ids = append(d.ids, int64(id))
	}
	index := map[int32]int{} // row → index in sel
	for k, r := range t.sel {
		index[r] = k
	}
	start := map[int]int{} // sequence → its first row
	for _, r := range t.p.runs {
		start[r.seq] = r.row
	}
	d.at, d.rows = d.at[:0], d.rows[:0]
	t.DigitLogits = make([][][]float32, len(t.seqs))
	for s, at := range q.At {
		t.DigitLogits[s] = make([][]float32, len(at))
		dup := map[int]bool{}
		for j, i := range at {
			k, ok := index[int32(start[s]+i-1)] // row i−1 predicts token i
			if i < 1 || i >= len(t.seqs[s]) || !ok || dup[i] {
				return fmt.Errorf("sequence %d: no LM head row predicts token %d (or it is asked twice)", s, i)
			}
			dup[i] = true
			d.at, d.rows = append(d.at, [2]int{s, j}), append(d.rows, int64(k))
		}
	}
	nd := len(d.at)
	if nd == 0 || K == 0 {
		return nil
	}
	var err error
	if d.h, err = m.scratchBuf(&d.scrap[0], nd*D, t.hsel.DType()); err != nil {
		return err
	}
	if d.w, err = m.scratchBuf(&d.scrap[1], K*D, m.headType()); err != nil {
		return err
	}
	if d.z, err = m.scratchBuf(&d.scrap[2], nd*K, backend.F32); err != nil {
		return err
	}
	err = first(b.CopyRows(d.h, nil, D, t.hsel, d.rows, D, nd, D),
		func() error { return m.headRowsOf(d.w, d.ids) },
		func() error { return b.Logits(d.z, d.h, d.w, nd, D, K) },
		func() error {
			// The model's logits, as its head forms them (gemma2's final soft-cap included).
			if c := float32(m.Config.FinalSoftcap); c > 0 {
				return b.SoftcapForward(d.z, d.z, nd*K, c)
			}
			return nil
		})
	if err != nil {
		return err
	}
	host := make([]float32, nd*K)
	if err := b.Download(host, d.z); err != nil {
		return err
	}
	for i, sj := range d.at {
		t.DigitLogits[sj[0]][sj[1]] = host[i*K : (i+1)*K : (i+1)*K]
	}
	return nil
}

// checkDigitGrad checks that Tape.DigitGrad, when set, has Tape.DigitLogits's shape.
func (t *Tape) checkDigitGrad() error {
	if t.DigitGrad == nil {
		return nil
	}
	if len(t.DigitGrad) != len(t.DigitLogits) {
		return fmt.Errorf("digit gradients for %d sequences, logits for %d", len(t.DigitGrad), len(t.DigitLogits))
	}
	for s := range t.DigitGrad {
		if len(t.DigitGrad[s]) != len(t.DigitLogits[s]) {
			return fmt.Errorf("sequence %d: %d digit gradients for %d digit rows", s, len(t.DigitGrad[s]), len(t.DigitLogits[s]))
		}
		for j := range t.DigitGrad[s] {
			if len(t.DigitGrad[s][j]) != len(t.dig.ids) {
				return fmt.Errorf("sequence %d: %d digit gradients for %d digit tokens", s, len(t.DigitGrad[s][j]), len(t.dig.ids))
			}
		}
	}
	return nil
}

// digitBackward adds Tape.DigitGrad's share to the gradient of the final norm's output
// (t.g.hidden, which headBackward has set) and, with g, to the head's gradient: for the
// queried rows, dhidden += dz·W and dW += dzᵀ·h over the digit tokens' head rows only.
func (t *Tape) digitBackward(g *Grads) error {
	m, d := t.m, &t.dig
	b, D, K, nd := m.b, m.Config.Dim, len(d.ids), len(d.at)
	if t.DigitGrad == nil || nd == 0 || K == 0 {
		return nil
	}
	host := make([]float32, 0, nd*K)
	for _, sj := range d.at {
		host = append(host, t.DigitGrad[sj[0]][sj[1]]...)
	}
	dz, err := b.Place(host, backend.F32)
	if err != nil {
		return err
	}
	defer b.Free(dz)
	if c := float32(m.Config.FinalSoftcap); c > 0 {
		capped, err := m.scratchBuf(&d.scrap[3], nd*K, backend.F32)
		if err != nil {
			return err
		}
		b.Zero(capped)
		if err := b.SoftcapBackward(capped, dz, d.z, nd*K, c); err != nil {
			return err
		}
		dz = capped
	}
	rows := make([]int64, nd) // the queried rows among all the pass's
	for i, k := range d.rows {
		rows[i] = int64(t.sel[k])
	}
	gr := &t.g
	dh, err := m.scratchBuf(&d.scrap[4], nd*D, gr.hidden.DType())
	if err != nil {
		return err
	}
	var dw, dHead backend.Buf
	trainHead := g != nil && m.Head != nil // a 4-bit head is frozen
	if trainHead {
		dHead = g.Of(m.Head)
		if dw, err = b.Alloc(dHead.DType(), K*D); err != nil {
			return err
		}
		defer b.Free(dw)
	}
	return first(b.CopyRows(dh, nil, D, gr.hidden, rows, D, nd, D),
		func() error {
			if trainHead {
				return b.CopyRows(dw, nil, D, dHead, d.ids, D, K, D)
			}
			return nil
		},
		func() error { return b.MatmulBackward(dh, dw, backend.Buf{}, dz, d.h, d.w, nd, D, K) },
		func() error { return b.CopyRows(gr.hidden, rows, D, dh, nil, D, nd, D) }, // rows are distinct
		func() error {
			if trainHead {
				return b.CopyRows(dHead, d.ids, D, dw, nil, D, K, D) // ids are distinct
			}
			return nil
		})
}
