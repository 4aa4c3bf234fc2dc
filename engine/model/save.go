package model

import (
	"math"
	"math/rand/v2"
	"strings"

	"rlhfstation/safetensors"
)

// Save writes config.json and model.safetensors (float32, Hugging Face names and layouts,
// GPT-2's Conv1D weights as [in,out]) into dir, creating it; each file is written
// atomically. 4-bit linears are written in bitsandbytes' layout with a quantization_config
// in config.json, so that Load, and transformers with bitsandbytes, read the folder back.
func (m *Model) Save(dir string) error { return m.SaveAs(dir, safetensors.F32) }

// NewRandom makes a model of config c with weights drawn from a seeded generator the way
// Hugging Face initialises them: linears and embeddings N(0, 0.02²) (GPT-2's residual
// projections scaled by 1/√(2·Layers)), biases zero, norm weights one.
func NewRandom(c Config, seed uint64) (*Model, error) {
	m, err := build(&c, nil)
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
