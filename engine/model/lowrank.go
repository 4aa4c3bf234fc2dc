package model

import (
	"fmt"
	"slices"

	"rlhfstation/engine/backend"
)

// The LoRA adapters as the model runs them itself: copies of their factors in the backend's
// activation precision (bf16 on a GPU), so that no product rounds a float32 operand on the
// way, refreshed after each optimizer update (AdaptersChanged, the optimizer's hook) rather
// than per pass; and the linears sharing an input (q, k and v; gate and up) run as a group:
// one product x·Aᵀ for all their adapters, each linear one fused 4-bit op (Q4Linear: the
// product, bias, LoRA term and residual), and one backward op for the group
// (LinearsBackward).

// LowRank is an adapter of the form s·(x·Aᵀ)·Bᵀ (LoRA) whose factors the model may read:
// A [R,In] and B [Out,R], float32 on the model's backend.
type LowRank interface {
	Factors() (a, b backend.Buf, r int, scale float32)
}

// LowRankGrads is a LowRank adapter whose training passes the model may run itself: Grads
// gives its float32 gradients (GradA, GradB), ok false when its forward is not the plain
// low-rank term (dropout) and it must run its own.
type LowRankGrads interface {
	LowRank
	Grads() (ga, gb backend.Buf, ok bool)
}

// lrGroup is the adapters of linears sharing their input, their A copies stacked so that
// one product gives every x·Aᵀ: xa [rows, width].
type lrGroup struct {
	ls    []*Linear // every linear of the group, adapted or not
	first *Linear   // the first adapted one: its forward computes the group's xa
	a     backend.Buf
	width int
	idx   int // the group's index in its block (Tape.xa)
}

// lrLinear is one adapted linear's share: its columns of the group's xa and its B copy.
type lrLinear struct {
	g     *lrGroup
	ad    Adapter // the adapter the copies were made from
	off   int
	b     backend.Buf
	r     int
	scale float32
}

