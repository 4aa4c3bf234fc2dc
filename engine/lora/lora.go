// Package lora implements LoRA adapters exactly as PEFT defines them (DESIGN §4):
//
//	y = W·x + s·B·A·dropout(x),  A [r,in] Kaiming-uniform(a=√5), B [out,r] zeros,
//	s = alpha/r, or alpha/√r with rslora,
//
// with an explicit backward beside the forward. The frozen base weight is not touched here:
// the model's linear layer computes W·x and asks its adapter to add the low-rank term.
package lora

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/checkpoint"
)

// Config is the LoRA part of a run's configuration (PEFT's LoraConfig names).
type Config struct {
	R             int
	Alpha         float64
	Dropout       float64
	TargetModules []string // module names (q_proj, c_attn…) or the single entry "all-linear"
	RSLoRA        bool
}

// Scale is s = alpha/r, or alpha/√r with rslora.
func (c Config) Scale() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.R))
	}
	return c.Alpha / float64(c.R)
}

// Layer is one adapter on a linear module of in → out features, its weights and gradients
// float32 in a backend's memory.
type Layer struct {
	Module  string // module path in the base model, e.g. model.layers.0.self_attn.q_proj
	In, Out int
	R       int
	Scale   float32
	Dropout float32
	A, B    backend.Buf // [R,In], [Out,R] row-major, PEFT's lora_A.weight and lora_B.weight
	GradA   backend.Buf
	GradB   backend.Buf

	b  backend.Backend
	ws *workspace // scratch, shared by the layers of a Set
}

// NewLayer makes an adapter on b initialised as PEFT does: A ~ U(−1/√in, 1/√in) (Kaiming
// uniform with a = √5: gain √(2/(1+a²)), bound gain·√(3/in)), B = 0, so the adapted model
// starts equal to the base.
func NewLayer(b backend.Backend, module string, in, out int, c Config, rng *rand.Rand) (*Layer, error) {
	l := &Layer{Module: module, In: in, Out: out, R: c.R, Scale: float32(c.Scale()), Dropout: float32(c.Dropout), b: b, ws: &workspace{}}
	var err error
	alloc := func(n int) backend.Buf {
		if err != nil {
			return backend.Buf{}
		}
		var x backend.Buf
		if x, err = b.Alloc(backend.F32, n); err == nil {
			b.Zero(x)
		}
		return x
	}
	l.A, l.B, l.GradA, l.GradB = alloc(c.R*in), alloc(out*c.R), alloc(c.R*in), alloc(out*c.R)
	if err != nil {
		return nil, fmt.Errorf("adapter of %s: %w", module, err)
	}
	a := make([]float32, c.R*in)
	bound := 1 / math.Sqrt(float64(in))
	for i := range a {
		a[i] = float32((2*rng.Float64() - 1) * bound)
	}
	if err := b.Upload(l.A, a); err != nil {
		return nil, fmt.Errorf("adapter of %s: %w", module, err)
	}
	return l, nil
}

// Backend is the backend the layer's memory belongs to.
func (l *Layer) Backend() backend.Backend { return l.b }

// Activations are what the backward needs from one forward: the dropout seed and the rank-r
// projection x·Aᵀ.
type Activations struct {
	rows    int
	dropout bool   // the input was dropped out, with seed
	seed    uint64 // the dropout mask's seed (backend.DropoutKeep)
	xa      backend.Buf
}

// workspace is the scratch of the ops: the dropped-out input (or its gradient) [rows,In] and
// small [rows,R] products, grown to the largest call.
type workspace struct {
	in, small backend.Buf
}

// take returns n elements of *x, reallocating it on b when too small.
func take(b backend.Backend, x *backend.Buf, n int) (backend.Buf, error) {
	if x.Len() < n {
		if !x.Nil() {
			if err := b.Free(*x); err != nil {
				return backend.Buf{}, err
			}
		}
		var err error
		if *x, err = b.Alloc(backend.F32, n); err != nil {
			*x = backend.Buf{}
			return backend.Buf{}, err
		}
	}
	return x.Slice(0, n), nil
}

// Forward adds s·dropout(x)·Aᵀ·Bᵀ to y, for rows of x [rows,In] and y [rows,Out]. With
// training set and Dropout > 0 the dropout mask is the one of seed (backend.DropoutKeep).
// act, when not nil, keeps what Backward needs (its buffers are reused across calls).
func (l *Layer) Forward(y, x backend.Buf, rows int, training bool, seed uint64, act *Activations) error {
	if rows == 0 {
		return nil
	}
	b := l.b
	in := x
	dropout := training && l.Dropout > 0
	var err error
	if dropout {
		if in, err = take(b, &l.ws.in, rows*l.In); err != nil {
			return err
		}
		if err := b.DropoutForward(in, x, rows*l.In, seed, l.Dropout); err != nil {
			return err
		}
	}
	var xa backend.Buf
	if act != nil {
		if xa, err = take(b, &act.xa, rows*l.R); err != nil {
			return err
		}
		act.rows, act.dropout, act.seed = rows, dropout, seed
	} else if xa, err = take(b, &l.ws.small, rows*l.R); err != nil {
		return err
	}
	// xa = in·Aᵀ  [rows,R]
	if err := b.GEMM(false, true, rows, l.R, l.In, 1, in, l.In, l.A, l.In, 0, xa, l.R); err != nil {
		return err
	}
	// y += s·xa·Bᵀ  [rows,Out]
	return b.GEMM(false, true, rows, l.Out, l.R, l.Scale, xa, l.R, l.B, l.R, 1, y, l.Out)
}

