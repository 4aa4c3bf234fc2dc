package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"rlhfstation/internal/testref"
)

// The tests here run Hugging Face's tokenizers library itself (its Node binding, npm
// package "tokenizers", which .ci/hf-tokenizers installs) on tokenizer.json files
// and texts made here, and compare every id and decoding with ours.

// hfTokenizers returns node and the node_modules folder holding "tokenizers":
// $RLHFSTATION_HF_TOKENIZERS, else the folder .ci/hf-tokenizers installs into.
func hfTokenizers(t testing.TB) (node, modules string) {
	t.Helper()
	dir := os.Getenv("RLHFSTATION_HF_TOKENIZERS")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "rlhfstation", "hf-tokenizers")
	}
	modules = filepath.Join(dir, "node_modules")
	node, err := exec.LookPath("node")
	if err != nil {
		testref.Missing(t, "no node on PATH (Hugging Face's tokenizers run through Node; apt-get install nodejs)")
	}
	if _, err := os.Stat(filepath.Join(modules, "tokenizers", "package.json")); err != nil {
		testref.Missing(t, "Hugging Face's tokenizers for Node not found in %s (run .ci/hf-tokenizers)", modules)
	}
	return node, modules
}

// hfJob is a tokenizer.json and what to do with it, on both sides.
type hfJob struct {
	name    string
	data    []byte
	tok     *Tokenizer // ours, of data
	File    string     `json:"file"`
	Texts   []string   `json:"texts"`
	Pairs   [][]string `json:"pairs"`
	Decodes [][]int    `json:"decodes"`
}

type hfResult struct {
	Texts []struct {
		IDs     []int  `json:"ids"`
		Special []int  `json:"special"`
		Decoded string `json:"decoded"`
	} `json:"texts"`
	Pairs []struct {
		IDs     []int `json:"ids"`
		Special []int `json:"special"`
	} `json:"pairs"`
	Decodes [][2]string `json:"decodes"`
}

// runHF runs Hugging Face's tokenizers on the jobs.
func runHF(t *testing.T, jobs []*hfJob) []hfResult {
	t.Helper()
	node, modules := hfTokenizers(t)
	dir := t.TempDir()
	for i, j := range jobs {
		if j.File == "" {
			j.File = filepath.Join(dir, fmt.Sprintf("%d-%s.json", i, j.name))
			if err := os.WriteFile(j.File, j.data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	spec, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	jobsFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobsFile, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "hf_reference.cjs"), jobsFile)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Hugging Face's tokenizers failed: %v\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Log(stderr.String())
	}
	var res []hfResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(jobs) {
		t.Fatalf("reading Hugging Face's results: %v (%d for %d jobs)", err, len(res), len(jobs))
	}
	return res
}

// compareHF checks our encodings and decodings against Hugging Face's.
func compareHF(t *testing.T, j *hfJob, r hfResult) {
	t.Helper()
	tok := j.tok
	bad := 0
	fail := func(format string, args ...any) {
		if bad++; bad <= 8 {
			t.Errorf("%s: "+format, append([]any{j.name}, args...)...)
		}
	}
	for i, text := range j.Texts {
		want := r.Texts[i]
		if got := tok.Encode(text, false).IDs; !equalInts(got, want.IDs) {
			fail("%q:\n got  %v\n want %v", text, got, want.IDs)
			continue
		}
		if got := tok.Encode(text, true).IDs; !equalInts(got, want.Special) {
			fail("%q with special tokens:\n got  %v\n want %v", text, got, want.Special)
		}
		if got := tok.Decode(want.IDs, false); got != want.Decoded {
			fail("decode %v:\n got  %q\n want %q", want.IDs, got, want.Decoded)
		}
	}
	for i, p := range j.Pairs {
		want := r.Pairs[i]
		if got := tok.EncodePair(p[0], p[1], false).IDs; !equalInts(got, want.IDs) {
			fail("pair %q:\n got  %v\n want %v", p, got, want.IDs)
		}
		if got := tok.EncodePair(p[0], p[1], true).IDs; !equalInts(got, want.Special) {
			fail("pair %q with special tokens:\n got  %v\n want %v", p, got, want.Special)
		}
	}
	for i, ids := range j.Decodes {
		want := r.Decodes[i]
		if got := tok.Decode(ids, false); got != want[0] {
			fail("decode %v:\n got  %q\n want %q", ids, got, want[0])
		}
		if got := tok.Decode(ids, true); got != want[1] {
			fail("decode %v skipping special tokens:\n got  %q\n want %q", ids, got, want[1])
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d differences from Hugging Face", j.name, bad)
	}
}

// randomTexts makes n texts mixing what tokenizers find hard: runs of spaces and
// newlines, digits, punctuation, accents (composed and not), CJK, emoji with joiners,
// '▁' itself, special tokens' spellings, byte tokens' spellings, and random code points.
func randomTexts(rng *rand.Rand, n int) []string {
	bits := []string{" ", "  ", "   ", "\n", "\n\n", "\t", "\r\n", "a", "e", "the", "The", " the", "Hello",
		"world", "ing", "'s", "'ll", "n't", ".", ",", "!", "?", "...", "(", ")", "-", "_", "0", "1", "42",
		"3.14", "1234567", "é", "e\u0301", "ß", "ñ", "Ä", "ø", "中", "日本語", "테스트", "Привет", "مرحبا",
		"🦙", "😀", "😶\u200d🌫️", "👍🏽", "\u00a0", "\u200b", "\u3000", "ﬁ", "▁", "▁▁", "<s>", "</s>",
		"<unk>", "<0x41>", "<0xE2>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "[INST]",
		"<|endoftext|>", "<|im_start|>", "\x00", "\x7f", "\u0085", "\ufffd", "\U0001F600\U0001F600"}
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for k := rng.Intn(24); k > 0; k-- {
			if rng.Intn(6) == 0 { // a random code point, astral ones included
				r := rune(rng.Intn(0x10FFFF))
				if rng.Intn(2) == 0 {
					r = rune(0x20 + rng.Intn(0x3000))
				}
				if utf8.ValidRune(r) {
					b.WriteRune(r)
				}
				continue
			}
			b.WriteString(bits[rng.Intn(len(bits))])
		}
		out[i] = b.String()
	}
	return out
}

