package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

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
// tokenizer.json, checking that every id the tokenizer can produce has an embedding.
func LoadModel(dir string) (*model.Model, *tokenizer.Tokenizer, error) {
	m, err := model.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, err
	}
	if tok.VocabSize() > m.Config.Vocab {
		return nil, nil, fmt.Errorf("%s: the tokenizer has %d tokens, the model's vocabulary only %d", dir, tok.VocabSize(), m.Config.Vocab)
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
