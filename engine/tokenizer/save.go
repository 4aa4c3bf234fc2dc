package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"rlhfstation/internal/atomicfile"
)

// Save writes the tokenizer.json of t to path (or to path/tokenizer.json when path is
// a folder), atomically.
// A loaded tokenizer is written back byte for byte; a trained one as Hugging Face's
// tokenizers library lays the file out.
func (t *Tokenizer) Save(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	if err := atomicfile.WriteFile(path, t.raw, 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	return nil
}

// file lays out the tokenizer.json of a trained tokenizer: vocabulary in id order,
// merges as "left right" strings (the spelling every tokenizers version reads;
// byte-level tokens hold no space), specials as added tokens.
func (tr *trainer) file(specials []string) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range specials {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    {\n      \"id\": %d,\n      \"content\": %s,\n      \"single_word\": false,\n      \"lstrip\": false,\n      \"rstrip\": false,\n      \"normalized\": false,\n      \"special\": true\n    }", i, jsonString(s))
	}
	if len(specials) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("],\n  \"normalizer\": null,\n")
	fmt.Fprintf(&b, `  "pre_tokenizer": {
    "type": "Sequence",
    "pretokenizers": [
      {
        "type": "Split",
        "pattern": {
          "Regex": %s
        },
        "behavior": "Isolated",
        "invert": false
      },
      {
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": false,
        "use_regex": false
      }
    ]
  },
  "post_processor": {
    "type": "ByteLevel",
    "add_prefix_space": false,
    "trim_offsets": false,
    "use_regex": false
  },
  "decoder": {
    "type": "ByteLevel",
    "add_prefix_space": false,
    "trim_offsets": false,
    "use_regex": false
  },
  "model": {
    "type": "BPE",
    "dropout": null,
    "unk_token": null,
    "continuing_subword_prefix": null,
    "end_of_word_suffix": null,
    "fuse_unk": false,
    "byte_fallback": false,
    "ignore_merges": false,
    "vocab": {`, jsonString(TrainPattern))
	for id, tok := range tr.tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		b.WriteString(jsonString(tok))
		b.WriteString(": ")
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range tr.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		b.WriteString(jsonString(tr.tokens[m[0]] + " " + tr.tokens[m[1]]))
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return b.Bytes()
}

// jsonString quotes s for JSON without HTML escaping ("<|endoftext|>" stays readable).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}