// Backward accumulates GradA and GradB from dy [rows,Out] and the forward's input x, and,
// when dx is not absent, adds the adapter's share of ∂L/∂x to dx [rows,In]:
//
//	dB += s·dyᵀ·xa,  dxa = s·dy·B,  dA += dxaᵀ·dropout(x),  dx += dropout'(dxa·A).
func (l *Layer) Backward(dx, dy, x backend.Buf, act *Activations) error {
	rows, b := act.rows, l.b
	if rows == 0 {
		return nil
	}
	in := x
	var err error
	if act.dropout {
		if in, err = take(b, &l.ws.in, rows*l.In); err != nil {
			return err
		}
		if err := b.DropoutForward(in, x, rows*l.In, act.seed, l.Dropout); err != nil {
			return err
		}
	}
	if err := b.GEMM(true, false, l.Out, l.R, rows, l.Scale, dy, l.Out, act.xa, l.R, 1, l.GradB, l.R); err != nil {
		return err
	}
	dxa, err := take(b, &l.ws.small, rows*l.R)
	if err != nil {
		return err
	}
	if err := b.GEMM(false, false, rows, l.R, l.Out, l.Scale, dy, l.Out, l.B, l.R, 0, dxa, l.R); err != nil {
		return err
	}
	if err := b.GEMM(true, false, l.R, l.In, rows, 1, dxa, l.R, in, l.In, 1, l.GradA, l.In); err != nil {
		return err
	}
	if dx.Nil() {
		return nil
	}
	if !act.dropout {
		return b.GEMM(false, false, rows, l.In, l.R, 1, dxa, l.R, l.A, l.In, 1, dx, l.In)
	}
	tmp := in // the dropped-out input is no longer needed: its room takes dxa·A
	if err := b.GEMM(false, false, rows, l.In, l.R, 1, dxa, l.R, l.A, l.In, 0, tmp, l.In); err != nil {
		return err
	}
	return b.DropoutBackward(dx, tmp, rows*l.In, act.seed, l.Dropout)
}

// Weights returns host copies of A and B.
func (l *Layer) Weights() (a, b []float32, err error) {
	a, b = make([]float32, l.A.Len()), make([]float32, l.B.Len())
	if err := l.b.Download(a, l.A); err != nil {
		return nil, nil, err
	}
	return a, b, l.b.Download(b, l.B)
}

// AddDelta is PEFT's merge of an adapter into its base weight, on host float32 tensors
// through bk: w += scale·B·A with A [r, in] and B [out, r] row-major, w [out, in], or
// [in, out] (GPT-2's Conv1D layout, w += scale·(B·A)ᵀ) when transposed.
func AddDelta(bk backend.Backend, w []float32, out, in, r int, scale float32, a, b []float32, transposed bool) error {
	var bufs [3]backend.Buf
	for i, host := range [][]float32{w, a, b} {
		x, err := bk.Alloc(backend.F32, len(host))
		if err != nil {
			return err
		}
		defer bk.Free(x)
		if err := bk.Upload(x, host); err != nil {
			return err
		}
		bufs[i] = x
	}
	wb, ab, bb := bufs[0], bufs[1], bufs[2]
	var err error
	if transposed { // w[i][o] += scale·Σ_k A[k][i]·B[o][k]: Aᵀ·Bᵀ
		err = bk.GEMM(true, true, in, out, r, scale, ab, in, bb, r, 1, wb, out)
	} else {
		err = bk.GEMM(false, false, out, in, r, scale, bb, r, ab, in, 1, wb, in)
	}
	if err != nil {
		return err
	}
	return bk.Download(w, wb)
}

// Selects reports whether a module is adapted under the target list: "all-linear" takes every
// linear the caller offers (the caller never offers the LM head); otherwise a module is taken
// when its last path component equals a target or its path ends with ".target" (PEFT's rule).
func Selects(targets []string, module string) bool {
	for _, t := range targets {
		if t == "all-linear" || module == t || strings.HasSuffix(module, "."+t) {
			return true
		}
	}
	return false
}

// Names of the PEFT tensors of a module.
func TensorNames(module string) (a, b string) {
	p := "base_model.model." + module
	return p + ".lora_A.weight", p + ".lora_B.weight"
}

