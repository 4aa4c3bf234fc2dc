package model

import "rlhfstation/engine/backend/cpu"

// Weight is the matrix of a linear layer, [out,in] as in nn.Linear. Dense float32 is one
// implementation; a 4-bit quantized weight is another (it only needs these two products,
// as the base stays frozen).
type Weight interface {
	// MulT sets y[rows,out] = x[rows,in]·Wᵀ.
	MulT(y, x []float32, rows int)
	// MulAcc adds dy[rows,out]·W to dx[rows,in]: the input gradient through W.
	MulAcc(dx, dy []float32, rows int)
}

// Dense is a float32 weight [Out,In], row-major.
type Dense struct {
	Out, In int
	W       []float32
}

// MulT sets y = x·Wᵀ.
func (d *Dense) MulT(y, x []float32, rows int) {
	cpu.MatmulForward(y, x, d.W, nil, rows, d.In, d.Out)
}

// MulAcc adds dy·W to dx.
func (d *Dense) MulAcc(dx, dy []float32, rows int) {
	cpu.MatmulBackward(dx, nil, nil, dy, nil, d.W, rows, d.In, d.Out)
}

// Adapter adds a trainable term to a linear layer's output, LoRA's s·(x·Aᵀ)·Bᵀ, with the
// base weight frozen. The model calls it after W·x + b, and in the backward after the
// base's input gradient.
type Adapter interface {
	// Forward adds the adapter's term for x[rows,in] to y[rows,out]. With train set it
	// keeps what Backward needs (each linear runs once per training forward).
	Forward(y, x []float32, rows int, train bool)
	// Backward accumulates the adapter's own gradients from dy[rows,out] and the forward's
	// input x, and adds its share of the input gradient to dx (dx may be nil).
	Backward(dx, dy, x []float32, rows int)
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

// forward sets y[rows,Out] from x[rows,In].
func (l *Linear) forward(y, x []float32, rows int, train, adapters bool) {
	l.W.MulT(y, x, rows)
	if l.bias != nil {
		cpu.BiasForward(y, l.bias.Data, rows, l.Out)
	}
	if adapters && l.Adapter != nil {
		l.Adapter.Forward(y, x, rows, train)
	}
}

// backward adds the input gradient to dx (when not nil), the weight and bias gradients to
// g (when not nil: full-parameter training) and lets the adapter accumulate its own.
func (l *Linear) backward(dx, dy, x []float32, rows int, g *Grads, adapters bool) {
	if dx != nil {
		l.W.MulAcc(dx, dy, rows)
	}
	if g != nil {
		var dw, db []float32
		if l.isDense() {
			dw = g.Of(l.weight)
		}
		if l.bias != nil {
			db = g.Of(l.bias)
		}
		cpu.MatmulBackward(nil, dw, db, dy, x, nil, rows, l.In, l.Out)
	}
	if adapters && l.Adapter != nil {
		l.Adapter.Backward(dx, dy, x, rows)
	}
}

// isDense reports whether l still computes with its own dense parameter.
func (l *Linear) isDense() bool {
	d, ok := l.W.(*Dense)
	return ok && l.weight != nil && len(d.W) > 0 && &d.W[0] == &l.weight.Data[0]
}
