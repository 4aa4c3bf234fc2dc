package cli

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"rlhfstation/internal/testref"
)

// TestTokenizeSentencePiece: tokenize works on folders holding only a SentencePiece-style
// tokenizer (Mistral's Llama-2 layout, Gemma-3's), with Hugging Face's ids.
func TestTokenizeSentencePiece(t *testing.T) {
	for _, c := range []struct {
		name   string
		ids    []int
		tokens []string
	}{
		// Hugging Face's encode("Hello world") with special tokens.
		{"mistral", []int{1, 22557, 1526}, []string{"<s>", "▁Hello", "▁world"}},
		{"gemma3", []int{2, 9259, 1902}, []string{"<bos>", "Hello", "▁world"}},
	} {
		dir := filepath.Dir(testref.SharedData(t, "tokenizers/"+c.name+"/tokenizer.json"))
		code, out, errOut := runCaptured(t, "tokenize", "--model", dir, "--json", "Hello world")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errOut)
		}
		var doc struct {
			IDs    []int    `json:"ids"`
			Tokens []string `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
		if !reflect.DeepEqual(doc.IDs, c.ids) || !reflect.DeepEqual(doc.Tokens, c.tokens) {
			t.Errorf("%s: %+v, want %v %q", c.name, doc, c.ids, c.tokens)
		}
	}
}
