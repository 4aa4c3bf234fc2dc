package engine

import (
	"fmt"
	"os"
	"path/filepath"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/quant"
)

// BuiltinModelName is how events and messages name the built-in model.
const BuiltinModelName = "built-in"

// ModelDir picks the model folder to run on: dir when given, else $RLHFSTATION_MODEL, else the
// built-in model (extracted on first use).
func ModelDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if env := os.Getenv("RLHFSTATION_MODEL"); env != "" {
		return env, nil
	}
	return builtin.Dir()
}

// LoadModel loads a Hugging Face model folder: the model (config.json and its weights) and
// tokenizer.json. The two may differ in size (see vocab.go).
func LoadModel(dir string) (*model.Model, *tokenizer.Tokenizer, error) {
	return loadModel(dir, model.LoadOptions{})
}

// LoadModelQuantized is LoadModel for a run: the base's linears are quantized as q says while
// they are read, tensor by tensor from the mapped files, so the float32 base never exists.
func LoadModelQuantized(dir string, q config.Quant) (*model.Model, *tokenizer.Tokenizer, error) {
	var o model.LoadOptions
	if q.Type != "none" {
		t, err := quant.ParseType(q.Type)
		if err != nil {
			return nil, nil, fmt.Errorf("[quant] type: %w", err)
		}
		o.Quantize = &quant.Options{Type: t, BlockSize: q.BlockSize, DoubleQuant: q.DoubleQuant}
		if err := o.Quantize.Check(); err != nil {
			return nil, nil, fmt.Errorf("[quant]: %w", err)
		}
	}
	return loadModel(dir, o)
}

func loadModel(dir string, o model.LoadOptions) (*model.Model, *tokenizer.Tokenizer, error) {
	m, err := model.LoadWith(dir, o)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
}
