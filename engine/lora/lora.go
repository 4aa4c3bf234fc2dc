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

	"rlhfstation/engine/backend/cpu/gemm"
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

// Layer is one adapter on a linear module of in → out features.
type Layer struct {
	Module  string // module path in the base model, e.g. model.layers.0.self_attn.q_proj
	In, Out int
	R       int
	Scale   float32
	Dropout float32
	A, B    []float32 // [R,In], [Out,R] row-major, PEFT's lora_A.weight and lora_B.weight
	GradA   []float32
	GradB   []float32
}

// NewLayer makes an adapter initialised as PEFT does: A ~ U(−1/√in, 1/√in) (Kaiming uniform
// with a = √5: gain √(2/(1+a²)), bound gain·√(3/in)), B = 0, so the adapted model starts
// equal to the base.
func NewLayer(module string, in, out int, c Config, rng *rand.Rand) *Layer {
	l := &Layer{Module: module, In: in, Out: out, R: c.R, Scale: float32(c.Scale()), Dropout: float32(c.Dropout),
		A: make([]float32, c.R*in), B: make([]float32, out*c.R),
		GradA: make([]float32, c.R*in), GradB: make([]float32, out*c.R)}
	bound := 1 / math.Sqrt(float64(in))
	for i := range l.A {
		l.A[i] = float32((2*rng.Float64() - 1) * bound)
	}
	return l
}

// Activations are what the backward needs from one forward: the (dropped-out) input's mask and
// the rank-r projection x·Aᵀ.
type Activations struct {
	rows int
	mask []float32 // dropout mask scaled by 1/(1−p); nil without dropout
	xa   []float32 // [rows,R] = dropout(x)·Aᵀ
}

// Forward adds s·dropout(x)·Aᵀ·Bᵀ to y, for rows of x [rows,In] and y [rows,Out]. With
// training set and Dropout > 0, rng draws the dropout mask. act, when not nil, keeps what
// Backward needs (its buffers are reused across calls).
func (l *Layer) Forward(y, x []float32, rows int, training bool, rng *rand.Rand, act *Activations) {
	in := x
	var mask []float32
	if training && l.Dropout > 0 {
		keep := 1 - l.Dropout
		if act != nil {
			mask = grow(act.mask, rows*l.In)
		} else {
			mask = make([]float32, rows*l.In)
		}
		dropped := make([]float32, rows*l.In)
		for i := range mask {
			if rng.Float32() < keep {
				mask[i] = 1 / keep
			} else {
				mask[i] = 0
			}
			dropped[i] = x[i] * mask[i]
		}
		in = dropped
	}
	var xa []float32
	if act != nil {
		xa = grow(act.xa, rows*l.R)
		act.rows, act.mask, act.xa = rows, mask, xa
	} else {
		xa = make([]float32, rows*l.R)
	}
	// xa = in·Aᵀ  [rows,R]
	gemm.Sgemm(false, true, rows, l.R, l.In, 1, in, l.In, l.A, l.In, 0, xa, l.R)
	// y += s·xa·Bᵀ  [rows,Out]
	gemm.Sgemm(false, true, rows, l.Out, l.R, l.Scale, xa, l.R, l.B, l.R, 1, y, l.Out)
}

// Backward accumulates GradA and GradB from dy [rows,Out] and the forward's input x, and,
// when dx is not nil, adds the adapter's share of ∂L/∂x to dx [rows,In]:
//
//	dB += s·dyᵀ·xa,  dxa = s·dy·B,  dA += dxaᵀ·dropout(x),  dx += (dxa·A)⊙mask.
func (l *Layer) Backward(dx, dy, x []float32, act *Activations) {
	rows := act.rows
	in := x
	if act.mask != nil {
		in = make([]float32, rows*l.In)
		for i := range in {
			in[i] = x[i] * act.mask[i]
		}
	}
	gemm.Sgemm(true, false, l.Out, l.R, rows, l.Scale, dy, l.Out, act.xa, l.R, 1, l.GradB, l.R)
	dxa := make([]float32, rows*l.R)
	gemm.Sgemm(false, false, rows, l.R, l.Out, l.Scale, dy, l.Out, l.B, l.R, 0, dxa, l.R)
	gemm.Sgemm(true, false, l.R, l.In, rows, 1, dxa, l.R, in, l.In, 1, l.GradA, l.In)
	if dx == nil {
		return
	}
	if act.mask == nil {
		gemm.Sgemm(false, false, rows, l.In, l.R, 1, dxa, l.R, l.A, l.In, 1, dx, l.In)
		return
	}
	tmp := make([]float32, rows*l.In)
	gemm.Sgemm(false, false, rows, l.In, l.R, 1, dxa, l.R, l.A, l.In, 0, tmp, l.In)
	for i := range tmp {
		dx[i] += tmp[i] * act.mask[i]
	}
}

