package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	sugar "github.com/sugarme/tokenizer"
	"golang.org/x/text/unicode/norm"
)

// The parts of tokenizer.json we read. Components stay raw until their type is known.
type fileJSON struct {
	AddedTokens   []sugar.TokenConfig `json:"added_tokens"`
	Normalizer    json.RawMessage     `json:"normalizer"`
	PreTokenizer  json.RawMessage     `json:"pre_tokenizer"`
	PostProcessor json.RawMessage     `json:"post_processor"`
	Decoder       json.RawMessage     `json:"decoder"`
	Model         *modelJSON          `json:"model"`
}

// modelJSON is a BPE model (other models lay out their vocabulary differently).
type modelJSON struct {
	Type                    string  `json:"type"`
	UnkToken                *string `json:"unk_token"`
	ContinuingSubwordPrefix *string `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string `json:"end_of_word_suffix"`
	FuseUnk                 bool    `json:"fuse_unk"`
	ByteFallback            bool    `json:"byte_fallback"`
	IgnoreMerges            bool    `json:"ignore_merges"`

	// Read by hand (jsonfast.go).
	vocab               map[string]int
	vocabErr            error // the vocabulary is not an object: reported if the type is BPE
	merges              [][2]string
	hasVocab, hasMerges bool // not missing nor null
}

// component is any normalizer, pre-tokenizer, post-processor or decoder object.
type component struct {
	Type string `json:"type"`

	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	// ByteLevel; Metaspace's older spelling of prepend_scheme
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`

	// Split, Replace
	Pattern  map[string]string `json:"pattern"`
	Behavior string            `json:"behavior"`
	Invert   bool              `json:"invert"`
	Content  string            `json:"content"` // also Strip's (decoder) character

	// Metaspace
	Replacement   string  `json:"replacement"`
	PrependScheme *string `json:"prepend_scheme"`
	Split         *bool   `json:"split"`

	// Digits
	IndividualDigits bool `json:"individual_digits"`

	// Strip: the normalizer's sides, the decoder's counts
	StripLeft  bool `json:"strip_left"`
	StripRight bool `json:"strip_right"`
	Start      int  `json:"start"`
	Stop       int  `json:"stop"`

	// Prepend
	Prepend string `json:"prepend"`

	// TemplateProcessing
	Single        []map[string]templateRef `json:"single"`
	Pair          []map[string]templateRef `json:"pair"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`

	// RobertaProcessing, BertProcessing: [token, id]
	Cls []json.RawMessage `json:"cls"`
	Sep []json.RawMessage `json:"sep"`
}

