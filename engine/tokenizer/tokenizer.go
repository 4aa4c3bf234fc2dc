// Package tokenizer reads Hugging Face tokenizer.json files and encodes and decodes
// text exactly as the Hugging Face tokenizers library does for BPE models: byte-level
// (GPT-2, Llama-3, Qwen2 and tokenizers trained here) and SentencePiece-style, with
// '▁' for spaces and byte_fallback (Llama-2, Mistral, TinyLlama, Gemma); and trains
// byte-level tokenizers.
//
// It is built on github.com/sugarme/tokenizer for the byte-level alphabet and the
// file's added-token schema. The parts sugarme gets wrong or cannot run here are our
// own: pre-tokenizer regexes with look-ahead (hand-written scanners), the BPE merge
// loop (sugarme's is quadratic and breaks rank ties by clock time; its package also
// needs a module that go.mod does not list), added-token splitting and offsets.
package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	raw  []byte // the tokenizer.json it was loaded from or will be saved as
	hash string

	model       *bpe
	normalizer  normalizer   // nil: none
	pre         preTokenizer // nil: the whole text is one pre-token
	post        postProcessor
	decoder     decoder // nil: tokens are joined with spaces
	byteDecoder bool    // the decoder is ByteLevel alone (a fast path)

	added       []*addedToken // by id
	addedByID   map[int]*addedToken
	addedByText map[string]*addedToken
	rawAdded    *addedMatcher // tokens matched in the text as given
	normAdded   *addedMatcher // tokens matched in the normalized text
	vocabSize   int
	bytesOnce   sync.Once
	bytesByID   [][]byte
}

// Encoding is the result of Encode.
//
// Offsets[i] is the byte range [start,end) of the text that token i stands for.
// Tokens added by the post-processor (BOS and the like) get [0,0). A byte-level token
// covers exactly the bytes it encodes, so a character split over two tokens is shared
// between them byte by byte; a space added by add_prefix_space, or a '▁' put before a
// text (Prepend, Metaspace), covers nothing. When a normalizer or pre-tokenizer changed
// the text, ranges are those of the source characters the token's bytes came from
// (tokens inside one changed character share its range; '▁' covers the space it replaced).
type Encoding struct {
	IDs     []int
	Offsets [][2]int
}

// Load reads a tokenizer.json, or the tokenizer.json inside a folder.
func Load(path string) (*Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		if _, e := os.Stat(filepath.Join(dir, "tokenizer.model")); e == nil {
			return nil, fmt.Errorf("tokenizer: %s has a SentencePiece tokenizer.model but no tokenizer.json, the only file read here "+
				"(transformers writes one: AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR))", dir)
		}
		return nil, fmt.Errorf("tokenizer: %s not found (a Hugging Face tokenizer.json is needed)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Hash is the SHA-256 (hex) of the tokenizer.json bytes: the tokenizer's content hash.
func (t *Tokenizer) Hash() string { return t.hash }

func hashBytes(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// VocabSize is one more than the largest id, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token string (an added token's content or a vocabulary
// entry, in its byte-level spelling such as "Ġthe").
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if a, ok := t.addedByText[token]; ok {
		return a.id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token returns the vocabulary string of an id ("" for an unknown id).
func (t *Tokenizer) Token(id int) string {
	if a, ok := t.addedByID[id]; ok {
		return a.content
	}
	if id >= 0 && id < len(t.model.tokens) {
		return t.model.tokens[id]
	}
	return ""
}

// IsSpecial reports whether id is a special added token (skipped by Decode when asked).
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

// TokenBytes returns the raw bytes a token stands for (byte-level characters mapped
// back to bytes), nil for special tokens and unknown ids. Do not modify the result.
func (t *Tokenizer) TokenBytes(id int) []byte {
	t.bytesOnce.Do(t.buildTokenBytes)
	if id < 0 || id >= len(t.bytesByID) || t.IsSpecial(id) {
		return nil
	}
	return t.bytesByID[id]
}

func (t *Tokenizer) buildTokenBytes() {
	t.bytesByID = make([][]byte, t.vocabSize)
	for id := range t.bytesByID {
		if tok, ok := t.token(id); ok {
			t.bytesByID[id] = t.tokenBytes(tok)
		}
	}
}

// token is the string of an id, as Hugging Face's decode looks it up: added tokens
// first, then the model's vocabulary.
func (t *Tokenizer) token(id int) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		return a.content, true
	}
	if id >= 0 && id < len(t.model.tokens) && t.model.tokens[id] != "" {
		return t.model.tokens[id], true
	}
	return "", false
}

// tokenBytes is what a token stands for inside a text: its bytes under a ByteLevel
// decoder, the byte of a "<0xNN>" token under ByteFallback, else the decoder's text for
// the token alone, without the steps that only touch the ends of a text (Strip, the
// first token's '▁' under Metaspace).
func (t *Tokenizer) tokenBytes(tok string) []byte {
	switch {
	case t.byteDecoder || anyDecoder(t.decoder, func(d decoder) bool { _, ok := d.(byteLevelDec); return ok }):
		return unByteLevel(tok)
	case t.decoder == nil:
		return []byte(tok)
	}
	if b, ok := fallbackByte(tok); ok && anyDecoder(t.decoder, func(d decoder) bool { _, ok := d.(byteFallbackDec); return ok }) {
		return []byte{b}
	}
	return []byte(strings.Join(t.decoder.decodeChain([]string{tok}, true), ""))
}

// Decode turns ids back into text, as Hugging Face's decode does: unknown ids are
// dropped, special tokens too when skipSpecial, and the rest go through the file's
// decoder (bytes that are not valid UTF-8 become U+FFFD).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	if t.byteDecoder {
		t.bytesOnce.Do(t.buildTokenBytes)
		var buf []byte
		for _, id := range ids {
			if id < 0 || id >= len(t.bytesByID) || skipSpecial && t.IsSpecial(id) {
				continue
			}
			buf = append(buf, t.bytesByID[id]...)
		}
		return lossyUTF8(buf)
	}
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if tok, ok := t.token(id); ok && !(skipSpecial && t.IsSpecial(id)) {
			toks = append(toks, tok)
		}
	}
	if t.decoder == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.decoder.decodeChain(toks, false), "")
}

