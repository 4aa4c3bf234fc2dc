package tokenizer

import (
	"encoding/json"
	"reflect"
	"testing"
)

// variant trains a small tokenizer and rewrites its tokenizer.json with mutate, to
// make files of other shapes (Llama-3 style, with a normalizer...) without copying any.
func variant(t *testing.T, mutate func(f map[string]any)) *Tokenizer {
	t.Helper()
	base, err := Train([]string{"hello world 12345", "the cat sat on the mat"}, 300, []string{"<|begin_of_text|>", "<|end_of_text|>"})
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(base.raw, &f); err != nil {
		t.Fatal(err)
	}
	mutate(f)
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func model(f map[string]any) map[string]any { return f["model"].(map[string]any) }

func tokenStrings(tok *Tokenizer, ids []int) []string {
	var out []string
	for _, id := range ids {
		out = append(out, tok.Token(id))
	}
	return out
}

// llama3Style sets Llama-3's split pattern, a BOS template and ignore_merges, and
// adds a vocabulary entry "123" that no merge builds.
func llama3Style(ignoreMerges bool) func(map[string]any) {
	return func(f map[string]any) {
		f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": llama3Pattern}
		m := model(f)
		m["ignore_merges"] = ignoreMerges
		m["vocab"].(map[string]any)["123"] = 300
		f["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
				"pair":           []any{},
				"special_tokens": map[string]any{"<|begin_of_text|>": map[string]any{"id": "<|begin_of_text|>", "ids": []any{0}, "tokens": []any{"<|begin_of_text|>"}}}},
		}}
	}
}

func TestLlama3StyleFile(t *testing.T) {
	tok := variant(t, llama3Style(true))
	e := tok.Encode("1234567", true)
	if got, want := tokenStrings(tok, e.IDs), []string{"<|begin_of_text|>", "123", "4", "5", "6", "7"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("tokens %q, want %q", got, want)
	}
	if want := [][2]int{{0, 0}, {0, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}}; !reflect.DeepEqual(e.Offsets, want) {
		t.Errorf("offsets %v, want %v", e.Offsets, want)
	}
	if got := tok.Decode(e.IDs, true); got != "1234567" {
		t.Errorf("decode skipping specials: %q", got)
	}
	if got := tok.Decode(e.IDs, false); got != "<|begin_of_text|>1234567" {
		t.Errorf("decode: %q", got)
	}
	if tok.TokenBytes(0) != nil || string(tok.TokenBytes(e.IDs[1])) != "123" {
		t.Errorf("TokenBytes: %q %q", tok.TokenBytes(0), tok.TokenBytes(e.IDs[1]))
	}
	if tok.VocabSize() != 301 {
		t.Errorf("vocab size %d", tok.VocabSize())
	}
	// Without ignore_merges the entry is unreachable: no merge builds it.
	plain := variant(t, llama3Style(false))
	if got := tokenStrings(plain, plain.Encode("123", false).IDs); !reflect.DeepEqual(got, []string{"1", "2", "3"}) {
		t.Errorf("without ignore_merges: %q", got)
	}
}

func TestNormalizerOffsets(t *testing.T) {
	tok := variant(t, func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFC"} })
	text := "e\u0301x" // e + combining acute: NFC makes it é (2 bytes) from 3 bytes
	e := tok.Encode(text, false)
	if got := tok.Decode(e.IDs, false); got != "\u00e9x" {
		t.Fatalf("decode %q", got)
	}
	last := e.Offsets[len(e.Offsets)-1]
	if last != [2]int{3, 4} {
		t.Errorf("offsets %v: x should cover [3,4)", e.Offsets)
	}
	for _, o := range e.Offsets[:len(e.Offsets)-1] {
		if o != [2]int{0, 3} {
			t.Errorf("offsets %v: the bytes of é should cover [0,3)", e.Offsets)
		}
	}
}

func TestAddedTokenStrip(t *testing.T) {
	tok := variant(t, func(f map[string]any) {
		f["added_tokens"] = append(f["added_tokens"].([]any),
			map[string]any{"id": 301, "content": "<mask>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
			map[string]any{"id": 302, "content": "cat", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false})
	})
	e := tok.Encode("a <mask> b", false)
	if !reflect.DeepEqual(e.Offsets, [][2]int{{0, 1}, {1, 9}, {9, 10}}) || e.IDs[1] != 301 {
		t.Errorf("lstrip/rstrip: ids %v offsets %v", e.IDs, e.Offsets)
	}
	// single_word: "cat" alone is the added token, inside "cats" it is not.
	ids := tok.Encode("cat cats", false).IDs
	if ids[0] != 302 || len(ids) < 2 || ids[1] == 302 {
		t.Errorf("single_word: %v", tokenStrings(tok, ids))
	}
	if !tok.IsSpecial(301) || tok.IsSpecial(302) || tok.Decode([]int{301, 302}, true) != "cat" {
		t.Errorf("special flags: %q", tok.Decode([]int{301, 302}, true))
	}
}

func TestDecodeLossy(t *testing.T) {
	tok := variant(t, func(map[string]any) {})
	// A lone first half of a 3-byte character, then 'a': one U+FFFD for the two bytes.
	e2, _ := tok.TokenID(byteChar[0xE2])
	x82, _ := tok.TokenID(byteChar[0x82])
	a, _ := tok.TokenID("a")
	if got := tok.Decode([]int{e2, x82, a, x82, -5, 99999}, false); got != "\uFFFDa\uFFFD" {
		t.Errorf("lossy decode %q", got)
	}
}

func TestVocabMergesJSON(t *testing.T) {
	var v vocabJSON
	if err := json.Unmarshal([]byte(` { "a" : 0, "\"\\\u00e9" :1,"Ġb":  2 } `), &v); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(map[string]int(v), map[string]int{"a": 0, "\"\\é": 1, "Ġb": 2}) {
		t.Errorf("vocab %v", v)
	}
	for raw, want := range map[string]mergesJSON{
		`["a b", "\"x\" y"]`:         {{"a", "b"}, {`"x"`, "y"}},
		`[["a", "b"], [" ", "c d"]]`: {{"a", "b"}, {" ", "c d"}},
		`[]`:                         {},
	} {
		var m mergesJSON
		if err := json.Unmarshal([]byte(raw), &m); err != nil || !reflect.DeepEqual(m, want) {
			t.Errorf("%s: %q, %v", raw, m, err)
		}
	}
	for _, raw := range []string{`["a b c"]`, `["ab"]`, `[["a"]]`, `[["a","b","c"]]`, `[1]`} {
		var m mergesJSON
		if err := json.Unmarshal([]byte(raw), &m); err == nil {
			t.Errorf("%s accepted", raw)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := variant(t, func(map[string]any) {})
	texts := []string{"hello world", "the cat sat", "12345 on the mat", "héllo wörld"}
	want := make([]Encoding, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, true)
	}
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			ok := true
			for r := 0; r < 50; r++ {
				fresh := tok
				if r == 0 {
					fresh.model.mu.Lock()
					clear(fresh.model.cache)
					fresh.model.mu.Unlock()
				}
				for i, s := range texts {
					ok = ok && reflect.DeepEqual(fresh.Encode(s, true), want[i]) && fresh.Decode(want[i].IDs, false) == s
				}
			}
			done <- ok
		}()
	}
	for g := 0; g < 4; g++ {
		if !<-done {
			t.Error("concurrent encodings differ")
		}
	}
}