type templateRef struct {
	ID string `json:"id"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// maxNesting bounds Sequence components inside Sequences (a file nesting deeper is
// not a tokenizer anyone made, and recursion on it must not exhaust the stack).
const maxNesting = 16

// parse builds a Tokenizer from the bytes of a tokenizer.json.
func parse(data []byte) (*Tokenizer, error) {
	if !utf8.Valid(data) { // as Hugging Face, which reads the file as a Rust String
		return nil, fmt.Errorf("not valid UTF-8 (byte %d)", firstInvalid(data))
	}
	hash := make(chan string, 1)
	go func() { hash <- hashBytes(data) }() // 30 ms for Gemma-3's file, beside the parsing
	f, err := readFile(string(data))
	if err != nil {
		return nil, fmt.Errorf("not a valid tokenizer.json: %w", err)
	}
	t := &Tokenizer{raw: data}
	if t.normalizer, err = parseNormalizer(f.Normalizer, 0); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer, 0); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if t.decoder, err = parseDecoder(f.Decoder, 0); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	t.byteDecoder = isByteLevelDecoder(t.decoder)
	if t.model, err = parseModel(f.Model, byteLevel); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	t.addedByID = map[int]*addedToken{}
	t.addedByText = map[string]*addedToken{}
	for i, a := range f.AddedTokens {
		if a.Content == "" || a.Id < 0 || a.Id > maxID {
			return nil, fmt.Errorf("added_tokens[%d]: empty content, or id %d outside 0..%d", i, a.Id, maxID)
		}
		id := int(a.Id)
		if other, ok := t.addedByID[id]; ok && other.content != a.Content {
			return nil, fmt.Errorf("added_tokens[%d]: %q and %q have the same id %d", i, other.content, a.Content, id)
		}
		if id < len(t.model.tokens) && t.model.tokens[id] != "" && t.model.tokens[id] != a.Content {
			return nil, fmt.Errorf("added_tokens[%d]: %q has id %d, which model.vocab gives to %q", i, a.Content, id, t.model.tokens[id])
		}
		tok := &addedToken{id: id, content: a.Content, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.Lstrip, rstrip: a.Rstrip, normalized: a.Normalized}
		t.added = append(t.added, tok)
		t.addedByID[tok.id] = tok
		t.addedByText[tok.content] = tok
	}
	sortAdded(t.added)
	var rawToks, normToks []*addedToken
	for _, a := range t.added {
		if a.normalized {
			normToks = append(normToks, a)
		} else {
			rawToks = append(rawToks, a)
		}
	}
	// Two passes, as Hugging Face does: unnormalized tokens over the whole text,
	// then normalized ones (matched in their normalized form) in what is left.
	t.rawAdded = newAddedMatcher(rawToks, nil)
	var normalize func(string) string
	if t.normalizer != nil {
		normalize = func(s string) string { n, _ := t.normalizer.normalize(s); return n }
	}
	t.normAdded = newAddedMatcher(normToks, normalize)
	t.vocabSize = len(t.model.tokens)
	for _, a := range t.added {
		t.vocabSize = max(t.vocabSize, a.id+1)
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, 0); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	for _, tpl := range [][]tplItem{t.post.single, t.post.pair} {
		for _, it := range tpl {
			for _, id := range it.ids {
				if id < 0 || id >= t.vocabSize {
					return nil, fmt.Errorf("post_processor: special token id %d is not in the vocabulary (%d ids)", id, t.vocabSize)
				}
			}
		}
	}
	t.hash = <-hash
	return t, nil
}

// firstInvalid is the offset of the first byte of data that is not valid UTF-8.
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// supportedModels says what parseModel reads, for the error on anything else.
const supportedModels = `only BPE models are supported: byte-level (GPT-2, Llama-3, Qwen) and SentencePiece-style with byte_fallback (Llama-2, Mistral, Gemma)`

func parseModel(m *modelJSON, byteLevel bool) (*bpe, error) {
	switch {
	case m == nil:
		return nil, fmt.Errorf("missing")
	case m.Type == "Unigram":
		return nil, fmt.Errorf("type \"Unigram\" (a SentencePiece unigram model, as T5, ALBERT or XLNet use) is not supported; %s", supportedModels)
	case m.Type != "BPE" && !(m.Type == "" && m.hasMerges):
		return nil, fmt.Errorf("type %q is not supported; %s", m.Type, supportedModels)
	case m.vocabErr != nil:
		return nil, fmt.Errorf("vocab: %w", m.vocabErr)
	case !m.hasVocab:
		return nil, fmt.Errorf("no vocab")
	}
	vocab := m.vocab
	b, err := newBPE(vocab, m.merges, byteLevel)
	if err != nil {
		return nil, err
	}
	if m.UnkToken != nil {
		id, ok := vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		b.unk = id
	}
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	b.fuseUnk, b.byteFallback, b.ignoreMerges = m.FuseUnk, m.ByteFallback, m.IgnoreMerges
	b.prepareChunks()
	return b, nil
}

func parseNormalizer(raw json.RawMessage, depth int) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "Strip":
		return stripNorm{c.StripLeft, c.StripRight}, nil
	case "Prepend":
		return prependNorm(c.Prepend), nil
	case "Replace":
		m, err := parsePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Replace: %w", err)
		}
		return replaceNorm{m, c.Content}, nil
	case "Sequence":
		if depth >= maxNesting {
			return nil, fmt.Errorf("Sequence nested more than %d deep", maxNesting)
		}
		var seq sequenceNorm
		for i, r := range c.Normalizers {
			n, err := parseNormalizer(r, depth+1)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("type %q is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence)", c.Type)
}

// parsePattern reads a Split's or Replace's pattern: {"String": s} or {"Regex": r}.
func parsePattern(p map[string]string) (matcher, error) {
	if re, ok := p["Regex"]; ok {
		return compilePattern(re)
	}
	if s, ok := p["String"]; ok {
		return literalMatcher(s), nil
	}
	return nil, fmt.Errorf("pattern needs Regex or String")
}

// parsePreTokenizer also reports whether a ByteLevel step is present, which makes
// the model work on bytes.
func parsePreTokenizer(raw json.RawMessage, depth int) (preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "ByteLevel":
		b := &byteLevelPre{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex { // use_regex defaults to true
			b.split = &splitPre{m: gpt2Scanner, behavior: behaviorIsolated}
		}
		return b, true, nil
	case "Split":
		beh, ok := behaviorNames[c.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("Split: unknown behavior %q", c.Behavior)
		}
		m, err := parsePattern(c.Pattern)
		if err != nil {
			return nil, false, fmt.Errorf("Split: %w", err)
		}
		return &splitPre{m: m, behavior: beh, invert: c.Invert}, false, nil
	case "Metaspace":
		repl, scheme, err := parseMetaspace(c)
		if err != nil {
			return nil, false, err
		}
		return &metaspacePre{repl: string(repl), prepend: scheme, split: c.Split == nil || *c.Split}, false, nil
	case "Digits":
		beh := behaviorContiguous
		if c.IndividualDigits {
			beh = behaviorIsolated
		}
		return &splitPre{m: digitMatcher{}, behavior: beh}, false, nil
	case "Sequence":
		if depth >= maxNesting {
			return nil, false, fmt.Errorf("Sequence nested more than %d deep", maxNesting)
		}
		var seq sequencePre
		byteLevel := false
		for i, r := range c.Pretokenizers {
			p, bl, err := parsePreTokenizer(r, depth+1)
			if err != nil {
				return nil, false, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			if p != nil {
				seq = append(seq, p)
			}
			byteLevel = byteLevel || bl
		}
		return seq, byteLevel, nil
	}
	return nil, false, fmt.Errorf("type %q is not supported (supported: ByteLevel, Split, Metaspace, Digits, Sequence)", c.Type)
}

// parseMetaspace reads the Metaspace pre-tokenizer's or decoder's replacement
// character and prepend scheme ("always" unless said; the older add_prefix_space=false
// means "never").
func parseMetaspace(c component) (rune, prependScheme, error) {
	r, n := utf8.DecodeRuneInString(c.Replacement)
	if n == 0 || n != len(c.Replacement) || r == utf8.RuneError {
		return 0, 0, fmt.Errorf("Metaspace: replacement %q is not one character", c.Replacement)
	}
	scheme := prependAlways
	if c.PrependScheme != nil {
		var ok bool
		if scheme, ok = prependSchemes[*c.PrependScheme]; !ok {
			return 0, 0, fmt.Errorf("Metaspace: prepend_scheme %q is not first, always or never", *c.PrependScheme)
		}
	}
	if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
		if c.PrependScheme != nil && scheme != prependNever {
			return 0, 0, fmt.Errorf("Metaspace: add_prefix_space false contradicts prepend_scheme %q", *c.PrependScheme)
		}
		scheme = prependNever
	}
	return r, scheme, nil
}

func parseDecoder(raw json.RawMessage, depth int) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	switch c.Type {
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "Replace":
		m, err := parsePattern(c.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Replace: %w", err)
		}
		return replaceDec{m, c.Content}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		r, n := utf8.DecodeRuneInString(c.Content)
		if n == 0 || n != len(c.Content) || r == utf8.RuneError {
			return nil, fmt.Errorf("Strip: content %q is not one character", c.Content)
		}
		if c.Start < 0 || c.Stop < 0 {
			return nil, fmt.Errorf("Strip: negative start or stop")
		}
		return stripDec{r, c.Start, c.Stop}, nil
	case "Metaspace":
		repl, scheme, err := parseMetaspace(c)
		if err != nil {
			return nil, err
		}
		return metaspaceDec{repl, scheme}, nil
	case "Sequence":
		if depth >= maxNesting {
			return nil, fmt.Errorf("Sequence nested more than %d deep", maxNesting)
		}
		var seq sequenceDec
		for i, r := range c.Decoders {
			d, err := parseDecoder(r, depth+1)
			if err != nil {
				return nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			if d != nil {
				seq = append(seq, d)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("type %q is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence)", c.Type)
}

// isByteLevelDecoder reports whether d is ByteLevel alone, which Decode and TokenBytes
// do without building token strings.
func isByteLevelDecoder(d decoder) bool {
	switch d := d.(type) {
	case byteLevelDec:
		return true
	case sequenceDec:
		return len(d) == 1 && isByteLevelDecoder(d[0])
	}
	return false
}

// anyDecoder reports whether d is, or holds in its sequences, a decoder for which f
// is true.
func anyDecoder(d decoder, f func(decoder) bool) bool {
	if q, ok := d.(sequenceDec); ok {
		for _, x := range q {
			if anyDecoder(x, f) {
				return true
			}
		}
		return false
	}
	return d != nil && f(d)
}

// parsePostProcessor reads the special tokens put around one sequence and a pair.
func parsePostProcessor(raw json.RawMessage, depth int) (postProcessor, error) {
	var p postProcessor
	if isNull(raw) {
		return p, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return p, err
	}
	switch c.Type {
	case "ByteLevel":
		return p, nil
	case "TemplateProcessing":
		var err error
		if p.single, err = parseTemplate(c, c.Single, false); err != nil {
			return p, fmt.Errorf("single%w", err)
		}
		if p.pair, err = parseTemplate(c, c.Pair, true); err != nil {
			return p, fmt.Errorf("pair%w", err)
		}
		p.templated = true
		return p, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := tokenRef(c.Cls)
		if err != nil {
			return p, fmt.Errorf("cls: %w", err)
		}
		sep, err := tokenRef(c.Sep)
		if err != nil {
			return p, fmt.Errorf("sep: %w", err)
		}
		a, b := tplItem{seq: 0}, tplItem{seq: 1}
		p.single = []tplItem{{seq: -1, ids: []int{cls}}, a, {seq: -1, ids: []int{sep}}}
		if c.Type == "RobertaProcessing" { // <s> A </s></s> B </s>
			p.pair = []tplItem{{seq: -1, ids: []int{cls}}, a, {seq: -1, ids: []int{sep, sep}}, b, {seq: -1, ids: []int{sep}}}
		} else { // [CLS] A [SEP] B [SEP]
			p.pair = []tplItem{{seq: -1, ids: []int{cls}}, a, {seq: -1, ids: []int{sep}}, b, {seq: -1, ids: []int{sep}}}
		}
		p.templated = true
		return p, nil
	case "Sequence":
		if depth >= maxNesting {
			return p, fmt.Errorf("Sequence nested more than %d deep", maxNesting)
		}
		// Hugging Face runs the processors in turn on the list of encodings; a template
		// turns one encoding into several, which a second template cannot take.
		for i, r := range c.Processors {
			q, err := parsePostProcessor(r, depth+1)
			if err != nil {
				return p, fmt.Errorf("processors[%d]: %w", i, err)
			}
			if !q.templated {
				continue
			}
			if p.templated {
				return p, fmt.Errorf("processors[%d]: a second processor adding special tokens is not supported", i)
			}
			p = q
		}
		return p, nil
	}
	return p, fmt.Errorf("type %q is not supported (supported: TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)", c.Type)
}

// parseTemplate reads a TemplateProcessing template: sequences A (and B in a pair)
// and special tokens, whose ids special_tokens gives.
func parseTemplate(c component, items []map[string]templateRef, pair bool) ([]tplItem, error) {
	var out []tplItem
	for i, item := range items {
		if len(item) != 1 {
			return nil, fmt.Errorf("[%d]: want one of Sequence or SpecialToken", i)
		}
		if ref, ok := item["Sequence"]; ok {
			switch {
			case ref.ID == "A":
				out = append(out, tplItem{seq: 0})
			case ref.ID == "B" && pair:
				out = append(out, tplItem{seq: 1})
			default:
				return nil, fmt.Errorf("[%d]: sequence %q (want A%s)", i, ref.ID, map[bool]string{true: " or B"}[pair])
			}
			continue
		}
		ref, ok := item["SpecialToken"]
		if !ok {
			return nil, fmt.Errorf("[%d]: want Sequence or SpecialToken", i)
		}
		st, ok := c.SpecialTokens[ref.ID]
		if !ok {
			return nil, fmt.Errorf("[%d]: special token %q is not in special_tokens", i, ref.ID)
		}
		out = append(out, tplItem{seq: -1, ids: st.IDs})
	}
	return out, nil
}

// tokenRef reads a [token, id] pair.
func tokenRef(raw []json.RawMessage) (int, error) {
	var id int
	if len(raw) != 2 || json.Unmarshal(raw[1], &id) != nil {
		return 0, fmt.Errorf("want [token, id]")
	}
	return id, nil
}