// Encode tokenizes text. With addSpecial the post-processor's tokens (a BOS, say)
// are added, as Hugging Face's encode(add_special_tokens=True) does.
func (t *Tokenizer) Encode(text string, addSpecial bool) Encoding {
	var e Encoding
	if n := len(text)/4 + 8; len(text) > 4096 { // prose averages 4+ bytes a token
		e.IDs, e.Offsets = make([]int, 0, n), make([][2]int, 0, n)
	}
	if !addSpecial || !t.post.templated {
		t.encodeInto(text, &e)
		return e
	}
	for _, it := range t.post.single {
		t.applyItem(it, &e, text, "")
	}
	return e
}

// EncodePair tokenizes a pair of texts, as Hugging Face's encode(a, b) does: with
// addSpecial, laid out by the post-processor's pair template ("<s> A <s> B" for
// Llama-2); otherwise, or without a template, A's tokens then B's. Offsets are byte
// ranges of the text each token comes from.
func (t *Tokenizer) EncodePair(a, b string, addSpecial bool) Encoding {
	var e Encoding
	if !addSpecial || !t.post.templated {
		t.encodeInto(a, &e)
		t.encodeInto(b, &e)
		return e
	}
	for _, it := range t.post.pair {
		t.applyItem(it, &e, a, b)
	}
	return e
}

func (t *Tokenizer) applyItem(it tplItem, e *Encoding, a, b string) {
	switch it.seq {
	case 0:
		t.encodeInto(a, e)
	case 1:
		t.encodeInto(b, e)
	default:
		e.addSpecial(it.ids)
	}
}

// encodeInto appends the tokens of text: added tokens as they are, the text between
// them normalized, pre-tokenized and merged.
func (t *Tokenizer) encodeInto(text string, e *Encoding) {
	pos := 0
	for _, m := range t.rawAdded.find(text, nil) {
		if m.start > pos {
			t.encodeSegment(text, pos, m.start, e)
		}
		e.add(m.tok.id, m.start, m.end)
		pos = m.end
	}
	if pos < len(text) {
		t.encodeSegment(text, pos, len(text), e)
	}
}

func (e *Encoding) add(id, start, end int) {
	e.IDs = append(e.IDs, id)
	e.Offsets = append(e.Offsets, [2]int{start, end})
}

func (e *Encoding) addSpecial(ids []int) {
	for _, id := range ids {
		e.add(id, 0, 0)
	}
}

// encodeSegment encodes text[a:b], which holds no unnormalized added token:
// normalize, split out normalized added tokens, pre-tokenize, merge.
func (t *Tokenizer) encodeSegment(text string, a, b int, e *Encoding) {
	seg := text[a:b]
	s, al := seg, alignment(nil)
	if t.normalizer != nil {
		s, al = t.normalizer.normalize(seg)
	}
	emit := func(id, x, y int) {
		lo, hi := al.span(x, y)
		e.add(id, a+lo, a+hi)
	}
	c := &preCtx{s: s, origin: func(i int) int { lo, _ := al.span(i, i); return a + lo }}
	pos := 0
	for _, m := range t.normAdded.find(s, nil) {
		if m.start > pos {
			t.encodeText(c, pos, m.start, emit)
		}
		emit(m.tok.id, m.start, m.end)
		pos = m.end
	}
	if pos < len(s) {
		t.encodeText(c, pos, len(s), emit)
	}
}

// encodeText pre-tokenizes and merges c.s[a:b], reporting each token with its byte
// range in c.s.
func (t *Tokenizer) encodeText(c *preCtx, a, b int, emit func(id, x, y int)) {
	pieces := []piece{{a, b, nil}}
	if t.pre != nil {
		pieces = t.pre.preTokenize(c, pieces)
	}
	var out []symbolOut
	for _, pc := range pieces {
		out = t.model.tokenize(c.text(pc), out[:0])
		p := 0 // position in the piece's text
		for _, o := range out {
			q := p + int(o.n)
			x, y := pc.start+p, pc.start+q
			if pc.t != nil {
				x, y = pc.t.al.span(p, q)
			}
			emit(int(o.id), x, y)
			p = q
		}
	}
}

// postProcessor holds the templates of special tokens put around one sequence and
// around a pair.
type postProcessor struct {
	single, pair []tplItem
	templated    bool // a processor that adds tokens was given (else a pair is A then B)
}

// tplItem is a sequence of a template (seq 0 for A, 1 for B) or special tokens (seq -1).
type tplItem struct {
	seq int
	ids []int
}

// sortAdded orders added tokens by id.
func sortAdded(list []*addedToken) {
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
}
