package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

// TestMetaspaceLayout builds the layout of newer Llama-2 and TinyLlama files from
// Mistral's vocabulary (no normalizer; a Metaspace pre-tokenizer, prepend_scheme
// "first", no split; a Metaspace decoder) and checks it against Hugging Face's
// encodings of the Llama-2 layout. They agree on every text that neither starts with a
// space nor holds a special token. On the others Hugging Face's Metaspace differs from
// its Prepend normalizer, and the expected ids follow from the rule (TestAgainstHF
// checks them against the library itself): a text that starts with a space already
// starts with '▁', which is not doubled (" Hello" is "Hello" in the Llama-2 layout);
// text after a special token is not at the start, so gets no '▁'.
func TestMetaspaceLayout(t *testing.T) {
	llama2 := loadShared(t, "mistral")
	tok, err := parse(fileVariant(t, "mistral", metaspaceLayout))
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := llama2.TokenID("▁")
	same := 0
	for i, c := range readHFCases(t, "mistral") {
		var want []int
		for k, seg := range splitAdded(llama2, c.Text) {
			switch {
			case seg.added >= 0:
				want = append(want, seg.added)
			case seg.text == " ":
				want = append(want, meta)
			case strings.HasPrefix(seg.text, " "):
				want = append(want, llama2.Encode(seg.text[1:], false).IDs...)
			case k == 0:
				want = append(want, llama2.Encode(seg.text, false).IDs...)
			default:
				t.Fatalf("case %d %q: no rule for text after a special token that starts with no space", i, c.Text)
			}
		}
		if !strings.HasPrefix(c.Text, " ") && !strings.Contains(c.Text, "<s>") {
			want = c.IDs // Hugging Face's own
			same++
		}
		if got := tok.Encode(c.Text, false).IDs; !equalInts(got, want) {
			t.Errorf("case %d %q:\n got  %v\n want %v", i, c.Text, got, want)
			continue
		}
		if got := tok.Encode(c.Text, true).IDs; !equalInts(got, append([]int{1}, want...)) {
			t.Errorf("case %d %q with special tokens: %v", i, c.Text, got)
		}
		// The decoder drops the first token's '▁': a text that starts with spaces loses them.
		if got := tok.Decode(want, false); got != c.Text && !strings.HasPrefix(c.Text, " ") {
			t.Errorf("case %d: decode %v = %q, want %q", i, want, got, c.Text)
		}
	}
	t.Logf("%d texts with Hugging Face's ids of the Llama-2 layout", same)
	if same < 40 {
		t.Errorf("only %d texts compared with Hugging Face's ids", same)
	}
}

type segment struct {
	text  string
	added int // the added token's id, -1 for text
}

// splitAdded cuts text at the added tokens tok finds in it.
func splitAdded(tok *Tokenizer, text string) []segment {
	var out []segment
	pos := 0
	for _, m := range tok.rawAdded.find(text, nil) {
		if m.start > pos {
			out = append(out, segment{text[pos:m.start], -1})
		}
		out = append(out, segment{"", m.tok.id})
		pos = m.end
	}
	if pos < len(text) {
		out = append(out, segment{text[pos:], -1})
	}
	return out
}