// randomIDs makes id sequences to decode: byte tokens (often not valid UTF-8 together),
// special tokens, ids beyond the vocabulary and ordinary tokens.
func randomIDs(rng *rand.Rand, tok *Tokenizer, n int) [][]int {
	var bytesIDs, specials []int
	for b := range 256 {
		if id, ok := tok.TokenID(fallbackToken(byte(b))); ok {
			bytesIDs = append(bytesIDs, id)
		}
	}
	for _, a := range tok.added {
		if a.special && len(specials) < 20 {
			specials = append(specials, a.id)
		}
	}
	out := make([][]int, n)
	for i := range out {
		for k := rng.Intn(12); k > 0; k-- {
			var id int
			switch x := rng.Intn(10); {
			case x < 4 && len(bytesIDs) > 0:
				id = bytesIDs[rng.Intn(len(bytesIDs))]
			case x < 5 && len(specials) > 0:
				id = specials[rng.Intn(len(specials))]
			default:
				id = rng.Intn(tok.VocabSize())
			}
			out[i] = append(out[i], id)
		}
		if out[i] == nil {
			out[i] = []int{}
		}
	}
	return out
}

// fileVariant rewrites the tokenizer.json of a shared tokenizer: mutate changes the
// top-level object and the model's small keys; the vocabulary and merges are copied as
// they are.
func fileVariant(t testing.TB, name string, mutate func(f, model map[string]any)) []byte {
	t.Helper()
	base, ok := variantBases[name]
	if !ok {
		data, err := os.ReadFile(testref.SharedData(t, "tokenizers/"+name+"/tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &base.top); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(base.top["model"], &base.model); err != nil {
			t.Fatal(err)
		}
		variantBases[name] = base
	}
	small := func(raw map[string]json.RawMessage, skip ...string) map[string]any {
		m := map[string]any{}
		for k, v := range raw {
			if !slices.Contains(skip, k) {
				var x any
				json.Unmarshal(v, &x)
				m[k] = x
			}
		}
		return m
	}
	f, m := small(base.top, "model", "added_tokens"), small(base.model, "vocab", "merges")
	mutate(f, m)
	write := func(b *bytes.Buffer, raw map[string]json.RawMessage, changed map[string]any) {
		b.WriteByte('{')
		n := 0
		for _, k := range slices.Sorted(maps.Keys(raw)) {
			v, ok := changed[k]
			if !ok && (k == "model" || k == "added_tokens" || k == "vocab" || k == "merges") {
				continue
			}
			if n++; n > 1 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, "%q:", k)
			enc, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(enc)
		}
		for k, v := range changed { // keys added by mutate
			if _, ok := raw[k]; !ok {
				enc, _ := json.Marshal(v)
				fmt.Fprintf(b, ",%q:%s", k, enc)
			}
		}
	}
	vocab, merges := base.model["vocab"], base.model["merges"]
	if n, ok := m["keep_ids_below"].(int); ok { // a smaller vocabulary, quicker to load
		delete(m, "keep_ids_below")
		key := fmt.Sprint(name, n)
		if _, ok := trimmed[key]; !ok {
			v, ms := trimVocab(t, vocab, merges, n)
			trimmed[key] = [2]json.RawMessage{v, ms}
		}
		vocab, merges = trimmed[key][0], trimmed[key][1]
	}
	var b bytes.Buffer
	write(&b, base.model, m)
	fmt.Fprintf(&b, `,"vocab":%s,"merges":%s}`, vocab, merges)
	model := b.String()
	b.Reset()
	write(&b, base.top, f)
	fmt.Fprintf(&b, `,"added_tokens":%s,"model":%s}`, base.top["added_tokens"], model)
	return b.Bytes()
}

