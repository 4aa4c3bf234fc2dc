package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/safetensors"
)

// Save writes config.json and model.safetensors (float32, Hugging Face names and layouts,
// GPT-2's Conv1D weights as [in,out]) into dir, creating it; each file is written
// atomically. Weights replaced by non-dense ones (quantized) cannot be saved this way.
func (m *Model) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range m.Linears() {
		if !l.isDense() {
			return fmt.Errorf("save %s: %s has a non-dense weight", dir, l.Name)
		}
	}
	tensors := make([]safetensors.Tensor, 0, len(m.Params))
	for _, p := range m.Params {
		data, shape := p.Data, p.Shape
		if p.conv1D {
			out, in := p.Shape[0], p.Shape[1]
			data = make([]float32, len(p.Data))
			for o := 0; o < out; o++ {
				for i := 0; i < in; i++ {
					data[i*out+o] = p.Data[o*in+i]
				}
			}
			shape = []int{in, out}
		}
		tensors = append(tensors, safetensors.F32Tensor(p.Name, shape, data))
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	js, err := json.MarshalIndent(m.Config.hfJSON(), "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644)
}

// NewRandom makes a model of config c with weights drawn from a seeded generator the way
// Hugging Face initialises them: linears and embeddings N(0, 0.02²) (GPT-2's residual
// projections scaled by 1/√(2·Layers)), biases zero, norm weights one.
func NewRandom(c Config, seed uint64) (*Model, error) {
	m, err := build(&c)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d6f64656c))
	for _, p := range m.Params {
		name := p.Name
		switch {
		case len(p.Shape) == 1 && isNormWeight(name):
			for i := range p.Data {
				p.Data[i] = 1
			}
		case len(p.Shape) == 1: // biases
		default:
			std := 0.02
			if c.Family() == GPT2 && (strings.HasSuffix(name, "attn.c_proj.weight") || strings.HasSuffix(name, "mlp.c_proj.weight")) {
				std /= math.Sqrt(2 * float64(c.Layers))
			}
			for i := range p.Data {
				p.Data[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
	return m, nil
}

func isNormWeight(name string) bool {
	for _, s := range []string{"ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight", "norm.weight"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}