// Set is the adapters of a model, in module order.
type Set struct {
	Config Config
	Layers []*Layer
	byName map[string]*Layer
}

// NewSet gathers layers (already created) into a set; the layers then share one scratch
// workspace per backend (they run one at a time).
func NewSet(c Config, layers []*Layer) *Set {
	s := &Set{Config: c, Layers: layers, byName: map[string]*Layer{}}
	shared := map[backend.Backend]*workspace{}
	for _, l := range layers {
		s.byName[l.Module] = l
		if shared[l.b] == nil {
			shared[l.b] = l.ws
		}
		l.ws = shared[l.b]
	}
	return s
}

// Layer returns the adapter of module, or nil.
func (s *Set) Layer(module string) *Layer {
	if s == nil {
		return nil
	}
	return s.byName[module]
}

// Count is the number of trainable parameters.
func (s *Set) Count() int64 {
	var n int64
	for _, l := range s.Layers {
		n += int64(l.A.Len() + l.B.Len())
	}
	return n
}

// Tensors returns host copies of the adapter weights under PEFT's names.
func (s *Set) Tensors() ([]checkpoint.Tensor, error) {
	var out []checkpoint.Tensor
	for _, l := range s.Layers {
		an, bn := TensorNames(l.Module)
		a, b, err := l.Weights()
		if err != nil {
			return nil, fmt.Errorf("adapter of %s: %w", l.Module, err)
		}
		out = append(out, checkpoint.Tensor{Name: an, Shape: []int{l.R, l.In}, Data: a},
			checkpoint.Tensor{Name: bn, Shape: []int{l.Out, l.R}, Data: b})
	}
	return out, nil
}

// AdapterConfig describes the set as PEFT's adapter_config.json.
func (s *Set) AdapterConfig(baseModel string, fanInFanOut bool) checkpoint.AdapterConfig {
	mods := map[string]bool{}
	for _, l := range s.Layers {
		mods[l.Module[strings.LastIndex(l.Module, ".")+1:]] = true
	}
	var targets []string
	for m := range mods {
		targets = append(targets, m)
	}
	sort.Strings(targets)
	return checkpoint.AdapterConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", BaseModel: baseModel,
		R: s.Config.R, LoraAlpha: s.Config.Alpha, LoraDropout: s.Config.Dropout, TargetModules: targets,
		Bias: "none", UseRSLoRA: s.Config.RSLoRA, FanInFanOut: fanInFanOut, InitLoraWeights: true, InferenceMode: true}
}

// Load copies adapter weights from a checkpoint's tensors into the set's layers, checking that
// every layer is present with the right shape and that no tensor is left over.
func (s *Set) Load(source string, tensors []checkpoint.Tensor) error {
	byName := map[string]checkpoint.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, l := range s.Layers {
		an, bn := TensorNames(l.Module)
		for _, want := range []struct {
			name  string
			shape []int
			dst   backend.Buf
		}{{an, []int{l.R, l.In}, l.A}, {bn, []int{l.Out, l.R}, l.B}} {
			t, ok := byName[want.name]
			if !ok {
				return fmt.Errorf("%s: adapter tensor %s missing", source, want.name)
			}
			if len(t.Shape) != 2 || t.Shape[0] != want.shape[0] || t.Shape[1] != want.shape[1] {
				return fmt.Errorf("%s: adapter tensor %s has shape %v, the model needs %v", source, want.name, t.Shape, want.shape)
			}
			if err := l.b.Upload(want.dst, t.Data); err != nil {
				return fmt.Errorf("%s: adapter tensor %s: %w", source, want.name, err)
			}
			delete(byName, want.name)
		}
	}
	for n := range byName {
		return fmt.Errorf("%s: adapter tensor %s matches no module of this model", source, n)
	}
	return nil
}

// ZeroGrad clears the gradients of every layer: one call per backend (ScaleAll by 0 clears).
func (s *Set) ZeroGrad() error {
	grads := map[backend.Backend][]backend.Buf{}
	var order []backend.Backend
	for _, l := range s.Layers {
		if grads[l.b] == nil {
			order = append(order, l.b)
		}
		grads[l.b] = append(grads[l.b], l.GradA, l.GradB)
	}
	for _, b := range order {
		if err := b.ScaleAll(grads[b], 0); err != nil {
			return err
		}
	}
	return nil
}

// RandomizeB fills B as nn.Linear(r, out) initialises its weight, U(−1/√r, 1/√r): PEFT's
// init_lora_weights = false.
func (l *Layer) RandomizeB(rng *rand.Rand) error {
	bound := 1 / math.Sqrt(float64(l.R))
	b := make([]float32, l.B.Len())
	for i := range b {
		b[i] = float32((2*rng.Float64() - 1) * bound)
	}
	return l.b.Upload(l.B, b)
}
