package engine

import (
	"os"
	"path/filepath"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
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
	m, err := model.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
}
