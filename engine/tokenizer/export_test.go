package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

// TestExportCrossCheck writes a trained tokenizer and the shared ones, each with our
// encodings of test texts, into $TOKENIZER_EXPORT for testdata/hf_crosscheck.mjs.
func TestExportCrossCheck(t *testing.T) {
	dir := os.Getenv("TOKENIZER_EXPORT")
	if dir == "" {
		t.Skip("set TOKENIZER_EXPORT to a folder to write cross-check cases into")
	}
	os.MkdirAll(dir, 0o755)
	novel, err := os.ReadFile(testref.SharedData(t, "corpus/moby-dick.txt"))
	if err != nil {
		t.Fatal(err)
	}
	paras := strings.Split(string(novel), "\n\n")
	trained, err := Train(paras, 2048, []string{"<|endoftext|>", "<|pad|>"})
	if err != nil {
		t.Fatal(err)
	}
	texts := append([]string{}, readVocabTexts(t)...)
	for i := 0; i < len(paras); i += 97 {
		texts = append(texts, paras[i])
	}
	texts = append(texts, "a<|endoftext|>b <|pad|> 12345 3.14 I'VE 'll")
	write := func(name string, tok *Tokenizer) {
		if err := tok.Save(filepath.Join(dir, name+".json")); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(f)
		for _, s := range texts {
			enc.Encode(map[string]any{"text": s, "ids": append([]int{}, tok.Encode(s, false).IDs...)})
		}
		f.Close()
	}
	write("trained", trained)
	for _, name := range []string{"gpt2", "qwen3"} {
		tok, err := Load(testref.SharedData(t, "tokenizers/"+name+"/tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		write(name, tok)
	}
}

func readVocabTexts(t *testing.T) []string {
	var out []string
	for _, c := range readVocabCases(t, "ggml-vocab-qwen2.gguf") {
		out = append(out, c.text)
	}
	return out
}
