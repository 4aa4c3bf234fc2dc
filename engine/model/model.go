// Package model runs Hugging Face causal language models of the gpt2 and llama families
// (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, smollm3, olmo2) on a backend (engine/backend; the CPU unless Use says otherwise):
// loading and saving model folders, a batched forward pass over a key/value cache,
// log-probabilities, generation, and a training forward with its backward. Every op goes
// through backend.Backend; data crosses to the host only at named boundaries: log-probs and
// entropies of chosen tokens, sampled ids, logits a caller asks to see.
//
// Inference:
//
//	m, err := model.Load(dir)                       // config.json + safetensors
//	lp, err := m.LogProbs(seqs, temperature, model.AdaptersOn) // lp[s][i] = log p(seqs[s][i] | seqs[s][<i])
//	g, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: 128, Temperature: 1, Seed: s})
//	c := m.NewCache(batch, capacity); logits, err := m.Forward(c, tokens, lastOnly, model.AdaptersOn)
//
// Training (sequences are packed, no padding; dlogp is dLoss/dLogProbs, per token):
//
//	tape := m.NewTape()                              // reuse across steps
//	err := m.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: t, Entropy: true, FirstScored: promptLens})
//	// tape.LogProbs, tape.Entropy → the loss's per-token coefficients dlogp
//	err = m.Backward(tape, dlogp, grads)              // grads nil: frozen base, adapters only
//
// Full-parameter gradients live in a Grads buffer laid out like Model.Data() (AdamW can
// run over both flat buffers). LoRA attaches to Linear.Adapter (see Model.Linears); every
// pass takes Adapters: AdaptersOff runs the frozen base, the reference model and scorer.
//
// The weights live on the host (Param.Data, the quantized linears' quant.Weight), where they
// are loaded, saved and merged; each pass places them on the model's backend on first use (a
// view on the CPU, a copy on a device, made again when a weight's memory or the backend
// changes: a device copy does not see later in-place writes to Param.Data).
//
// 4-bit base (QLoRA): m.Quantize(quant.Default()) replaces every linear of the blocks by a
// Quantized weight (NF4/FP4, bitsandbytes' layout) and frees the float32 copies; Load reads
// a folder in bitsandbytes' 4-bit layout (as `rlhfstation quantize` writes it) straight into
// Quantized weights, and Save writes one back. m.ResidentBytes() is what the weights hold.
//
// A Model is not safe for concurrent use: its forward passes share scratch buffers.
package model

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// Param is one named parameter tensor, a view into the model's single parameter buffer.
type Param struct {
	Name  string // Hugging Face name, e.g. model.layers.0.self_attn.q_proj.weight
	Shape []int  // as held here: [out,in] for every linear, GPT-2's included
	Off   int    // offset in the parameter buffer, and in a Grads buffer
	Data  []float32
	// BF16, when set, holds the tensor as bfloat16 bits instead (Data is nil and the tensor is
	// not in the parameter buffer): the frozen token embedding and LM head of a 4-bit base
	// whose values are bf16, as released checkpoints store them. Half the bytes of float32,
	// and half of what decoding reads for the head (see holdBF16).
	BF16   []uint16
	conv1D bool    // stored [in,out] in checkpoints (GPT-2's Conv1D)
	dev    devCopy // Data (or BF16) on the backend
}

// devCopy is a host slice placed on a backend, placed again when the slice or the backend
// changes.
type devCopy struct {
	on  backend.Backend
	of  unsafe.Pointer
	n   int
	dt  backend.DType
	buf backend.Buf
}

// get returns host ([]float32 or []uint16 of bf16 bits) placed on b as dt.
func (d *devCopy) get(b backend.Backend, host any, dt backend.DType) (backend.Buf, error) {
	var of unsafe.Pointer
	var n int
	switch h := host.(type) {
	case []float32:
		of, n = unsafe.Pointer(unsafe.SliceData(h)), len(h)
	case []uint16:
		of, n = unsafe.Pointer(unsafe.SliceData(h)), len(h)
	}
	if d.on == b && d.of == of && d.n == n && d.dt == dt {
		return d.buf, nil
	}
	if d.on != nil {
		d.on.Free(d.buf)
		*d = devCopy{}
	}
	buf, err := b.Place(host, dt)
	if err != nil {
		return backend.Buf{}, err
	}
	*d = devCopy{on: b, of: of, n: n, dt: dt, buf: buf}
	return buf, nil
}

