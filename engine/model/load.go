package model

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// Load reads a Hugging Face model folder: config.json (and generation_config.json when
// present) and model.safetensors or a sharded model.safetensors.index.json, in F32, F16 or
// BF16, converted to float32. GPT-2 tensors may carry the transformer. prefix or not; a
// missing lm_head.weight means the head is tied to the token embedding.
//
// A folder in bitsandbytes' 4-bit layout (a quantization_config in config.json, as
// `rlhfstation quantize` or transformers write it) loads without the original: each linear
// stored 4-bit (its packed codes under <module>.weight, the quant state's tensors beside it)
// becomes a Quantized weight and is never expanded to float32; linears stored plainly
// (bitsandbytes' skipped modules) load as usual.
func Load(dir string) (*Model, error) { return LoadWith(dir, LoadOptions{}) }

// LoadOptions say how LoadWith reads a folder.
type LoadOptions struct {
	// Quantize, when set, quantizes each dense linear of the blocks as it is read, tensor by
	// tensor from the mapped file, so the float32 copy of the base never exists: loading needs
	// the 4-bit base, the float32 embeddings, head and norms, and one tensor's float32 at a
	// time. The result is the one Load then Model.Quantize give, byte for byte. GPT-2's Conv1D
	// linears are read densely (Model.Quantize takes them after).
	Quantize *quant.Options
}

