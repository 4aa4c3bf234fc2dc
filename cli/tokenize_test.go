package cli

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

func TestTokenizeCommand(t *testing.T) {
	dir := filepath.Dir(testref.SharedData(t, "tokenizers/gpt2/tokenizer.json"))

	code, out, errOut := runCaptured(t, "tokenize", "--model", dir, "--json", "Hello world<|endoftext|>")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		IDs     []int    `json:"ids"`
		Tokens  []string `json:"tokens"`
		Offsets [][2]int `json:"offsets"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, out)
	}
	want := []int{15496, 995, 50256}
	if !reflect.DeepEqual(doc.IDs, want) || !reflect.DeepEqual(doc.Tokens, []string{"Hello", "Ġworld", "<|endoftext|>"}) ||
		!reflect.DeepEqual(doc.Offsets, [][2]int{{0, 5}, {5, 11}, {11, 24}}) {
		t.Errorf("json %+v", doc)
	}

	// Flags after the text; the human table quotes each token's bytes.
	code, out, errOut = runCaptured(t, "tokenize", "🦙 ok", "--model", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantTable := "   id  token\n" +
		" 8582  \"\\xf0\\x9f\"\n" +
		"   99  \"\\xa6\"\n" +
		"  247  \"\\x99\"\n" +
		"12876  \" ok\"\n" +
		"4 tokens\n"
	if out != wantTable {
		t.Errorf("table:\n%s\nwant:\n%s", out, wantTable)
	}

	if code, _, errOut = runCaptured(t, "tokenize", "--model", dir); code != exitUsage || !strings.Contains(errOut, "needs a TEXT") {
		t.Errorf("no text: exit %d, %q", code, errOut)
	}
	if code, _, errOut = runCaptured(t, "tokenize", "--model", t.TempDir(), "x"); code != exitFailed || !strings.Contains(errOut, "tokenizer.json") {
		t.Errorf("no tokenizer.json: exit %d, %q", code, errOut)
	}
}
