package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

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

// hubID matches a Hugging Face hub repository id, "owner/name".
var hubID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// AdapterBase is what an adapter trained on the model in dir records as its
// base_model_name_or_path, so that peft elsewhere finds the base: config.json's _name_or_path
// when it is a hub id (as save_pretrained leaves it), else the folder's absolute path (as
// peft records a local folder). The built-in model keeps its name, which --init-adapter
// resolves here; its refusals compare the folders' hashes either way (checkBase).
func AdapterBase(dir, name string) string {
	if name == BuiltinModelName {
		return name
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		var c struct {
			NameOrPath string `json:"_name_or_path"`
		}
		if json.Unmarshal(raw, &c) == nil && hubID.MatchString(c.NameOrPath) && !isDir(c.NameOrPath) {
			return c.NameOrPath
		}
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}