var (
	variantBases = map[string]struct{ top, model map[string]json.RawMessage }{}
	trimmed      = map[string][2]json.RawMessage{}
)

// trimVocab keeps the tokens with ids below n and the merges among them: a BPE
// vocabulary of its own (characters it loses fall back to bytes).
func trimVocab(t testing.TB, rawVocab, rawMerges json.RawMessage, n int) (json.RawMessage, json.RawMessage) {
	vocab, err := readVocab(string(rawVocab))
	if err != nil {
		t.Fatal(err)
	}
	merges, err := readMerges(string(rawMerges))
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]int{}
	for tok, id := range vocab {
		if id < n {
			kept[tok] = id
		}
	}
	var km [][2]string
	for _, mg := range merges {
		_, a := kept[mg[0]]
		_, b := kept[mg[1]]
		_, c := kept[mg[0]+mg[1]]
		if a && b && c {
			km = append(km, mg)
		}
	}
	v, _ := json.Marshal(kept)
	ms, _ := json.Marshal(km)
	return v, ms
}

func obj(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func seq(kind string, items ...any) map[string]any { return obj("type", "Sequence", kind, items) }

// metaspace is a Metaspace pre-tokenizer or decoder.
func metaspace(scheme string, split bool) map[string]any {
	return obj("type", "Metaspace", "replacement", "▁", "prepend_scheme", scheme, "split", split)
}

// llama2Decoder is the decoder of Llama-2's files (and Mistral's).
func llama2Decoder() map[string]any {
	return seq("decoders", obj("type", "Replace", "pattern", obj("String", "▁"), "content", " "),
		obj("type", "ByteFallback"), obj("type", "Fuse"), obj("type", "Strip", "content", " ", "start", 1, "stop", 0))
}

// metaspaceLayout turns Mistral's Llama-2 layout (normalizer Prepend + Replace) into
// the layout of newer Llama-2 and TinyLlama files: no normalizer, a Metaspace
// pre-tokenizer with prepend_scheme "first" and no split, and a Metaspace decoder.
func metaspaceLayout(f, _ map[string]any) {
	f["normalizer"] = nil
	f["pre_tokenizer"] = metaspace("first", false)
	f["decoder"] = seq("decoders", obj("type", "ByteFallback"), metaspace("first", false), obj("type", "Fuse"))
}

func hfCaseTexts(t testing.TB, name string) []string {
	var out []string
	for _, c := range readHFCases(t, name) {
		out = append(out, c.Text)
	}
	return out
}

// TestAgainstHF compares SentencePiece-style tokenizers (the shared Mistral and
// Gemma-3 files and layouts built from Mistral's vocabulary: Metaspace with each
// prepend scheme, Split with each behavior, other decoders, pair templates, unk
// without byte_fallback) and byte-level ones with Hugging Face's tokenizers on the
// shared test strings and seeded random ones.
func TestAgainstHF(t *testing.T) {
	hfTokenizers(t)
	start := time.Now()
	defer func() { t.Logf("%v in all", time.Since(start)) }()
	rng := rand.New(rand.NewSource(15))
	mistralTexts := hfCaseTexts(t, "mistral")
	texts := func(n int) []string { return append(append([]string{}, mistralTexts...), randomTexts(rng, n)...) }
	pairs := func(n int) [][]string {
		r := randomTexts(rng, 2*n)
		out := [][]string{{"Hello", "world"}, {"", "x"}, {"a", ""}}
		for i := 0; i < n; i++ {
			out = append(out, []string{r[2*i], r[2*i+1]})
		}
		return out
	}
	var jobs []*hfJob
	add := func(name string, data []byte, texts []string, pairs [][]string) {
		tok, err := parse(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		jobs = append(jobs, &hfJob{name: name, data: data, tok: tok, Texts: texts, Pairs: pairs, Decodes: randomIDs(rng, tok, 60)})
	}
	mistral := func(mutate func(f, m map[string]any)) []byte { return fileVariant(t, "mistral", mutate) }
	// The layouts other than the shared files' and the Metaspace one that replaces them
	// use Mistral's first 6,000 tokens, which load faster.
	small := func(mutate func(f, m map[string]any)) []byte {
		return fileVariant(t, "mistral", func(f, m map[string]any) { m["keep_ids_below"] = 6000; mutate(f, m) })
	}

	add("mistral", mistral(func(_, _ map[string]any) {}), texts(300), pairs(20))
	add("metaspace-first", mistral(metaspaceLayout), texts(200), pairs(10))
	for _, scheme := range []string{"always", "never"} {
		for _, split := range []bool{false, true} {
			add(fmt.Sprintf("metaspace-%s-split=%v", scheme, split), small(func(f, _ map[string]any) {
				f["normalizer"] = nil
				f["pre_tokenizer"] = metaspace(scheme, split)
				f["decoder"] = seq("decoders", metaspace(scheme, split), obj("type", "ByteFallback"), obj("type", "Fuse"))
			}), texts(60), nil)
		}
	}
	add("metaspace-legacy-add_prefix_space", small(func(f, _ map[string]any) {
		f["normalizer"] = nil
		f["pre_tokenizer"] = obj("type", "Metaspace", "replacement", "▁", "add_prefix_space", true)
		f["decoder"] = obj("type", "Metaspace", "replacement", "▁", "add_prefix_space", true)
	}), texts(40), nil)
	// Split before a Metaspace that does not split: every behavior, inverted or not, with a
	// string pattern and regexes.
	for _, pattern := range []map[string]any{obj("String", " "), obj("String", "e"), obj("Regex", `\d+|\s+`), obj("Regex", `\p{P}`)} {
		for _, beh := range []string{"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"} {
			for _, invert := range []bool{false, true} {
				name := fmt.Sprintf("split-%v-%s-invert=%v", pattern, beh, invert)
				add(name, small(func(f, _ map[string]any) {
					f["normalizer"] = nil
					f["pre_tokenizer"] = seq("pretokenizers", obj("type", "Split", "pattern", pattern, "behavior", beh, "invert", invert), metaspace("always", false))
					f["decoder"] = llama2Decoder()
				}), texts(20), nil)
			}
		}
	}
	add("decoders-strip-replace", small(func(f, _ map[string]any) {
		// Hugging Face's Strip panics with stop > 0 on an empty token or when start and stop
		// overlap (TestStripDecoder checks stop).
		f["decoder"] = seq("decoders", obj("type", "Replace", "pattern", obj("Regex", "▁+"), "content", "_"),
			obj("type", "ByteFallback"), obj("type", "Strip", "content", "_", "start", 2, "stop", 0), obj("type", "Fuse"))
	}), texts(20), nil)
	add("normalizer-replace-regex", small(func(f, _ map[string]any) {
		f["normalizer"] = seq("normalizers", obj("type", "Replace", "pattern", obj("Regex", `\s+`), "content", " "),
			obj("type", "Prepend", "prepend", "▁"), obj("type", "Replace", "pattern", obj("String", " "), "content", "▁"))
	}), texts(40), nil)
	add("unk-without-byte_fallback", small(func(_, m map[string]any) { m["byte_fallback"] = false }), texts(60), nil)
	add("unk-not-fused", small(func(_, m map[string]any) { m["byte_fallback"], m["fuse_unk"] = false, false }), texts(40), nil)
	add("bos-eos-template", small(func(f, _ map[string]any) {
		sp := func(id string, typ int) map[string]any { return obj("SpecialToken", obj("id", id, "type_id", typ)) }
		sq := func(id string, typ int) map[string]any { return obj("Sequence", obj("id", id, "type_id", typ)) }
		f["post_processor"] = obj("type", "TemplateProcessing",
			"single", []any{sp("<s>", 0), sq("A", 0), sp("</s>", 0)},
			"pair", []any{sp("<s>", 0), sq("A", 0), sp("</s>", 0), sq("B", 1), sp("</s>", 1)},
			"special_tokens", obj("<s>", obj("id", "<s>", "ids", []int{1}, "tokens", []string{"<s>"}),
				"</s>", obj("id", "</s>", "ids", []int{2}, "tokens", []string{"</s>"})))
	}), texts(10), pairs(20))
	// Byte-level: GPT-2's (Qwen's takes seconds to load on the Node side).
	data, err := os.ReadFile(testref.SharedData(t, "tokenizers/gpt2/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	add("gpt2", data, texts(200), nil)
	gemma := &hfJob{name: "gemma3", File: testref.SharedData(t, "tokenizers/gemma3/tokenizer.json"), tok: loadShared(t, "gemma3"),
		Texts: append(hfCaseTexts(t, "gemma3"), randomTexts(rng, 200)...), Pairs: pairs(10)}
	gemma.Decodes = randomIDs(rng, gemma.tok, 60)

	t0 := time.Now()
	res := runHF(t, append(jobs, gemma))
	t.Logf("Hugging Face: %d tokenizers in %v", len(jobs)+1, time.Since(t0))
	for i, j := range jobs {
		compareHF(t, j, res[i])
	}
	compareHF(t, gemma, res[len(jobs)])
}