// LoadWith is Load with options.
func LoadWith(dir string, o LoadOptions) (*Model, error) {
	if o.Quantize != nil {
		if err := o.Quantize.Check(); err != nil {
			return nil, err
		}
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	_, declared, err := quant.IsQuantized(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	if !cfg.TieEmbed {
		if _, ok := set.Info("lm_head.weight"); !ok {
			cfg.TieEmbed = true
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	// Every tensor is found and its shape checked before anything is allocated, so a
	// config that lies about the sizes fails here instead of allocating what it claims.
	names := map[string]string{}
	quantized := map[string]*quant.Weight{}
	var loadStats [2]int64
	for _, sp := range layout(cfg) {
		if sp.linear {
			w, err := loadQuantized(set, sp, dir)
			if err != nil {
				return nil, err
			}
			if w != nil {
				quantized[sp.name] = w
				continue
			}
		}
		name, err := findTensor(set, sp, dir)
		if err != nil {
			if declared && sp.linear {
				return nil, fmt.Errorf("%w (config.json declares 4-bit weights, but this one has no quant state)", err)
			}
			return nil, err
		}
		names[sp.name] = name
	}
	if o.Quantize != nil {
		// After every shape is checked: a tensor at a time, its float32 dropped once quantized.
		for _, sp := range layout(cfg) {
			if !sp.linear || sp.conv1D || quantized[sp.name] != nil {
				continue
			}
			x, _, err := set.Float32(names[sp.name])
			if err != nil {
				return nil, err
			}
			set.Release(names[sp.name])
			w, err := quant.Quantize(x, sp.shape[0], sp.shape[1], "float32", *o.Quantize)
			if err != nil {
				return nil, fmt.Errorf("%s: quantizing %s: %w", weightFiles(set, dir), names[sp.name], err)
			}
			quantized[sp.name] = w
			m := weightBytes(w)
			loadStats[0], loadStats[1] = loadStats[0]+4*int64(len(x)), loadStats[1]+m
		}
	}
	// Over a 4-bit base the embedding and head stored in bf16 are read as they are (holdBF16).
	bf16 := map[string]bool{}
	if len(quantized) > 0 {
		for _, name := range []string{"model.embed_tokens.weight", "transformer.wte.weight", "lm_head.weight"} {
			if info, ok := set.Info(names[name]); ok && names[name] != "" && info.DType == safetensors.BF16 {
				bf16[name] = true
			}
		}
	}
	m, err := buildBF16(cfg, quantized, bf16)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	m.QuantizedAtLoad = loadStats
	for _, p := range m.Params {
		if err := loadParam(set, p, names[p.Name]); err != nil {
			return nil, err
		}
		if o.Quantize != nil {
			set.Release(names[p.Name])
		}
		if i := FirstNonFinite(p.Data); i >= 0 {
			return nil, fmt.Errorf("%s: tensor %s holds %v at index %d: a model with non-finite weights computes nothing usable",
				weightFiles(set, dir), names[p.Name], p.Data[i], i)
		}
		for i, h := range p.BF16 {
			if h&0x7f80 == 0x7f80 {
				return nil, fmt.Errorf("%s: tensor %s holds %v at index %d: a model with non-finite weights computes nothing usable",
					weightFiles(set, dir), names[p.Name], safetensors.BF16ToF32(h), i)
			}
		}
	}
	m.holdBF16()
	for name, w := range quantized {
		for _, scales := range [][]float32{w.Absmax, w.NestedAbsmax, {w.Offset}} {
			if i := FirstNonFinite(scales); i >= 0 {
				return nil, fmt.Errorf("%s: the 4-bit scales of %s hold %v: a model with non-finite weights computes nothing usable",
					weightFiles(set, dir), name, scales[i])
			}
		}
	}
	return m, nil
}

// FirstNonFinite returns the index of the first NaN or ±Inf in x, −1 when there is none.
func FirstNonFinite(x []float32) int {
	for i, v := range x {
		if v-v != 0 { // NaN and ±Inf alone give a non-zero (NaN) difference
			return i
		}
	}
	return -1
}

// loadQuantized reads the linear weight sp when the set holds it in bitsandbytes' 4-bit
// layout (nil, nil when it is a plain tensor), checking its shape: [out,in] for every family,
// as bitsandbytes quantizes GPT-2's Conv1D weights transposed.
func loadQuantized(set *safetensors.Set, sp paramSpec, dir string) (*quant.Weight, error) {
	name := sp.name
	if _, ok := set.Info(name); !ok && strings.HasPrefix(name, "transformer.") {
		if _, ok := set.Info(strings.TrimPrefix(name, "transformer.")); ok {
			name = strings.TrimPrefix(name, "transformer.")
		}
	}
	w, ok, err := quant.LoadWeight(set, strings.TrimSuffix(name, ".weight"))
	if err != nil || !ok {
		return nil, err
	}
	if w.Rows != sp.shape[0] || w.Cols != sp.shape[1] {
		where := weightFiles(set, dir)
		if f, found := set.File(name); found {
			where = f.Path
		}
		return nil, fmt.Errorf("%s: tensor %s is quantized with shape [%d %d], expected %v", where, name, w.Rows, w.Cols, sp.shape)
	}
	return w, nil
}

// findTensor returns the name under which the set holds sp, checking its shape.
func findTensor(set *safetensors.Set, sp paramSpec, dir string) (string, error) {
	name := sp.name
	info, ok := set.Info(name)
	if !ok && strings.HasPrefix(name, "transformer.") {
		// GPT-2 checkpoints saved from GPT2Model lack the prefix.
		if info, ok = set.Info(strings.TrimPrefix(name, "transformer.")); ok {
			name = info.Name
		}
	}
	if !ok {
		return "", fmt.Errorf("%s: tensor %s is missing", weightFiles(set, dir), sp.name)
	}
	where := weightFiles(set, dir)
	if f, found := set.File(name); found {
		where = f.Path
	}
	want := sp.shape
	if sp.conv1D {
		want = []int{sp.shape[1], sp.shape[0]}
	}
	if !slices.Equal(info.Shape, want) {
		return "", fmt.Errorf("%s: tensor %s has shape %v, expected %v", where, name, info.Shape, want)
	}
	return name, nil
}

// loadParam fills p from the set's tensor of that name (shape already checked; a BF16 tensor
// when p is held so).
func loadParam(set *safetensors.Set, p *Param, name string) error {
	if p.BF16 != nil {
		raw, err := set.Bytes(name)
		if err != nil {
			return err
		}
		for i := range p.BF16 {
			p.BF16[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
		return nil
	}
	if !p.conv1D {
		return set.Float32Into(name, p.Data)
	}
	src, _, err := set.Float32(name)
	if err != nil {
		return err
	}
	in, out := p.Shape[1], p.Shape[0]
	for i := 0; i < in; i++ {
		for o := 0; o < out; o++ {
			p.Data[o*in+i] = src[i*out+o]
		}
	}
	return nil
}

// weightFiles names the weight file(s) of a set for error messages.
func weightFiles(set *safetensors.Set, dir string) string {
	if set.Index != "" {
		return set.Index
	}
	return filepath.Join(dir, safetensors.SingleFile)
}
