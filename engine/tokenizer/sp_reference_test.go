package tokenizer

import (
	"encoding/json"
	"os"
	"testing"

	"rlhfstation/internal/testref"
)

// hfCase is one case of ../shared/data/tokenizer-tests/hf-NAME.json: a text, the ids
// Hugging Face's tokenizer gives it without and with special tokens, and its decode of
// the ids (special tokens kept).
type hfCase struct {
	Text        string `json:"text"`
	IDs         []int  `json:"ids"`
	WithSpecial []int  `json:"ids_with_special_tokens"`
	Decoded     string `json:"decoded"`
}

func readHFCases(t testing.TB, name string) []hfCase {
	t.Helper()
	data, err := os.ReadFile(testref.SharedData(t, "tokenizer-tests/hf-"+name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []hfCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatalf("hf-%s.json: %v", name, err)
	}
	if len(cases) == 0 {
		t.Fatalf("hf-%s.json has no cases", name)
	}
	return cases
}

// loadShared loads ../shared/data/tokenizers/NAME once per test binary.
var sharedToks = map[string]*Tokenizer{}

func loadShared(t testing.TB, name string) *Tokenizer {
	t.Helper()
	if tok := sharedToks[name]; tok != nil {
		return tok
	}
	tok, err := Load(testref.SharedData(t, "tokenizers/"+name))
	if err != nil {
		t.Fatal(err)
	}
	sharedToks[name] = tok
	return tok
}

func checkHFCases(t *testing.T, tok *Tokenizer, cases []hfCase) {
	t.Helper()
	pass := 0
	for i, c := range cases {
		ok := true
		e := tok.Encode(c.Text, false)
		if !equalInts(e.IDs, c.IDs) {
			t.Errorf("case %d %q:\n got  %v\n want %v", i, c.Text, e.IDs, c.IDs)
			ok = false
		}
		if got := tok.Encode(c.Text, true).IDs; !equalInts(got, c.WithSpecial) {
			t.Errorf("case %d %q with special tokens:\n got  %v\n want %v", i, c.Text, got, c.WithSpecial)
			ok = false
		}
		if got := tok.Decode(c.IDs, false); got != c.Decoded {
			t.Errorf("case %d: decode %v = %q, want %q", i, c.IDs, got, c.Decoded)
			ok = false
		}
		if ok {
			pass++
		}
	}
	t.Logf("%d/%d cases identical to Hugging Face's", pass, len(cases))
}

func TestMistralReference(t *testing.T) {
	checkHFCases(t, loadShared(t, "mistral"), readHFCases(t, "mistral"))
}

func TestGemma3Reference(t *testing.T) {
	checkHFCases(t, loadShared(t, "gemma3"), readHFCases(t, "gemma3"))
}
