package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The files of a model folder that hold its template and special tokens.
const (
	ConfigFile       = "tokenizer_config.json"
	TemplateFile     = "chat_template.jinja"     // wins over the config's chat_template, as in transformers
	SpecialTokenFile = "special_tokens_map.json" // its tokens win over the config's, as in transformers
)

// tokenNames are the special-token attributes transformers hands every template
// (SPECIAL_TOKENS_ATTRIBUTES), each a string; additional_special_tokens is a list.
var tokenNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// Tokens are a tokenizer's special tokens as templates see them: bos_token and the like,
// only those set.
type Tokens struct {
	Named      map[string]string // "bos_token" → "<s>"
	Additional []string          // additional_special_tokens
}

// Folder is what a model folder says about chat: its template, if any, and its special
// tokens.
type Folder struct {
	Template *Template // nil when the folder has none
	Tokens   Tokens
}

// ReadFolder reads the chat template and special tokens of a model folder: chat_template.jinja
// when present, else tokenizer_config.json's chat_template (a string, or a list of {name,
// template} of which "default" is used). A folder without either has no template; it is not
// an error.
func ReadFolder(dir string) (Folder, error) {
	var f Folder
	cfgPath := filepath.Join(dir, ConfigFile)
	raw, err := readObject(cfgPath)
	if err != nil {
		return f, err
	}
	f.Tokens, err = specialTokens(cfgPath, raw)
	if err != nil {
		return f, err
	}
	mapPath := filepath.Join(dir, SpecialTokenFile)
	if m, err := readObject(mapPath); err != nil {
		return f, err
	} else if m != nil {
		over, err := specialTokens(mapPath, m)
		if err != nil {
			return f, err
		}
		for k, v := range over.Named {
			f.Tokens.Named[k] = v
		}
		if over.Additional != nil {
			f.Tokens.Additional = over.Additional
		}
	}

	jinjaPath := filepath.Join(dir, TemplateFile)
	if b, err := os.ReadFile(jinjaPath); err == nil {
		f.Template, err = Parse(string(b), jinjaPath, f.Tokens)
		return f, err
	} else if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if src, ok := raw["chat_template"]; ok {
		text, err := configTemplate(cfgPath, src)
		if err != nil || text == "" {
			return f, err
		}
		f.Template, err = Parse(text, cfgPath+": chat_template", f.Tokens)
		return f, err
	}
	return f, nil
}

// ReadFile reads a template named by the user: a tokenizer_config.json-style JSON file (its
// chat_template), or a file holding the template itself. tokens are the model's.
func ReadFile(path string, tokens Tokens) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	if strings.EqualFold(filepath.Ext(path), ".json") {
		raw, err := decodeObject(path, b)
		if err != nil {
			return nil, err
		}
		src, ok := raw["chat_template"]
		if !ok {
			return nil, fmt.Errorf("%s: no \"chat_template\" key (a .json file is read like tokenizer_config.json; give a template itself in a .jinja file)", path)
		}
		text, err := configTemplate(path, src)
		if err != nil {
			return nil, err
		}
		if text == "" {
			return nil, fmt.Errorf("%s: chat_template is empty", path)
		}
		return Parse(text, path+": chat_template", tokens)
	}
	return Parse(string(b), path, tokens)
}

// readObject reads a JSON object file; a missing file gives nil and no error.
func readObject(path string) (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeObject(path, b)
}

func decodeObject(path string, b []byte) (map[string]json.RawMessage, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %s", path, jsonError(b, err))
	}
	if raw == nil {
		return nil, fmt.Errorf("%s: not a JSON object", path)
	}
	return raw, nil
}

// jsonError says where in b a decoding error is, by line.
func jsonError(b []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
		return fmt.Sprintf("line %d: bad JSON: %v", line, err)
	}
	return "bad JSON: " + err.Error()
}

// configTemplate picks the template text of a chat_template value: a string, or a list of
// {name, template} where transformers uses "default". null gives "".
func configTemplate(path string, src json.RawMessage) (string, error) {
	var s *string
	if err := json.Unmarshal(src, &s); err == nil {
		if s == nil {
			return "", nil
		}
		return *s, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(src, &list); err != nil {
		return "", fmt.Errorf("%s: chat_template must be a string or a list of {\"name\", \"template\"}", path)
	}
	var names []string
	for i, t := range list {
		if t.Name == nil || t.Template == nil {
			return "", fmt.Errorf("%s: chat_template[%d] needs a \"name\" and a \"template\"", path, i)
		}
		if *t.Name == "default" {
			return *t.Template, nil
		}
		names = append(names, *t.Name)
	}
	return "", fmt.Errorf("%s: chat_template lists templates %s but none named \"default\"; pick one: save it in a .jinja file and set [data] chat_template to it",
		path, strings.Join(names, ", "))
}

// specialTokens reads the special tokens of a tokenizer_config.json or special_tokens_map.json:
// each a string or an AddedToken object {"content": ...}; null or absent means unset.
func specialTokens(path string, raw map[string]json.RawMessage) (Tokens, error) {
	t := Tokens{Named: map[string]string{}}
	for _, name := range tokenNames {
		v, ok := raw[name]
		if !ok {
			continue
		}
		s, err := tokenContent(v)
		if err != nil {
			return t, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		if s != "" {
			t.Named[name] = s
		}
	}
	if v, ok := raw["additional_special_tokens"]; ok && string(v) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return t, fmt.Errorf("%s: additional_special_tokens must be a list", path)
		}
		t.Additional = []string{}
		for i, item := range list {
			s, err := tokenContent(item)
			if err != nil {
				return t, fmt.Errorf("%s: additional_special_tokens[%d]: %w", path, i, err)
			}
			t.Additional = append(t.Additional, s)
		}
	}
	return t, nil
}

// tokenContent reads a token given as a string or as an AddedToken object.
func tokenContent(v json.RawMessage) (string, error) {
	var s *string
	if err := json.Unmarshal(v, &s); err == nil {
		if s == nil {
			return "", nil
		}
		return *s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(v, &obj); err != nil || obj.Content == nil {
		return "", errors.New(`must be a string or an object with "content"`)
	}
	return *obj.Content, nil
}