// TestRefusals: tokenizers that cannot be read are refused naming the file and what is
// wrong with it.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, json string
		want       []string
	}{
		{"unigram", `{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["▁a", -1.5]]}}`,
			[]string{"Unigram", "not supported", "only BPE"}},
		{"wordpiece", `{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`, []string{`"WordPiece"`, "not supported", "only BPE"}},
		{"vocab-dup", `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 1}, "merges": []}}`,
			[]string{`"b"`, `"c"`, "same id 1"}},
		{"added-clash", `{"added_tokens": [{"id": 1, "content": "<x>", "special": true}], "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}}`,
			[]string{`"<x>"`, `"b"`, "id 1"}},
		{"added-dup", `{"added_tokens": [{"id": 2, "content": "<x>"}, {"id": 2, "content": "<y>"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
			[]string{`"<x>"`, `"<y>"`, "same id 2"}},
		{"huge-id", `{"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []}}`, []string{`"a"`, "99999999"}},
		{"bad-merge", `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}}`, []string{"merges[0]", "not in the vocabulary"}},
		{"metaspace", `{"pre_tokenizer": {"type": "Metaspace", "replacement": "ab"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
			[]string{"pre_tokenizer", "replacement", "one character"}},
		{"decoder", `{"decoder": {"type": "WordPiece"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
			[]string{"decoder", `"WordPiece"`, "supported: "}},
		{"template", `{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}], "pair": [], "special_tokens": {}}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`,
			[]string{"post_processor", `"<s>"`, "special_tokens"}},
		{"trailing", `{"model": null} x`, []string{"not a valid tokenizer.json"}},
	} {
		path := filepath.Join(dir, c.name+".json")
		if err := os.WriteFile(path, []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")+" not found") {
		t.Errorf("empty folder: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.model"), []byte("x"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.model but no tokenizer.json") {
		t.Errorf("folder with tokenizer.model: %v", err)
	}
}

// TestDecoderSteps checks decoder steps on token lists, as Hugging Face's decode_chain
// defines them.
func TestDecoderSteps(t *testing.T) {
	for _, c := range []struct {
		d    decoder
		in   []string
		want []string
	}{
		// Runs of byte tokens become text when valid UTF-8, else one U+FFFD per byte.
		{byteFallbackDec{}, []string{"a", "<0xE2>", "<0x96>", "<0x81>", "b", "<0xE2>", "<0x41>", "<0x0a>"}, []string{"a", "▁", "b", "\uFFFD", "\uFFFD", "\uFFFD"}},
		{byteFallbackDec{}, []string{"<0x4G>", "<0x41", "<0x+A>"}, []string{"<0x4G>", "<0x41", "\n"}},
		// Strip takes up to start copies from the front and stop from the end of each token.
		{stripDec{' ', 1, 2}, []string{"  a   ", " ", "", "b"}, []string{" a ", "", "", "b"}},
		{metaspaceDec{'▁', prependAlways}, []string{"▁▁a▁", "▁b"}, []string{"a", " b"}},
		{metaspaceDec{'▁', prependNever}, []string{"▁▁a▁", "▁b"}, []string{"  a ", " b"}},
		{fuseDec{}, []string{"a", "", "b"}, []string{"ab"}},
		{replaceDec{literalMatcher("▁"), " "}, []string{"▁a▁▁", "b"}, []string{" a  ", "b"}},
		{replaceDec{literalMatcher(""), "-"}, []string{"ab", ""}, []string{"-a-b-", ""}},
	} {
		if got := c.d.decodeChain(append([]string(nil), c.in...), false); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%T %q: got %q, want %q", c.d, c.in, got, c.want)
		}
	}
}

// TestTokenBytes: a SentencePiece-style token stands for its text inside a longer one:
// '▁' is a space, a byte token its byte, and the Strip of the first token does not apply.
func TestTokenBytes(t *testing.T) {
	tok := loadShared(t, "mistral")
	for tokStr, want := range map[string]string{"▁Hello": " Hello", "<0x0A>": "\n", "<0xE2>": "\xe2", "ing": "ing", "▁": " "} {
		id, ok := tok.TokenID(tokStr)
		if !ok {
			t.Fatalf("%q not in the vocabulary", tokStr)
		}
		if got := string(tok.TokenBytes(id)); got != want {
			t.Errorf("TokenBytes(%q) = %q, want %q", tokStr, got, want)
		}
	}
	if tok.TokenBytes(1) != nil { // <s>
		t.Error("a special token has bytes")
	}
	// Joined token bytes are the decoding, with the leading space Strip removes.
	text := "Hello wörld 🦙\n  x"
	var b []byte
	for _, id := range tok.Encode(text, false).IDs {
		b = append(b, tok.TokenBytes(id)...)
	}
	if string(b) != " "+text {
		t.Errorf("token bytes %q, want %q", b, " "+text)
	}
}

// TestChunkedMerge: merging a long SentencePiece-style word in chunks gives what
// merging it whole gives (Hugging Face's way), on the shared novel and random texts.
func TestChunkedMerge(t *testing.T) {
	novel, err := os.ReadFile(testref.SharedData(t, "corpus/moby-dick.txt"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(7))
	texts := randomTexts(rng, 300)
	for i := range texts {
		texts[i] = strings.Repeat(texts[i]+" ", 1+rng.Intn(4))
	}
	texts = append(texts, string(novel[:20000]), string(novel[300000:310000]))
	for _, name := range []string{"mistral", "gemma3"} {
		tok := loadShared(t, name)
		if tok.model.meta == "" {
			t.Fatalf("%s: merging in chunks is off", name)
		}
		chunked := 0
		for _, text := range texts {
			word, _ := tok.normalizer.normalize(text)
			got := tok.model.tokenize(word, nil)
			want := tok.model.merge(word, nil)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %q: chunks give %v, the whole word %v", name, text, got, want)
			}
			if len(word) >= chunkMin {
				chunked++
			}
		}
		t.Logf("%s: %d words merged in chunks, %d runes join a '▁'", name, chunked, len(tok.model.joined))
	}
}
