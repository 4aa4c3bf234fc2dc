package tokenizer

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// fuzzSeedFiles are small tokenizer.json files of every layout the package reads, and
// some it refuses: FuzzLoad's seeds.
func fuzzSeedFiles() []string {
	sp := `"model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
		"vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "<0xE2>": 4, "<0x96>": 5, "<0x81>": 6,
			"▁": 7, "a": 8, "b": 9, "▁a": 10, "ab": 11, "▁ab": 12},
		"merges": ["▁ a", "a b", "▁ ab"]}`
	added := `"added_tokens": [{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
		{"id": 2, "content": "</s>", "special": true, "lstrip": true, "rstrip": true, "normalized": false}]`
	template := `"post_processor": {"type": "TemplateProcessing",
		"single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
		"pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "</s>", "type_id": 1}}],
		"special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}`
	llama2Dec := `"decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
		{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`
	return []string{
		`{` + added + `, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
			{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}, "pre_tokenizer": null, ` + template + `, ` + llama2Dec + `, ` + sp + `}`,
		`{` + added + `, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false},
			"decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false}, ` + sp + `}`,
		`{"normalizer": {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": "▁"},
			"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\d|▁"}, "behavior": "MergedWithNext", "invert": true},
			{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}]}, ` + llama2Dec + `, ` + sp + `}`,
		`{"pre_tokenizer": {"type": "Split", "pattern": {"String": ""}, "behavior": "Contiguous", "invert": false}, ` + sp + `}`,
		`{"added_tokens": [{"id": 4, "content": "<|end|>", "special": true}],
			"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
			"post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"},
			"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "Ġa": 3, "<|end|>": 4}, "merges": [["Ġ", "a"]]}}`,
		`{"model": {"type": "BPE", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>", "byte_fallback": true,
			"vocab": {"a": 0, "##b</w>": 1, "<0x23>": 2, "<0x62>": 3}, "merges": []}}`,
		`{"post_processor": {"type": "RobertaProcessing", "cls": ["<s>", 1], "sep": ["</s>", 2]}, ` + sp + `}`,
		`{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁a", -1.5]]}}`,
		`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}`,
		`{"model": null}`,
		`[]`,
	}
}

// FuzzLoad: any bytes given as a tokenizer.json are loaded or refused with an error,
// never a panic; a loaded tokenizer encodes, decodes and describes its tokens.
func FuzzLoad(f *testing.F) {
	for _, s := range fuzzSeedFiles() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parse(data)
		if err != nil {
			if tok != nil {
				t.Fatal("a tokenizer and an error")
			}
			return
		}
		for _, s := range []string{"", "ab a<s>b", " \u00a0▁x\n\n", "\xff\xfe<0x41>", "a</s>  b 12"} {
			e := tok.Encode(s, true)
			if len(e.IDs) != len(e.Offsets) {
				t.Fatalf("%d ids, %d offsets", len(e.IDs), len(e.Offsets))
			}
			for _, o := range e.Offsets {
				if o[0] < 0 || o[1] < o[0] || o[1] > len(s) {
					t.Fatalf("%q: offsets %v", s, o)
				}
			}
			if d := tok.Decode(e.IDs, false); !utf8.ValidString(d) {
				t.Fatalf("decode %v: invalid UTF-8 %q", e.IDs, d)
			}
			tok.Decode(e.IDs, true)
			tok.EncodePair(s, s, true)
		}
		for id := -1; id < min(tok.VocabSize(), 512)+1; id++ {
			tok.TokenBytes(id)
			tok.Token(id)
		}
	})
}

// roundTripToks are the tokenizers FuzzRoundTrip checks, loaded once per process.
var roundTripToks = sync.OnceValues(func() (map[string]*Tokenizer, error) {
	toks := map[string]*Tokenizer{}
	trained, err := Train([]string{"hello world 12345 the cat sat on the mat", "héllo wörld 🦙 naïve café"}, 400, []string{"<|endoftext|>"})
	if err != nil {
		return nil, err
	}
	toks["trained"] = trained
	return toks, nil
})

// FuzzRoundTrip: decode(encode(text)) gives the text back for byte-level tokenizers
// (GPT-2's and one trained here) and SentencePiece-style ones (Mistral's and Gemma-3's),
// for any valid UTF-8 text (SentencePiece-style: without '▁', which decodes to a space,
// nor, for Mistral, a special token, after which the Llama-2 layout adds a space); the
// Metaspace layout gives the Llama-2 layout's ids (but at the start, see below); and no
// text, valid UTF-8 or not, upsets any of them.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", " ", "Hello world", "  leading\n\ttabs  ", "émigré 🦙 日本語", "<s>x</s>", "<|endoftext|>a",
		"<start_of_turn>user\nhi<end_of_turn>", "1234567 3.14", "\xff\xfeab\xe2\x96", "a\u0301\u200d", "▁▁x"} {
		f.Add(s)
	}
	toks, err := roundTripToks()
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"gpt2", "mistral", "gemma3"} {
		toks[name] = loadShared(f, name)
	}
	meta, err := parse(fileVariant(f, "mistral", metaspaceLayout))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, tok := range toks {
			e := tok.Encode(s, false)
			got := tok.Decode(e.IDs, false)
			byteLevel := tok.byteDecoder
			switch {
			case byteLevel && got != lossyUTF8([]byte(s)):
				t.Errorf("%s: %q → %v → %q", name, s, e.IDs, got)
			case !utf8.ValidString(got):
				t.Errorf("%s: %q decodes to invalid UTF-8 %q", name, s, got)
			case !byteLevel && utf8.ValidString(s) && !strings.Contains(s, "▁") &&
				!(name == "mistral" && len(splitAdded(tok, s)) > 1) && got != s:
				t.Errorf("%s: %q → %v → %q", name, s, e.IDs, got)
			}
			for _, o := range e.Offsets {
				if o[0] < 0 || o[1] < o[0] || o[1] > len(s) {
					t.Fatalf("%s: %q: offsets %v", name, s, o)
				}
			}
		}
		// Metaspace prepends no '▁' to a text that starts with one (or with a space, which
		// becomes one); the Llama-2 layout always does.
		if utf8.ValidString(s) && !strings.HasPrefix(s, " ") && !strings.HasPrefix(s, "▁") && len(splitAdded(toks["mistral"], s)) <= 1 {
			want := toks["mistral"].Encode(s, false).IDs
			if got := meta.Encode(s, false).IDs; !equalInts(got, want) {
				t.Errorf("Metaspace layout: %q → %v, Llama-2 layout %v", s, got, want)
			}
		}
	})
}

// The seed files are valid JSON: a seed that is not would only test the JSON reader.
func TestFuzzSeedsAreJSON(t *testing.T) {
	for i, s := range fuzzSeedFiles() {
		if !json.Valid([]byte(s)) {
			t.Errorf("seed %d is not JSON", i)
		}
	}
}