// lowRank is the model's copies of its adapters' factors.
type lowRank struct {
	on        backend.Backend
	lin       map[*Linear]*lrLinear
	groups    [][]*lrGroup // each block's groups with an adapter
	bufs      []backend.Buf
	casts     *backend.Casts // every factor into its copy: one launch on a device
	stale     bool           // an update since the copies were made: cast again before the next use
	refreshes int            // the casts of every factor made (tests)
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

// AdaptersChanged tells the model that its adapters' weights changed (an optimizer update,
// weights loaded): the copies are cast again now (queued after the update), or, when none
// are made yet, at their first use. The optimizer calls it after each update
// (optim.AdamW.AfterUpdate); attaching other adapters is noticed without it.
func (m *Model) AdaptersChanged() error {
	m.lr.stale = true
	if m.lr.lin == nil || m.lr.on != m.b || !m.sameAdapters() {
		return nil
	}
	return m.lr.refresh(m.b)
}

// lowRankCopies returns the copies of the attached adapters' factors, made on first use and
// when the adapters attached change, cast again (into the same buffers) after an update.
func (m *Model) lowRankCopies() (*lowRank, error) {
	b := m.Backend()
	lr := &m.lr
	if lr.on == b && lr.lin != nil && m.sameAdapters() {
		if lr.stale {
			if err := lr.refresh(b); err != nil {
				return nil, err
			}
		}
		return lr, nil
	}
	lr.free()
	*lr = lowRank{on: b, lin: map[*Linear]*lrLinear{}, refreshes: lr.refreshes}
	dt := b.Precision().Act
	alloc := func(n int) (backend.Buf, error) {
		x, err := b.Alloc(dt, n)
		if err == nil {
			lr.bufs = append(lr.bufs, x)
		}
		return x, err
	}
	for li := range m.Layers {
		var gs []*lrGroup
		for _, ls := range sharedInputs(&m.Layers[li]) {
			g := &lrGroup{ls: ls, idx: len(gs)}
			var mine []*Linear
			for _, l := range ls {
				if _, ok := l.Adapter.(LowRank); ok && l.Adapter != nil {
					mine = append(mine, l)
				}
			}
			if len(mine) == 0 {
				continue
			}
			for _, l := range mine {
				_, _, r, _ := l.Adapter.(LowRank).Factors()
				g.width += r
			}
			in := mine[0].In
			var err error
			if g.a, err = alloc(g.width * in); err != nil {
				return nil, fmt.Errorf("the adapters' copies: %w", err)
			}
			g.first = mine[0]
			off := 0
			for _, l := range mine {
				_, bb, r, s := l.Adapter.(LowRank).Factors()
				x, err := alloc(bb.Len())
				if err != nil {
					return nil, fmt.Errorf("the adapters' copies: %w", err)
				}
				lr.lin[l] = &lrLinear{g: g, ad: l.Adapter, off: off, b: x, r: r, scale: s}
				off += r
			}
			gs = append(gs, g)
		}
		lr.groups = append(lr.groups, gs)
	}
	if err := lr.refresh(b); err != nil {
		return nil, err
	}
	return lr, nil
}

// hasLowRank reports whether an adapter the model may run itself is attached.
func (m *Model) hasLowRank() bool {
	for _, l := range m.Linears() {
		if _, ok := l.Adapter.(LowRank); ok && l.Adapter != nil {
			return true
		}
	}
	return false
}

// sameAdapters reports whether the copies were made from the adapters attached now.
func (m *Model) sameAdapters() bool {
	n := 0
	for _, l := range m.Linears() {
		if _, ok := l.Adapter.(LowRank); !ok || l.Adapter == nil {
			continue
		}
		n++
		if c := m.lr.lin[l]; c == nil || c.ad != l.Adapter {
			return false
		}
	}
	return n == len(m.lr.lin)
}

// refresh casts every factor into its copy, all in one CastAll; the pairs are readied once
// (again only if an adapter's factors moved to other buffers).
func (lr *lowRank) refresh(b backend.Backend) error {
	var dst, src []backend.Buf
	for li := range lr.groups {
		for _, g := range lr.groups[li] {
			for _, l := range g.ls {
				c := lr.lin[l]
				if c == nil {
					continue
				}
				a, bb, r, _ := l.Adapter.(LowRank).Factors()
				dst = append(dst, c.g.a.Slice(c.off*l.In, r*l.In), c.b)
				src = append(src, a, bb)
			}
		}
	}
	if lr.casts == nil || !slices.Equal(lr.casts.Src, src) || !slices.Equal(lr.casts.Dst, dst) {
		if lr.casts != nil {
			b.FreeCasts(lr.casts)
			lr.casts = nil
		}
		c, err := b.NewCasts(dst, src)
		if err != nil {
			return fmt.Errorf("the adapters' copies: %w", err)
		}
		lr.casts = c
	}
	if err := b.CastAll(lr.casts); err != nil {
		return fmt.Errorf("the adapters' copies: %w", err)
	}
	lr.stale = false
	lr.refreshes++
	return nil
}

func (lr *lowRank) free() {
	if lr.casts != nil {
		lr.on.FreeCasts(lr.casts)
	}
	for _, x := range lr.bufs {
		lr.on.Free(x)
	}
	lr.bufs, lr.lin, lr.groups, lr.casts = nil, nil, nil, nil
}

// fastGroup reports whether the linears ls sharing an input run grouped in a pass with
// adapters ad (training: train): every weight 4-bit and, with the adapters on, every adapter
// a LowRank one with copies (and in training without dropout); with its adapters' group.
func (m *Model) fastGroup(ls []*Linear, ad Adapters, train bool) (bool, *lrGroup, error) {
	for _, l := range ls {
		if _, ok := l.W.(*Quantized); !ok {
			return false, nil, nil
		}
	}
	if ad != AdaptersOn || !slices.ContainsFunc(ls, func(l *Linear) bool { return l.Adapter != nil }) {
		return true, nil, nil
	}
	lr, err := m.lowRankCopies()
	if err != nil {
		return false, nil, err
	}
	var g *lrGroup
	for _, l := range ls {
		if l.Adapter == nil {
			continue
		}
		c := lr.lin[l]
		if c == nil {
			return false, nil, nil
		}
		if train {
			if tr, ok := l.Adapter.(LowRankGrads); !ok {
				return false, nil, nil
			} else if _, _, ok := tr.Grads(); !ok {
				return false, nil, nil
			}
		}
		g = c.g
	}
	return true, g, nil
}

// groupOf is the linears sharing l's input in its block.
func (m *Model) groupOf(layer int, l *Linear) []*Linear {
	for _, ls := range sharedInputs(&m.Layers[layer]) {
		if slices.Contains(ls, l) {
			return ls
		}
	}
	return []*Linear{l}
}

// q4Linear is linearForward (with res, out = res + linear(x)) for a linear of a fast group
// (fastGroup): one Q4Linear, the group's x·Aᵀ made by its first adapted linear into xaOf's
// buffer. It reports false when the linear's group is not fast.
func (m *Model) q4Linear(p *pass, layer int, l *Linear, out, res, x backend.Buf, rows int, xaOf func(g *lrGroup) (backend.Buf, error)) (bool, error) {
	if _, ok := l.W.(*Quantized); !ok {
		return false, nil
	}
	ok, g, err := m.fastGroup(m.groupOf(layer, l), p.ad, p.train)
	if !ok || err != nil {
		return false, err
	}
	b := m.b
	var xa, lb backend.Buf
	var r, ld int
	var scale float32
	if c := m.lr.lin[l]; g != nil && c != nil && p.ad == AdaptersOn {
		buf, err := xaOf(g)
		if err != nil {
			return true, err
		}
		if g.first == l {
			if err := b.GEMM(false, true, rows, g.width, l.In, 1, x, l.In, g.a, l.In, 0, buf, g.width); err != nil {
				return true, err
			}
		}
		xa, ld, lb, r, scale = buf.Slice(c.off, (rows-1)*g.width+c.r), g.width, c.b, c.r, c.scale
	}
	var bias backend.Buf
	if l.bias != nil {
		if bias, err = m.Buf(l.bias); err != nil {
			return true, err
		}
	}
	h, err := l.W.(*Quantized).handle(b)
	if err != nil {
		return true, err
	}
	return true, b.Q4Linear(out, res, x, h, bias, xa, ld, lb, r, scale, rows)
}

// linearsBackward is the backward of the linears ls sharing their input x: dx gets (set, or
// accumulated with acc) the input gradient from the outputs' gradients dys; the adapters
// accumulate theirs. A fast group (fastGroup) is one LinearsBackward from the forward's xa;
// otherwise each linear's own backward.
func (m *Model) linearsBackward(t *Tape, layer int, ls []*Linear, dx backend.Buf, acc bool, dys []backend.Buf, x backend.Buf, g *Grads) error {
	b, rows := m.b, t.p.rows
	ok, grp, err := m.fastGroup(ls, t.ad, true)
	if err != nil {
		return err
	}
	if ok {
		lg := make([]backend.LinearGrad, len(ls))
		var xa backend.Buf
		if grp != nil {
			xa = t.xa[layer][grp.idx]
		}
		for i, l := range ls {
			h, err := l.W.(*Quantized).handle(b)
			if err != nil {
				return err
			}
			lg[i] = backend.LinearGrad{W: h, DY: dys[i]}
			if c := m.lr.lin[l]; c != nil && t.ad == AdaptersOn {
				ad := l.Adapter.(LowRankGrads)
				a, bb, r, s := ad.Factors()
				ga, gb, _ := ad.Grads()
				lg[i].A, lg[i].B, lg[i].GradA, lg[i].GradB, lg[i].R, lg[i].Off, lg[i].Scale = a, bb, ga, gb, r, c.off, s
			}
		}
		ld := 0
		if grp != nil {
			ld = grp.width
		}
		if err := b.LinearsBackward(dx, acc, x, xa, ld, lg, rows); err != nil || g == nil {
			return err
		}
		for i, l := range ls { // full-parameter training: the biases' gradients
			if l.bias != nil {
				if err := b.MatmulBackward(backend.Buf{}, backend.Buf{}, g.Of(l.bias), dys[i], x, backend.Buf{}, rows, l.In, l.Out); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if !acc {
		b.Zero(dx)
	}
	for i, l := range ls {
		if err := m.linearBackward(l, dx, dys[i], x, rows, g, t.ad); err != nil {
			return err
		}
	}
	return nil
}
