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
// (bitsandbytes' skipped modules) load as usual and stay dense (Model.Prequantized).
func Load(dir string) (*Model, error) { return LoadWith(dir, LoadOptions{}) }

// LoadOptions say how LoadWith reads a folder.
type LoadOptions struct {
	// Quantize, when set, quantizes each dense linear of the blocks as it is read, tensor by
	// tensor from the mapped file, so the float32 copy of the base never exists: loading needs
	// the 4-bit base, the float32 embeddings, head and norms, one tensor's pages and a
	// quant.StagingLen buffer of float32 rows. The result is the one Load then Model.Quantize give, byte for byte. GPT-2's Conv1D
	// linears are read densely (Model.Quantize takes them after).
	Quantize *quant.Options // ignored for a bitsandbytes 4-bit folder: its plain linears stay 16-bit
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
		if sp.linear || sp.name == "lm_head.weight" { // a head stored 4-bit loads as Model.HeadQ
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
	if o.Quantize != nil && !declared {
		// After every shape is checked: each linear straight from the mapped file, a chunk of
		// rows at a time through one staging buffer, so no tensor's float32 copy is made (nor
		// left for the collector: an 8B load would peak gigabytes above what it keeps).
		staging := make([]float32, quant.StagingLen)
		for _, sp := range layout(cfg) {
			if !sp.linear || sp.conv1D || quantized[sp.name] != nil {
				continue
			}
			name, cols := names[sp.name], sp.shape[1]
			w, err := quant.QuantizeRows(sp.shape[0], cols, "float32", *o.Quantize, staging, func(dst []float32, r0 int) error {
				return set.Float32RangeInto(name, r0*cols, dst)
			})
			set.Release(name)
			if err != nil {
				return nil, fmt.Errorf("%s: quantizing %s: %w", weightFiles(set, dir), name, err)
			}
			quantized[sp.name] = w
			loadStats[0], loadStats[1] = loadStats[0]+4*int64(w.Len()), loadStats[1]+weightBytes(w)
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
	m.QuantizedAtLoad, m.Prequantized = loadStats, declared
	for _, p := range m.Params {
		if err := loadParam(set, p, names[p.Name], o.Quantize != nil); err != nil {
			return nil, err
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
// when p is held so). With release, it reads a chunk at a time and drops each chunk's pages
// once read, so an embedding holds a chunk's pages, not the tensor's.
func loadParam(set *safetensors.Set, p *Param, name string, release bool) error {
	if release {
		defer set.Release(name)
	}
	if p.BF16 != nil {
		raw, err := set.Bytes(name)
		if err != nil {
			return err
		}
		for lo := 0; lo < len(p.BF16); lo += quant.StagingLen {
			hi := min(len(p.BF16), lo+quant.StagingLen)
			for i := lo; i < hi; i++ {
				p.BF16[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
			}
			if release {
				set.ReleaseRange(name, lo, hi)
			}
		}
		return nil
	}
	if !p.conv1D {
		if !release {
			return set.Float32Into(name, p.Data)
		}
		for lo := 0; lo < len(p.Data); lo += quant.StagingLen {
			hi := min(len(p.Data), lo+quant.StagingLen)
			if err := set.Float32RangeInto(name, lo, p.Data[lo:hi]); err != nil {
				return err
			}
			set.ReleaseRange(name, lo, hi)
		}
		return nil
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
