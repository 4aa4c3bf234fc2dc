package tokenizer

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func trainedMerges(t *testing.T, tok *Tokenizer) []string {
	t.Helper()
	var f struct {
		Model struct {
			Merges []string       `json:"merges"`
			Vocab  map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tok.raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Model.Merges
}

// The merges below were worked out by hand: pre-tokens "low", " lower", " lowest",
// " low"×2; (l,o) and (o,w) both count 5 and 'l' has the smaller id; once the count-1
// pairs remain, ties go to the smaller left id, then the smaller right id.
func TestTrainMerges(t *testing.T) {
	texts := []string{"low lower lowest low low", "<|endoftext|>"}
	tok, err := Train(texts, 300, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"l o", "lo w", "Ġ low", "Ġlow e", "s t", "Ġlowe r", "Ġlowe st"}
	if got := trainedMerges(t, tok); !reflect.DeepEqual(got, want) {
		t.Fatalf("merges %q, want %q", got, want)
	}
	if tok.VocabSize() != 1+256+len(want) { // stops when no pair is left
		t.Errorf("vocab size %d", tok.VocabSize())
	}
	if id, ok := tok.TokenID("<|endoftext|>"); !ok || id != 0 || !tok.IsSpecial(0) {
		t.Errorf("special token id %d %v", id, ok)
	}
	if id, _ := tok.TokenID("!"); id != 1 { // bytes follow the specials, '!' first
		t.Errorf("id of '!' = %d, want 1", id)
	}
	e := tok.Encode("lowest low<|endoftext|>", false)
	var got []string
	for _, id := range e.IDs {
		got = append(got, tok.Token(id))
	}
	if want := []string{"low", "e", "st", "Ġlow", "<|endoftext|>"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tokens %q, want %q", got, want)
	}

	// A smaller vocabulary stops after its merges.
	small, err := Train(texts, 1+256+3, []string{"<|endoftext|>"})
	if err != nil {
		t.Fatal(err)
	}
	if got := trainedMerges(t, small); !reflect.DeepEqual(got, want[:3]) {
		t.Errorf("3 merges: %q", got)
	}
}

func TestTrainSaveLoad(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	words := []string{"the", "cat", "sat", "on", "mat", "42", "1234", "Über", "naïve", "🦙", "x=y+1;", "don't", "IT'S"}
	var texts []string
	for range 200 {
		var b strings.Builder
		for range 30 {
			b.WriteString(words[rng.Intn(len(words))])
			b.WriteString([]string{" ", "  ", "\n", ", ", "\t"}[rng.Intn(5)])
		}
		texts = append(texts, b.String())
	}
	specials := []string{"<|endoftext|>", "<|pad|>"}
	tok, err := Train(texts, 300, specials)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Train(texts, 300, specials)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tok.raw, again.raw) {
		t.Fatal("training twice gave different files")
	}
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "tokenizer.json" {
		t.Fatalf("folder holds %v", entries)
	}
	back, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != tok.Hash() || back.VocabSize() != 300 {
		t.Fatalf("hash %s vs %s, vocab %d", back.Hash(), tok.Hash(), back.VocabSize())
	}
	for _, text := range append(texts[:20], "<|pad|>12345 Über<|endoftext|>", "ünseen wörds 🦀") {
		a, b := tok.Encode(text, true), back.Encode(text, true)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%q: encodings differ after save/load", text)
		}
		if got := back.Decode(b.IDs, false); got != text {
			t.Fatalf("decode(encode(%q)) = %q", text, got)
		}
		checkOffsets(t, text, b)
	}
	// Digits are one token each: the pattern splits every number into digits.
	e := back.Encode("1234", false)
	if len(e.IDs) != 4 {
		t.Errorf("1234 → %d tokens", len(e.IDs))
	}
}

func TestTrainErrors(t *testing.T) {
	if _, err := Train([]string{"a"}, 200, nil); err == nil {
		t.Error("vocabulary below 256 accepted")
	}
	if _, err := Train([]string{"a"}, 300, []string{"<s>", "<s>"}); err == nil {
		t.Error("repeated special accepted")
	}
}
