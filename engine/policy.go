package engine

import (
	"fmt"
	"path/filepath"
	"sync"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// Policy is a model folder's base (quantized as a run's [quant] table says) with one
// checkpoint's adapter at a time: the inspector's "generate from this checkpoint". It is a
// copy of its own, so it never disturbs a run in progress; it is safe for concurrent use.
type Policy struct {
	mu    sync.Mutex
	model *model.Model
	tok   *tokenizer.Tokenizer
	ckpt  string
}

// LoadPolicy loads dir's model and tokenizer and quantizes the base like a run would.
func LoadPolicy(dir string, q config.Quant) (*Policy, error) {
	m, tok, err := LoadModel(dir)
	if err != nil {
		return nil, err
	}
	if _, _, err := QuantizeLinears(m, q); err != nil {
		return nil, err
	}
	return &Policy{model: m, tok: tok}, nil
}

// LoadRunPolicy loads the policy the checkpoints of the run folder runDir adapt: the model and
// quantization its config.toml names (the built-in model when it names none; a run on
// $RLHFSTATION_MODEL records that folder).
func LoadRunPolicy(runDir string) (*Policy, error) {
	cfg, err := config.Load(filepath.Join(runDir, "config.toml"))
	if err != nil {
		return nil, err
	}
	dir := cfg.Model
	if dir == "" {
		if dir, err = builtin.Dir(); err != nil {
			return nil, err
		}
	}
	return LoadPolicy(dir, cfg.Quant)
}

// Generate continues prompt with the policy of checkpoint ckpt (greedy when temperature is 0).
func (p *Policy) Generate(ckpt, prompt string, maxNew int, temperature float32, seed uint64) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ckpt != p.ckpt {
		for _, l := range p.model.Linears() {
			l.Adapter = nil
		}
		p.ckpt = ""
		if _, err := AttachAdapter(p.model, ckpt); err != nil {
			return "", err
		}
		p.ckpt = ckpt
	}
	ids := p.tok.Encode(prompt, true).IDs
	if len(ids) == 0 {
		if p.model.Config.BOS < 0 {
			return "", fmt.Errorf("empty prompt")
		}
		ids = []int{p.model.Config.BOS}
	}
	g, err := p.model.Generate([][]int{ids}, model.GenerateOptions{MaxNewTokens: maxNew, Temperature: temperature, Seed: seed})
	if err != nil {
		return "", err
	}
	return p.tok.Decode(g.Tokens[0], true), nil
}