// Merge adds s·B·A to a dense weight w [Out,In] (for export or checks; training never does).
func (l *Layer) Merge(w []float32) {
	AddDelta(w, l.Out, l.In, l.R, l.Scale, l.A, l.B, false)
}

// AddDelta is PEFT's merge of an adapter into its base weight, on host float32 tensors:
// w += scale·B·A with A [r, in] and B [out, r] row-major, w [out, in], or [in, out] (GPT-2's
// Conv1D layout, w += scale·(B·A)ᵀ) when transposed.
func AddDelta(w []float32, out, in, r int, scale float32, a, b []float32, transposed bool) {
	if transposed { // w[i][o] += scale·Σ_k A[k][i]·B[o][k]: Aᵀ·Bᵀ
		gemm.Sgemm(true, true, in, out, r, scale, a, in, b, r, 1, w, out)
		return
	}
	gemm.Sgemm(false, false, out, in, r, scale, b, r, a, in, 1, w, in)
}

func grow(b []float32, n int) []float32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float32, n)
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

// NewSet gathers layers (already created) into a set.
func NewSet(c Config, layers []*Layer) *Set {
	s := &Set{Config: c, Layers: layers, byName: map[string]*Layer{}}
	for _, l := range layers {
		s.byName[l.Module] = l
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
		n += int64(len(l.A) + len(l.B))
	}
	return n
}

// Tensors returns the adapter weights under PEFT's names (sharing memory with the layers).
func (s *Set) Tensors() []checkpoint.Tensor {
	var out []checkpoint.Tensor
	for _, l := range s.Layers {
		an, bn := TensorNames(l.Module)
		out = append(out, checkpoint.Tensor{Name: an, Shape: []int{l.R, l.In}, Data: l.A},
			checkpoint.Tensor{Name: bn, Shape: []int{l.Out, l.R}, Data: l.B})
	}
	return out
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
			dst   []float32
		}{{an, []int{l.R, l.In}, l.A}, {bn, []int{l.Out, l.R}, l.B}} {
			t, ok := byName[want.name]
			if !ok {
				return fmt.Errorf("%s: adapter tensor %s missing", source, want.name)
			}
			if len(t.Shape) != 2 || t.Shape[0] != want.shape[0] || t.Shape[1] != want.shape[1] {
				return fmt.Errorf("%s: adapter tensor %s has shape %v, the model needs %v", source, want.name, t.Shape, want.shape)
			}
			copy(want.dst, t.Data)
			delete(byName, want.name)
		}
	}
	for n := range byName {
		return fmt.Errorf("%s: adapter tensor %s matches no module of this model", source, n)
	}
	return nil
}

// ZeroGrad clears the gradients of every layer.
func (s *Set) ZeroGrad() {
	for _, l := range s.Layers {
		clear(l.GradA)
		clear(l.GradB)
	}
}

// RandomizeB fills B as nn.Linear(r, out) initialises its weight, U(−1/√r, 1/√r): PEFT's
// init_lora_weights = false.
func (l *Layer) RandomizeB(rng *rand.Rand) {
	bound := 1 / math.Sqrt(float64(l.R))
	for i := range l.B {
		l.B[i] = float32((2*rng.Float64() - 1) * bound)
	}
}