// Size is the number of elements.
func (p *Param) Size() int { return len(p.Data) + len(p.BF16) }

// Float32 returns the values as float32: Data, or BF16 widened into a new slice.
func (p *Param) Float32() []float32 {
	if p.BF16 == nil {
		return p.Data
	}
	out := make([]float32, len(p.BF16))
	for i, h := range p.BF16 {
		out[i] = math.Float32frombits(uint32(h) << 16)
	}
	return out
}

// Norm is a normalisation layer: RMSNorm (B nil) or LayerNorm.
type Norm struct{ W, B *Param }

// Layer is one transformer block. gpt2 uses QKV (c_attn), O, Up (c_fc) and Down (c_proj);
// llama uses Q, K, V, O, Gate, Up and Down; phi3 the fused QKV (qkv_proj) and GateUp
// (gate_up_proj), O and Down. Norm1 precedes attention and Norm2 the MLP (gemma2/3's
// pre_feedforward_layernorm); gemma2/3 also normalise the attention's and the MLP's outputs
// (PostAttn, PostMLP), qwen3 and gemma3 each head of q and k (QNorm, KNorm); olmo2 has the
// post norms without Norm1 and Norm2, and norms q and k over their whole rows.
type Layer struct {
	Norm1, Norm2      Norm
	PostAttn, PostMLP Norm
	QNorm, KNorm      Norm
	QKV               *Linear
	Q, K, V, O        *Linear
	GateUp            *Linear
	Gate, Up, Down    *Linear
}

// Model is a loaded or freshly made model.
type Model struct {
	Config Config
	Params []*Param // every tensor, in a fixed order, named as in the checkpoint
	Layers []Layer
	Embed  *Param // token embedding [Vocab,Dim]
	PosEmb *Param // learned positions [MaxPos,Dim] (gpt2), else nil
	Head   *Param // LM head [Vocab,Dim]; the same Param as Embed when tied; nil when HeadQ holds it
	Final  Norm
	// HeadQ is the LM head held 4-bit (QuantizeHead, or stored so in a bitsandbytes folder),
	// frozen; Head is then nil, and so is Embed when the head is tied: the embedding reads its
	// rows from HeadQ (head.go).
	HeadQ *Quantized
	hexp  headExp // HeadQ's dense expansion on a backend.HeadExpander

	b       backend.Backend // where the passes compute (Use), the reference backend until set
	data    []float32       // the one parameter allocation
	ropeMu  sync.Mutex
	rope    [3]*backend.RoPETable // global, local (gemma3's sliding layers), global past the original context
	invFreq [2][]float64
	variant int // Config.RopeVariant of rope[2]

	// QuantizedAtLoad are the float32 bytes of the linears LoadWith quantized as it read
	// them, and the bytes of their 4-bit form; zero when it quantized none.
	QuantizedAtLoad [2]int64
	// Prequantized: the folder is bitsandbytes 4-bit (its config.json has a quantization_config).
	// Its linears stored plainly are the modules llm_int8_skip_modules kept in 16 bits; they
	// stay dense, as transformers keeps them (Quantize leaves them).
	Prequantized bool
	scratch      scratch
	lr           lowRank // the adapters' factors in the activation precision (lowrank.go)
}

// Adapters chooses whether a pass runs the linears' adapters; the zero value runs them.
type Adapters uint8

const (
	AdaptersOn  Adapters = iota // the policy: base plus adapters
	AdaptersOff                 // the frozen base: the reference model and the perplexity scorer
)

// Use makes the model compute on b (the weights are placed there on the next pass).
func (m *Model) Use(b backend.Backend) error {
	if m.b != nil && m.b != b {
		m.scratch.free(m.b)
		m.lr.free()
		m.lr = lowRank{refreshes: m.lr.refreshes}
	}
	m.b, m.rope = b, [3]*backend.RoPETable{}
	return nil
}

