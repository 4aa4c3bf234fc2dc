package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"rlhfstation/internal/testref"
)

// vocabCase is one case of llama.cpp's tokenizer test files: a text and the ids
// Hugging Face's tokenizer gives it without special tokens.
type vocabCase struct {
	text string
	ids  []int
}

// readVocabCases reads NAME.inp (each case followed by "\n__ggml_vocab_test__\n")
// and NAME.out (one line of space-separated ids per case).
func readVocabCases(t *testing.T, name string) []vocabCase {
	t.Helper()
	inp, err := os.ReadFile(testref.SharedData(t, "tokenizer-tests/"+name+".inp"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(testref.SharedData(t, "tokenizer-tests/"+name+".out"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	texts := strings.Split(string(inp), sep)
	if texts[len(texts)-1] != "" {
		t.Fatalf("%s.inp does not end with the separator", name)
	}
	texts = texts[:len(texts)-1]
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d texts but %d id lines", name, len(texts), len(lines))
	}
	cases := make([]vocabCase, len(texts))
	for i, text := range texts {
		cases[i].text = text
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", name, i+1, err)
			}
			cases[i].ids = append(cases[i].ids, id)
		}
	}
	return cases
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testVocabFile(t *testing.T, tokenizerRel, casesName string) {
	tok, err := Load(testref.SharedData(t, tokenizerRel))
	if err != nil {
		t.Fatal(err)
	}
	cases := readVocabCases(t, casesName)
	pass := 0
	for i, c := range cases {
		e := tok.Encode(c.text, false)
		if !equalInts(e.IDs, c.ids) {
			t.Errorf("case %d %q:\n got  %v\n want %v", i, c.text, e.IDs, c.ids)
			continue
		}
		pass++
		if got := tok.Decode(e.IDs, false); got != c.text {
			t.Errorf("case %d: decode(encode(x)) = %q, want %q", i, got, c.text)
		}
		checkOffsets(t, c.text, e)
	}
	t.Logf("%s with %s: %d/%d cases exact", casesName, tokenizerRel, pass, len(cases))
}

// checkOffsets asserts that the offsets of a byte-level encoding without a
// normalizer change tile the text: in order, contiguous, and each token's bytes are
// those of its range.
func checkOffsets(t *testing.T, text string, e Encoding) {
	t.Helper()
	pos := 0
	for i, o := range e.Offsets {
		if o[0] != pos || o[1] < o[0] || o[1] > len(text) {
			t.Fatalf("%q: token %d offsets %v, want start %d", text, i, o, pos)
		}
		pos = o[1]
	}
	if pos != len(text) {
		t.Fatalf("%q: offsets end at %d, want %d", text, pos, len(text))
	}
}

func TestGPT2Reference(t *testing.T) {
	testVocabFile(t, "tokenizers/gpt2/tokenizer.json", "ggml-vocab-gpt-2.gguf")
}

func TestQwen2Reference(t *testing.T) {
	testVocabFile(t, "tokenizers/qwen3/tokenizer.json", "ggml-vocab-qwen2.gguf")
}

// TestOffsetBytes checks that each token's range holds exactly its bytes.
func TestOffsetBytes(t *testing.T) {
	tok, err := Load(testref.SharedData(t, "tokenizers/qwen3/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello 🦙 wörld<|im_end|>  \n 333\t'RE"
	e := tok.Encode(text, false)
	checkOffsets(t, text, e)
	for i, id := range e.IDs {
		o := e.Offsets[i]
		if tok.IsSpecial(id) {
			if text[o[0]:o[1]] != tok.Token(id) {
				t.Errorf("special token %d at %v", id, o)
			}
			continue
		}
		if got := string(tok.TokenBytes(id)); got != text[o[0]:o[1]] {
			t.Errorf("token %d %q covers %q", id, got, text[o[0]:o[1]])
		}
	}
	if !utf8.ValidString(tok.Decode(e.IDs, true)) {
		t.Error("decode gave invalid UTF-8")
	}
}
