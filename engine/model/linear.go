package model

import "rlhfstation/engine/backend"

// Weight is the matrix of a linear layer, [out,in] as in nn.Linear. Dense float32 is one
// implementation; a 4-bit quantized weight is another (it only needs these two products,
// as the base stays frozen). Each keeps its own form on the backend it is given.
type Weight interface {
	// MulT sets y[rows,out] = x[rows,in]·Wᵀ.
	MulT(b backend.Backend, y, x backend.Buf, rows int) error
	// MulAcc adds dy[rows,out]·W to dx[rows,in]: the input gradient through W.
	MulAcc(b backend.Backend, dx, dy backend.Buf, rows int) error
}

// Dense is a float32 weight [Out,In], row-major, held on the host and placed on a backend
// at its first product there.
type Dense struct {
	Out, In int
	W       []float32
	dev     devCopy
}

// Buf is the weight on b.
func (d *Dense) Buf(b backend.Backend) (backend.Buf, error) {
	return d.dev.get(b, d.W, b.Precision().Weight)
}

// MulT sets y = x·Wᵀ.
func (d *Dense) MulT(b backend.Backend, y, x backend.Buf, rows int) error {
	w, err := d.Buf(b)
	if err != nil {
		return err
	}
	return b.MatmulForward(y, x, w, backend.Buf{}, rows, d.In, d.Out)
}

// MulAcc adds dy·W to dx.
func (d *Dense) MulAcc(b backend.Backend, dx, dy backend.Buf, rows int) error {
	w, err := d.Buf(b)
	if err != nil {
		return err
	}
	return b.MatmulBackward(dx, backend.Buf{}, backend.Buf{}, dy, backend.Buf{}, w, rows, d.In, d.Out)
}

// Adapter adds a trainable term to a linear layer's output, LoRA's s·(x·Aᵀ)·Bᵀ, with the
// base weight frozen. The model calls it after W·x + b, and in the backward after the
// base's input gradient, with buffers on the model's backend (which must be the adapter's).
type Adapter interface {
	// Forward adds the adapter's term for x[rows,in] to y[rows,out]. With train set it
	// keeps what Backward needs (each linear runs once per training forward).
	Forward(y, x backend.Buf, rows int, train bool) error
	// Backward accumulates the adapter's own gradients from dy[rows,out] and the forward's
	// input x, and adds its share of the input gradient to dx (dx may be absent).
	Backward(dx, dy, x backend.Buf, rows int) error
}

// Linear is one linear module: y = x·Wᵀ + b (+ the adapter's term).
type Linear struct {
	Name    string // module path as Hugging Face and PEFT name it, e.g. model.layers.0.self_attn.q_proj
	In, Out int
	W       Weight
	Adapter Adapter // nil: none (LoRA attaches here)
	weight  *Param  // the dense parameter behind W (full-parameter gradients), nil once replaced
	bias    *Param  // nil: no bias
}

// Bias returns the bias vector, nil when the module has none.
func (l *Linear) Bias() []float32 {
	if l.bias == nil {
		return nil
	}
	return l.bias.Data
}

// linearForward sets y[rows,Out] from x[rows,In].
func (m *Model) linearForward(l *Linear, y, x backend.Buf, rows int, train bool, ad Adapters) error {
	b := m.b
	if err := l.W.MulT(b, y, x, rows); err != nil {
		return err
	}
	if l.bias != nil {
		bias, err := m.Buf(l.bias)
		if err != nil {
			return err
		}
		if err := b.BiasForward(y, bias, rows, l.Out); err != nil {
			return err
		}
	}
	if ad == AdaptersOn && l.Adapter != nil {
		return l.Adapter.Forward(y, x, rows, train)
	}
	return nil
}

// linearBackward adds the input gradient to dx (when not absent), the weight and bias
// gradients to g (when not nil: full-parameter training) and lets the adapter accumulate
// its own.
func (m *Model) linearBackward(l *Linear, dx, dy, x backend.Buf, rows int, g *Grads, ad Adapters) error {
	b := m.b
	if !dx.Nil() {
		if err := l.W.MulAcc(b, dx, dy, rows); err != nil {
			return err
		}
	}
	if g != nil {
		var dw, db backend.Buf
		if l.isDense() {
			dw = g.Of(l.weight)
		}
		if l.bias != nil {
			db = g.Of(l.bias)
		}
		if err := b.MatmulBackward(backend.Buf{}, dw, db, dy, x, backend.Buf{}, rows, l.In, l.Out); err != nil {
			return err
		}
	}
	if ad == AdaptersOn && l.Adapter != nil {
		return l.Adapter.Backward(dx, dy, x, rows)
	}
	return nil
}

// isDense reports whether l still computes with its own dense parameter.
func (l *Linear) isDense() bool {
	d, ok := l.W.(*Dense)
	return ok && l.weight != nil && len(d.W) > 0 && &d.W[0] == &l.weight.Data[0]
}
