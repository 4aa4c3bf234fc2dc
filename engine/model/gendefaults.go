package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// GenerationFile is where a checkpoint keeps its sampling defaults.
const GenerationFile = "generation_config.json"

// GenDefaults is a checkpoint's generation_config.json: the defaults of `generate` and `eval`,
// as transformers' generate takes them. Absent values are nil.
type GenDefaults struct {
	Path        string   `json:"path,omitempty"` // "" when the folder has none
	DoSample    *bool    `json:"do_sample,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        *int     `json:"top_k,omitempty"`
	EOS         []int    `json:"eos_token_id,omitempty"`
	BOS         *int     `json:"bos_token_id,omitempty"`
	Pad         *int     `json:"pad_token_id,omitempty"`
}

// ReadGenDefaults reads dir/generation_config.json; a folder without one gives the zero value.
// Values of the wrong type are errors naming the key.
func ReadGenDefaults(dir string) (GenDefaults, error) {
	path := filepath.Join(dir, GenerationFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return GenDefaults{}, nil
	}
	if err != nil {
		return GenDefaults{}, err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return GenDefaults{}, fmt.Errorf("%s: %w", path, err)
	}
	g := GenDefaults{Path: path}
	f := fields(raw)
	num := func(key string) (*float64, error) {
		v, ok := raw[key]
		if !ok || v == nil {
			return nil, nil
		}
		x, isNum := v.(float64)
		if !isNum || math.IsNaN(x) || x < 0 {
			return nil, fmt.Errorf("%s: %s: want a number ≥ 0, got %s", path, key, describeJSON(v))
		}
		return &x, nil
	}
	id := func(key string) (*int, error) {
		if v, ok := raw[key]; !ok || v == nil {
			return nil, nil
		}
		n, err := f.tokenID(key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &n, nil
	}
	if v, ok := raw["do_sample"].(bool); ok {
		g.DoSample = &v
	}
	if g.Temperature, err = num("temperature"); err != nil {
		return g, err
	}
	if g.TopP, err = num("top_p"); err != nil {
		return g, err
	}
	if k, err := num("top_k"); err != nil {
		return g, err
	} else if k != nil {
		n := int(*k)
		g.TopK = &n
	}
	if g.EOS, err = f.tokenIDs("eos_token_id"); err != nil {
		return g, fmt.Errorf("%s: %w", path, err)
	}
	if g.BOS, err = id("bos_token_id"); err != nil {
		return g, err
	}
	if g.Pad, err = id("pad_token_id"); err != nil {
		return g, err
	}
	return g, nil
}

// Sampling gives the sampling settings transformers' generate uses by default: do_sample
// false means greedy (temperature 0 here); otherwise temperature, top_p and top_k as set,
// else transformers' 1.0, 1.0 and 50.
func (g GenDefaults) Sampling() (temperature, topP float64, topK int) {
	temperature, topP, topK = 1, 1, 50
	if g.DoSample != nil && !*g.DoSample {
		return 0, 1, 0
	}
	if g.Temperature != nil {
		temperature = *g.Temperature
	}
	if g.TopP != nil {
		topP = *g.TopP
	}
	if g.TopK != nil {
		topK = *g.TopK
	}
	return temperature, topP, topK
}