// Backend is where the model computes: the backend given to Use, else the reference
// backend (the CPU).
func (m *Model) Backend() backend.Backend {
	if m.b == nil {
		b, err := backend.Reference()
		if err != nil {
			panic("model: no backend given (Use) and the reference backend is not linked in (import rlhfstation/engine/backend/cpu): " + err.Error())
		}
		m.b = b
	}
	return m.b
}

// Grads holds one gradient per parameter (float32 on the model's backend), in a flat buffer
// laid out like the parameters.
type Grads struct {
	Data backend.Buf
	b    backend.Backend
}

// NewGrads allocates zeroed full-parameter gradients on the model's backend.
func (m *Model) NewGrads() (*Grads, error) {
	b := m.Backend()
	d, err := b.Alloc(backend.F32, len(m.data))
	if err != nil {
		return nil, fmt.Errorf("parameter gradients: %w", err)
	}
	b.Zero(d)
	return &Grads{Data: d, b: b}, nil
}

// Of returns p's gradient: absent for a frozen bf16 tensor (Param.BF16) or none (a 4-bit head).
func (g *Grads) Of(p *Param) backend.Buf {
	if p == nil || p.BF16 != nil {
		return backend.Buf{}
	}
	return g.Data.Slice(p.Off, len(p.Data))
}

// Zero clears every gradient.
func (g *Grads) Zero() { g.b.Zero(g.Data) }

// Buf returns p's values on the model's backend (placed on first use): what an optimizer
// updates in full-parameter training. On the CPU it is Param.Data itself.
func (m *Model) Buf(p *Param) (backend.Buf, error) {
	if p.BF16 != nil {
		return p.dev.get(m.Backend(), p.BF16, backend.BF16)
	}
	return p.dev.get(m.Backend(), p.Data, m.paramType(p))
}

// paramType is the element type of p on the backend: the Weight precision for matrices
// (linears, embeddings, the head), float32 for norm weights and biases.
func (m *Model) paramType(p *Param) backend.DType {
	if len(p.Shape) >= 2 {
		return m.Backend().Precision().Weight
	}
	return backend.F32
}

// bufOf is Buf of an optional parameter (an absent Buf for nil).
func (m *Model) bufOf(p *Param) (backend.Buf, error) {
	if p == nil {
		return backend.Buf{}, nil
	}
	return m.Buf(p)
}

// Data returns the flat parameter buffer (every Param is a view into it), for optimizers
// that update all parameters at once alongside a Grads buffer.
func (m *Model) Data() []float32 { return m.data }

// NumParams counts the parameters (a tied head counted once), the 4-bit weights of quantized
// linears included.
func (m *Model) NumParams() int {
	n := len(m.data)
	for _, p := range m.Params {
		n += len(p.BF16)
	}
	for _, l := range m.Linears() {
		if q, ok := l.W.(*Quantized); ok {
			n += q.W.Len()
		}
	}
	if m.HeadQ != nil {
		n += m.HeadQ.W.Len()
	}
	return n
}

