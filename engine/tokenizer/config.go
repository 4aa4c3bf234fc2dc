package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"

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

type modelJSON struct {
	Type                    string      `json:"type"`
	UnkToken                *string     `json:"unk_token"`
	ContinuingSubwordPrefix *string     `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string     `json:"end_of_word_suffix"`
	FuseUnk                 bool        `json:"fuse_unk"`
	ByteFallback            bool        `json:"byte_fallback"`
	IgnoreMerges            bool        `json:"ignore_merges"`
	Vocab                   vocabJSON   `json:"vocab"`
	Merges                  *mergesJSON `json:"merges"`
}

// component is any normalizer, pre-tokenizer, post-processor or decoder object.
type component struct {
	Type string `json:"type"`

	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`

	// ByteLevel
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`

	// Split, Replace
	Pattern  map[string]string `json:"pattern"`
	Behavior string            `json:"behavior"`
	Invert   bool              `json:"invert"`
	Content  string            `json:"content"`

	// Digits
	IndividualDigits bool `json:"individual_digits"`

	// Strip
	StripLeft  bool `json:"strip_left"`
	StripRight bool `json:"strip_right"`

	// Prepend
	Prepend string `json:"prepend"`

	// TemplateProcessing
	Single        []map[string]templateRef `json:"single"`
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

// parse builds a Tokenizer from the bytes of a tokenizer.json.
func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a valid tokenizer.json: %w", err)
	}
	t := &Tokenizer{raw: data, hash: hashBytes(data)}
	var err error
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if t.byteDecoder, err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	if t.model, err = parseModel(f.Model, byteLevel); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	t.addedByID = map[int]*addedToken{}
	t.addedByText = map[string]*addedToken{}
	for i, a := range f.AddedTokens {
		if a.Content == "" || a.Id < 0 {
			return nil, fmt.Errorf("added_tokens[%d]: empty content or negative id", i)
		}
		tok := &addedToken{id: int(a.Id), content: a.Content, special: a.Special, singleWord: a.SingleWord,
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
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	return t, nil
}

func parseModel(m *modelJSON, byteLevel bool) (*bpe, error) {
	if m == nil {
		return nil, fmt.Errorf("missing")
	}
	if m.Type != "BPE" && !(m.Type == "" && m.Merges != nil) {
		return nil, fmt.Errorf("type %q is not supported (only BPE)", m.Type)
	}
	if m.Vocab == nil {
		return nil, fmt.Errorf("no vocab")
	}
	var merges [][2]string
	if m.Merges != nil {
		merges = *m.Merges
	}
	b, err := newBPE(m.Vocab, merges, byteLevel)
	if err != nil {
		return nil, err
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
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
	return b, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
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
		old, ok := c.Pattern["String"]
		if !ok {
			return nil, fmt.Errorf("Replace with a regex pattern is not supported")
		}
		return replaceNorm{old, c.Content}, nil
	case "Sequence":
		var seq sequenceNorm
		for i, r := range c.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("type %q is not supported", c.Type)
}

// parsePreTokenizer also reports whether a ByteLevel step is present, which makes
// the model work on bytes.
func parsePreTokenizer(raw json.RawMessage) (preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, false, err
	}
	switch c.Type {
	case "ByteLevel":
		b := &byteLevelPre{addPrefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex { // use_regex defaults to true
			b.split = &splitPre{m: gpt2Scanner, behavior: behaviorIsolated}
		}
		return b, true, nil
	case "Split":
		beh, ok := behaviorNames[c.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("Split: unknown behavior %q", c.Behavior)
		}
		var m matcher
		if re, ok := c.Pattern["Regex"]; ok {
			var err error
			if m, err = compilePattern(re); err != nil {
				return nil, false, err
			}
		} else if s, ok := c.Pattern["String"]; ok {
			m = literalMatcher(s)
		} else {
			return nil, false, fmt.Errorf("Split: pattern needs Regex or String")
		}
		return &splitPre{m: m, behavior: beh, invert: c.Invert}, false, nil
	case "Digits":
		beh := behaviorContiguous
		if c.IndividualDigits {
			beh = behaviorIsolated
		}
		return &splitPre{m: digitMatcher{}, behavior: beh}, false, nil
	case "Sequence":
		var seq sequencePre
		byteLevel := false
		for i, r := range c.Pretokenizers {
			p, bl, err := parsePreTokenizer(r)
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
	return nil, false, fmt.Errorf("type %q is not supported", c.Type)
}

// parseDecoder reports whether decoding maps byte-level characters back to bytes.
func parseDecoder(raw json.RawMessage) (bool, error) {
	if isNull(raw) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, err
	}
	switch c.Type {
	case "ByteLevel":
		return true, nil
	case "Sequence":
		if len(c.Decoders) == 1 {
			return parseDecoder(c.Decoders[0])
		}
	}
	return false, fmt.Errorf("type %q is not supported (only ByteLevel)", c.Type)
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
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
		seen := false
		for i, item := range c.Single {
			if ref, ok := item["Sequence"]; ok {
				if ref.ID != "A" || seen {
					return p, fmt.Errorf("single[%d]: only one sequence A is supported", i)
				}
				seen = true
				continue
			}
			ref, ok := item["SpecialToken"]
			if !ok {
				return p, fmt.Errorf("single[%d]: want Sequence or SpecialToken", i)
			}
			st, ok := c.SpecialTokens[ref.ID]
			if !ok {
				return p, fmt.Errorf("single[%d]: special token %q is not in special_tokens", i, ref.ID)
			}
			if seen {
				p.after = append(p.after, st.IDs...)
			} else {
				p.before = append(p.before, st.IDs...)
			}
		}
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
		return postProcessor{before: []int{cls}, after: []int{sep}}, nil
	case "Sequence":
		for i, r := range c.Processors {
			q, err := parsePostProcessor(r)
			if err != nil {
				return p, fmt.Errorf("processors[%d]: %w", i, err)
			}
			// Each processor wraps what the previous ones made.
			p.before = append(append([]int(nil), q.before...), p.before...)
			p.after = append(p.after, q.after...)
		}
		return p, nil
	}
	return p, fmt.Errorf("type %q is not supported", c.Type)
}

// tokenRef reads a [token, id] pair.
func tokenRef(raw []json.RawMessage) (int, error) {
	var id int
	if len(raw) != 2 || json.Unmarshal(raw[1], &id) != nil {
		return 0, fmt.Errorf("want [token, id]")
	}
	return id, nil
}