// Param returns the parameter of that Hugging Face name.
func (m *Model) Param(name string) (*Param, bool) {
	for _, p := range m.Params {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Linears returns every linear module of the blocks in order (the LM head excluded), the
// modules LoRA can target.
func (m *Model) Linears() []*Linear {
	var out []*Linear
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, lin := range []*Linear{l.QKV, l.Q, l.K, l.V, l.O, l.GateUp, l.Gate, l.Up, l.Down} {
			if lin != nil {
				out = append(out, lin)
			}
		}
	}
	return out
}

// paramSpec is one tensor of a config's layout.
type paramSpec struct {
	name   string
	shape  []int
	conv1D bool
	linear bool // the weight of a block's linear: may be stored 4-bit
}

// layout lists the tensors of a model of config c under their Hugging Face names.
func layout(c *Config) []paramSpec {
	var s []paramSpec
	add := func(name string, shape ...int) { s = append(s, paramSpec{name: name, shape: shape}) }
	lin := func(name string, out, in int, bias, conv bool) {
		s = append(s, paramSpec{name: name + ".weight", shape: []int{out, in}, conv1D: conv, linear: true})
		if bias {
			add(name+".bias", out)
		}
	}
	D, F, V := c.Dim, c.Hidden, c.Vocab
	if c.Family() == GPT2 {
		add("transformer.wte.weight", V, D)
		add("transformer.wpe.weight", c.MaxPos, D)
		for i := 0; i < c.Layers; i++ {
			p := fmt.Sprintf("transformer.h.%d.", i)
			add(p+"ln_1.weight", D)
			add(p+"ln_1.bias", D)
			lin(p+"attn.c_attn", 3*D, D, true, true)
			lin(p+"attn.c_proj", D, D, true, true)
			add(p+"ln_2.weight", D)
			add(p+"ln_2.bias", D)
			lin(p+"mlp.c_fc", F, D, true, true)
			lin(p+"mlp.c_proj", D, F, true, true)
		}
		add("transformer.ln_f.weight", D)
		add("transformer.ln_f.bias", D)
	} else {
		add("model.embed_tokens.weight", V, D)
		for i := 0; i < c.Layers; i++ {
			p := fmt.Sprintf("model.layers.%d.", i)
			if !c.PostNorm {
				add(p+"input_layernorm.weight", D)
			}
			if c.Fused {
				lin(p+"self_attn.qkv_proj", c.QDim()+2*c.KVDim(), D, false, false)
			} else {
				lin(p+"self_attn.q_proj", c.QDim(), D, c.QKVBias, false)
				lin(p+"self_attn.k_proj", c.KVDim(), D, c.QKVBias, false)
				lin(p+"self_attn.v_proj", c.KVDim(), D, c.QKVBias, false)
			}
			if c.QKNorm {
				qn, kn := c.HeadDim, c.HeadDim
				if c.QKNormFull {
					qn, kn = c.QDim(), c.KVDim()
				}
				add(p+"self_attn.q_norm.weight", qn)
				add(p+"self_attn.k_norm.weight", kn)
			}
			lin(p+"self_attn.o_proj", D, c.QDim(), c.OBias, false)
			add(p+"post_attention_layernorm.weight", D)
			if c.Sandwich {
				add(p+"pre_feedforward_layernorm.weight", D)
			}
			if c.Sandwich || c.PostNorm {
				add(p+"post_feedforward_layernorm.weight", D)
			}
			if c.Fused {
				lin(p+"mlp.gate_up_proj", 2*F, D, false, false)
			} else {
				lin(p+"mlp.gate_proj", F, D, c.MLPBias, false)
				lin(p+"mlp.up_proj", F, D, c.MLPBias, false)
			}
			lin(p+"mlp.down_proj", D, F, c.MLPBias, false)
		}
		add("model.norm.weight", D)
	}
	if !c.TieEmbed {
		add("lm_head.weight", V, D)
	}
	return s
}

// build allocates the parameter buffer for c and wires the modules to their views. The
// linears whose weight name is a key of quantized get that 4-bit weight instead: their dense
// weight is never allocated and is not among m.Params.
func build(c *Config, quantized map[string]*quant.Weight) (*Model, error) {
	return buildBF16(c, quantized, nil)
}

// buildBF16 is build with the tensors named in bf16 held as bf16 (Param.BF16), outside the
// parameter buffer.
func buildBF16(c *Config, quantized map[string]*quant.Weight, bf16 map[string]bool) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	specs := slices.DeleteFunc(layout(c), func(sp paramSpec) bool { return quantized[sp.name] != nil })
	total := 0
	for _, sp := range specs {
		if !bf16[sp.name] {
			total += numel(sp.shape)
		}
	}
	m := &Model{Config: *c, data: make([]float32, total)}
	byName := make(map[string]*Param, len(specs))
	off := 0
	for _, sp := range specs {
		n := numel(sp.shape)
		p := &Param{Name: sp.name, Shape: sp.shape, Off: off, conv1D: sp.conv1D}
		if bf16[sp.name] {
			p.BF16 = make([]uint16, n)
		} else {
			p.Data = m.data[off : off+n : off+n]
			off += n
		}
		m.Params = append(m.Params, p)
		byName[p.Name] = p
	}
	linear := func(name string, in, out int) *Linear {
		l := &Linear{Name: name, In: in, Out: out, bias: byName[name+".bias"]}
		if q := quantized[name+".weight"]; q != nil {
			l.W = &Quantized{W: q}
		} else {
			l.weight = byName[name+".weight"]
			l.W = &Dense{Out: out, In: in, W: l.weight.Data}
		}
		return l
	}
	norm := func(name string) Norm { return Norm{W: byName[name+".weight"], B: byName[name+".bias"]} }
	D, F := c.Dim, c.Hidden
	m.Layers = make([]Layer, c.Layers)
	if c.Family() == GPT2 {
		m.Embed, m.PosEmb = byName["transformer.wte.weight"], byName["transformer.wpe.weight"]
		for i := range m.Layers {
			p := fmt.Sprintf("transformer.h.%d.", i)
			m.Layers[i] = Layer{
				Norm1: norm(p + "ln_1"), Norm2: norm(p + "ln_2"),
				QKV: linear(p+"attn.c_attn", D, 3*D), O: linear(p+"attn.c_proj", D, D),
				Up: linear(p+"mlp.c_fc", D, F), Down: linear(p+"mlp.c_proj", F, D),
			}
		}
		m.Final = norm("transformer.ln_f")
	} else {
		m.Embed = byName["model.embed_tokens.weight"]
		for i := range m.Layers {
			p := fmt.Sprintf("model.layers.%d.", i)
			L := Layer{Norm1: norm(p + "input_layernorm"), Norm2: norm(p + "post_attention_layernorm"),
				O: linear(p+"self_attn.o_proj", c.QDim(), D), Down: linear(p+"mlp.down_proj", F, D)}
			if c.Fused {
				L.QKV = linear(p+"self_attn.qkv_proj", D, c.QDim()+2*c.KVDim())
				L.GateUp = linear(p+"mlp.gate_up_proj", D, 2*F)
			} else {
				L.Q, L.K = linear(p+"self_attn.q_proj", D, c.QDim()), linear(p+"self_attn.k_proj", D, c.KVDim())
				L.V = linear(p+"self_attn.v_proj", D, c.KVDim())
				L.Gate, L.Up = linear(p+"mlp.gate_proj", D, F), linear(p+"mlp.up_proj", D, F)
			}
			if c.QKNorm {
				L.QNorm, L.KNorm = norm(p+"self_attn.q_norm"), norm(p+"self_attn.k_norm")
			}
			switch {
			case c.Sandwich: // gemma2/3: post_attention_layernorm follows attention
				L.PostAttn, L.Norm2 = L.Norm2, norm(p+"pre_feedforward_layernorm")
				L.PostMLP = norm(p + "post_feedforward_layernorm")
			case c.PostNorm: // olmo2: and nothing precedes it
				L.PostAttn, L.Norm1, L.Norm2 = L.Norm2, Norm{}, Norm{}
				L.PostMLP = norm(p + "post_feedforward_layernorm")
			}
			m.Layers[i] = L
		}
		m.Final = norm("model.norm")
		m.invFreq = [2][]float64{c.InvFreq(), c.LocalInvFreq()}
	}
	m.Head = m.Embed
	if !c.TieEmbed {
		m.Head = byName["lm_head.weight"]
		if q := quantized["lm_head.weight"]; q != nil {
			m.HeadQ = &Quantized{W: q}
		}
	}
	return m, nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// ropeTable returns the RoPE tables of layer l covering positions [0, n), growing them on
// demand (a context of 128k positions would otherwise cost tens of MB up front): the global
// ones, or gemma3's local ones for its sliding layers, or for a forward past the original
// context those of longrope's long factors or dynamic NTK's larger base (as transformers
// picks them by the forward's length). A partial rotary head passes its other dimensions
// through (HeadDim); longrope's and yarn's attention factor scales cos and sin.
func (m *Model) ropeTable(n, l int) (*backend.RoPETable, error) {
	m.ropeMu.Lock()
	defer m.ropeMu.Unlock()
	c, i := &m.Config, 0
	variant := c.RopeVariant(n)
	switch {
	case c.LocalRoPE(l):
		i = 1
	case variant != 0:
		i = 2
	}
	if m.rope[i] == nil || m.rope[i].MaxPos < n || i == 2 && m.variant != variant {
		size := 256
		for size < n {
			size *= 2
		}
		inv := m.invFreq[min(i, 1)]
		if i == 2 {
			inv = c.InvFreqAt(n)
		}
		b := m.Backend()
		r, err := b.NewRoPETable(inv, min(size, max(n, c.Context())))
		if err != nil {
			return nil, err
		}
		if c.RotaryDim > 0 {
			r.HeadDim = c.HeadDim
		}
		if f := c.RopeAttentionFactor(); f != 1 {
			if err := b.ScaleAll([]backend.Buf{r.Cos, r.Sin}, float32(f)); err != nil {
				return nil, err
			}
		}
		if old := m.rope[i]; old != nil {
			m.b.Free(old.Cos)
			m.b.Free(old.Sin)
		}
		m.rope[i] = r
		if i == 2 {
			m.variant = variant
		}
	}
	return m.rope[i], nil
}

// ReleaseReplaced frees the dense weights of the linears whose W was replaced (by a
// quantized weight, say): the parameter buffer is rebuilt with the tensors still in use,
// and the replaced ones leave m.Params. It returns the number of floats freed. Grads made
// before the call no longer match the layout.
func (m *Model) ReleaseReplaced() int {
	drop := map[*Param]bool{}
	for _, l := range m.Linears() {
		if l.weight != nil && !l.isDense() {
			drop[l.weight] = true
			l.weight = nil
		}
	}
	if len(drop) == 0 {
		return 0
	}
	return m.compact(drop)
}

// compact rebuilds the parameter buffer with the float32 tensors of m.Params not in drop
// (which leave m.Params), and returns the number of floats freed.
func (m *Model) compact(drop map[*Param]bool) int {
	total := 0
	// A new slice: the old one's tail would keep the dropped Params, and through their
	// Data the whole old buffer, reachable.
	kept := make([]*Param, 0, len(m.Params)-len(drop))
	for _, p := range m.Params {
		if !drop[p] {
			kept = append(kept, p)
			total += len(p.Data)
		}
	}
	freed := len(m.data) - total
	data := make([]float32, total)
	off := 0
	for _, p := range kept {
		if p.BF16 != nil { // not in the buffer
			continue
		}
		if p.dev.on != nil { // placed from the old buffer, which it would keep alive
			p.dev.on.Free(p.dev.buf)
			p.dev = devCopy{}
		}
		n := len(p.Data)
		copy(data[off:], p.Data)
		p.Data, p.Off = data[off:off+n:off+n], off
		off += n
	}
	// Dense weights still in use must see the new storage.
	for _, l := range m.Linears() {
		if l.weight != nil {
			l.W = &Dense{Out: l.Out, In: l.In, W: l.weight.Data}
		}
	}
	m.Params, m.data = kept, data
	return freed
}

// holdBF16 holds the token embedding and the LM head as bf16 (Param.BF16) when the base is
// 4-bit, so that they are frozen (adapters do not reach them, and full-parameter training
// needs the float32 base), and when every value is a bf16, as in released checkpoints: the
// same values in half the bytes, and half the bytes a decoded token reads for the head. A
// float32 model (trained here, or with float32 values) keeps them as float32.
func (m *Model) holdBF16() {
	quantized := false
	for _, l := range m.Linears() {
		if _, ok := l.W.(*Quantized); ok {
			quantized = true
			break
		}
	}
	if !quantized {
		return
	}
	changed := false
	for _, p := range []*Param{m.Embed, m.Head} {
		if p == nil || p.BF16 != nil || !allBF16(p.Data) {
			continue
		}
		p.BF16 = make([]uint16, len(p.Data))
		for i, v := range p.Data {
			p.BF16[i] = uint16(math.Float32bits(v) >> 16)
		}
		p.Data = nil
		changed = true
	}
	if changed {
		m.compact(nil)
	}
}

// allBF16 reports whether every value of x is a bfloat16 (its low 16 bits zero).
func allBF16(x []float32) bool {
	for _, v := range x {
		if math.Float32bits(v)&0xffff != 0 {
			return false
		}
	}
	return len(x) > 0
}
