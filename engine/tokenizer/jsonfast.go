package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// A tokenizer.json is mostly its model's vocabulary and merges (Gemma-3's: 262,144
// entries and 514,906 merges in 33 MB). encoding/json would scan those three times
// (validation, skipping, then our reader) and allocate a string per token; instead the
// file is walked here once, the vocabulary and merges are read by hand (token strings
// are substrings of one copy), and the small parts go through encoding/json.

// readFile splits a tokenizer.json into the parts parse uses.
func readFile(data string) (fileJSON, error) {
	var f fileJSON
	r := &jsonReader{s: data}
	err := r.object(func(key string) error {
		if key == "model" {
			var err error
			if f.Model, err = readModel(r); err != nil {
				return fmt.Errorf("model: %w", err)
			}
			return nil
		}
		raw, err := r.value()
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		switch key {
		case "added_tokens":
			err = json.Unmarshal([]byte(raw), &f.AddedTokens)
		case "normalizer":
			f.Normalizer = json.RawMessage(raw)
		case "pre_tokenizer":
			f.PreTokenizer = json.RawMessage(raw)
		case "post_processor":
			f.PostProcessor = json.RawMessage(raw)
		case "decoder":
			f.Decoder = json.RawMessage(raw)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	if err == nil {
		if r.skip(); r.pos != len(data) {
			err = fmt.Errorf("unexpected %q after the top-level object", data[r.pos])
		}
	}
	return f, err
}

// readModel reads the model object at r. The vocabulary and merges are read in
// place (a vocabulary that is not an object, as a Unigram model's list, is kept as an
// error for parseModel to report only if the type is BPE); the other keys go through
// encoding/json.
func readModel(r *jsonReader) (*modelJSON, error) {
	if r.peek() == 'n' {
		_, err := r.value()
		return nil, err
	}
	m := &modelJSON{}
	var rest strings.Builder
	rest.WriteByte('{')
	err := r.object(func(key string) error {
		var err error
		switch key {
		case "vocab":
			m.hasVocab = r.peek() != 'n'
			before := r.pos
			// An error is reported by parseModel, after the type (a Unigram list is no error
			// of its own); a value not read yet is passed over.
			if m.vocab, m.vocabErr = r.vocab(); m.vocabErr != nil && r.pos == before {
				_, err = r.value()
			}
		case "merges":
			m.hasMerges = r.peek() != 'n'
			m.merges, err = r.merges()
			if err != nil {
				err = fmt.Errorf("merges: %w", err)
			}
		default:
			var raw string
			if raw, err = r.value(); err == nil {
				if rest.Len() > 1 {
					rest.WriteByte(',')
				}
				rest.WriteString(jsonString(key))
				rest.WriteByte(':')
				rest.WriteString(raw)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	rest.WriteByte('}')
	if err := json.Unmarshal([]byte(rest.String()), m); err != nil {
		return nil, err
	}
	return m, nil
}

// object walks the object at r, calling f with each key, with r at its value; f must
// read the value.
func (r *jsonReader) object(f func(key string) error) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	if r.peek() == '}' {
		r.pos++
		return nil
	}
	for {
		key, err := r.str()
		if err != nil {
			return err
		}
		if err := r.expect(':'); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if err := f(key); err != nil {
			return err
		}
		c, err := r.next()
		if err != nil {
			return err
		}
		if c == '}' {
			return nil
		}
		if c != ',' {
			return fmt.Errorf("after %q: want ',' or '}', got %q", key, c)
		}
	}
}

// value passes over the value at r and returns its text.
func (r *jsonReader) value() (string, error) {
	r.skip()
	start := r.pos
	if err := r.skipValue(); err != nil {
		return "", err
	}
	return r.s[start:r.pos], nil
}

// readVocab reads a model's "vocab" object: token → id.
func readVocab(s string) (map[string]int, error) {
	r := jsonReader{s: s}
	m, err := r.vocab()
	if err == nil {
		if r.skip(); r.pos != len(s) {
			err = fmt.Errorf("unexpected %q after the vocabulary", s[r.pos])
		}
	}
	return m, err
}

// vocab reads the vocabulary object at r. Its keys are substrings of one copy of the
// object's text, which must not keep the whole file alive.
func (r *jsonReader) vocab() (map[string]int, error) {
	start := r.pos
	if r.peek() == 'n' {
		_, err := r.value()
		return nil, err
	}
	if r.peek() != '{' {
		return nil, fmt.Errorf("want an object, got %q", r.peek())
	}
	if err := r.skipValue(); err != nil {
		return nil, err
	}
	s := strings.Clone(r.s[start:r.pos])
	v := &jsonReader{s: s}
	if err := v.expect('{'); err != nil {
		return nil, err
	}
	m := make(map[string]int, min(strings.Count(s, ":"), len(s)/4))
	if v.peek() == '}' {
		return m, nil
	}
	for {
		k, err := v.str()
		if err != nil {
			return nil, err
		}
		if err := v.expect(':'); err != nil {
			return nil, err
		}
		id, err := v.int()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		m[k] = id
		c, err := v.next()
		if err != nil {
			return nil, err
		}
		if c == '}' {
			return m, nil
		}
		if c != ',' {
			return nil, fmt.Errorf("unexpected %q", c)
		}
	}
}

// readMerges reads a model's "merges".
func readMerges(s string) ([][2]string, error) {
	r := jsonReader{s: s}
	m, err := r.merges()
	if err == nil {
		if r.skip(); r.pos != len(s) {
			err = fmt.Errorf("unexpected %q after the merges", s[r.pos])
		}
	}
	return m, err
}

// merges reads the merges at r in either spelling: "a b" strings or ["a", "b"] pairs.
// Tokens are substrings of the text, kept only while the model is built.
func (r *jsonReader) merges() ([][2]string, error) {
	if r.peek() == 'n' {
		_, err := r.value()
		return nil, err
	}
	if err := r.expect('['); err != nil {
		return nil, err
	}
	if r.peek() == ']' {
		r.pos++
		return [][2]string{}, nil
	}
	var out [][2]string
	for i := 0; ; i++ {
		var pair [2]string
		if r.peek() == '[' {
			r.pos++
			for k := 0; k < 2; k++ {
				s, err := r.str()
				if err != nil {
					return nil, fmt.Errorf("[%d]: %w", i, err)
				}
				pair[k] = s
				if k == 0 {
					if err := r.expect(','); err != nil {
						return nil, fmt.Errorf("[%d]: want a pair: %w", i, err)
					}
				}
			}
			if err := r.expect(']'); err != nil {
				return nil, fmt.Errorf("[%d]: want a pair: %w", i, err)
			}
		} else {
			s, err := r.str()
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			var ok bool
			if pair, ok = splitMerge(s); !ok {
				return nil, fmt.Errorf("[%d] %q: want two tokens separated by one space", i, s)
			}
		}
		out = append(out, pair)
		c, err := r.next()
		if err != nil {
			return nil, err
		}
		if c == ']' {
			return out, nil
		}
		if c != ',' {
			return nil, fmt.Errorf("unexpected %q", c)
		}
	}
}

// vocabJSON and mergesJSON read the two with encoding/json too (tests, other files).
type vocabJSON map[string]int

func (v *vocabJSON) UnmarshalJSON(raw []byte) error {
	m, err := readVocab(string(raw))
	*v = m
	return err
}

type mergesJSON [][2]string

func (ms *mergesJSON) UnmarshalJSON(raw []byte) error {
	m, err := readMerges(string(raw))
	*ms = m
	return err
}

func splitMerge(s string) ([2]string, bool) {
	i := strings.IndexByte(s, ' ')
	if i < 0 || strings.IndexByte(s[i+1:], ' ') >= 0 {
		return [2]string{}, false
	}
	return [2]string{s[:i], s[i+1:]}, true
}

// jsonReader walks JSON text.
type jsonReader struct {
	s   string
	pos int
}

func (r *jsonReader) skip() {
	for r.pos < len(r.s) {
		switch r.s[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *jsonReader) peek() byte {
	r.skip()
	if r.pos < len(r.s) {
		return r.s[r.pos]
	}
	return 0
}

func (r *jsonReader) next() (byte, error) {
	r.skip()
	if r.pos >= len(r.s) {
		return 0, fmt.Errorf("unexpected end of JSON")
	}
	r.pos++
	return r.s[r.pos-1], nil
}

func (r *jsonReader) expect(want byte) error {
	c, err := r.next()
	if err != nil {
		return err
	}
	if c != want {
		return fmt.Errorf("want %q, got %q", want, c)
	}
	return nil
}

// str reads a string: a substring of the text when it holds no escape.
func (r *jsonReader) str() (string, error) {
	if err := r.expect('"'); err != nil {
		return "", err
	}
	start, escaped := r.pos, false
	for r.pos < len(r.s) {
		switch c := r.s[r.pos]; {
		case c == '\\':
			escaped = true
			r.pos += 2
			continue
		case c == '"':
			r.pos++
			if !escaped {
				return r.s[start : r.pos-1], nil
			}
			var s string
			err := json.Unmarshal([]byte(r.s[start-1:r.pos]), &s)
			return s, err
		case c < 0x20:
			return "", fmt.Errorf("control character %q in a string", c)
		}
		r.pos++
	}
	r.pos = len(r.s)
	return "", fmt.Errorf("unterminated string")
}

// skipStr passes over a string at r.pos.
func (r *jsonReader) skipStr() error {
	for r.pos++; r.pos < len(r.s); r.pos++ {
		switch r.s[r.pos] {
		case '\\':
			r.pos++
		case '"':
			r.pos++
			return nil
		}
	}
	r.pos = len(r.s)
	return fmt.Errorf("unterminated string")
}

func (r *jsonReader) int() (int, error) {
	r.skip()
	start := r.pos
	for r.pos < len(r.s) && (r.s[r.pos] == '-' || r.s[r.pos] >= '0' && r.s[r.pos] <= '9') {
		r.pos++
	}
	return strconv.Atoi(r.s[start:r.pos])
}

// skipValue passes over one value: brackets are balanced and strings closed; what is
// inside is checked by whoever reads the value.
func (r *jsonReader) skipValue() error {
	switch r.peek() {
	case 0:
		return fmt.Errorf("unexpected end of JSON")
	case '"':
		return r.skipStr()
	case '{', '[':
		depth := 0
		for r.pos < len(r.s) {
			switch r.s[r.pos] {
			case '"':
				if err := r.skipStr(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					r.pos++
					return nil
				}
			}
			r.pos++
		}
		return fmt.Errorf("unexpected end of JSON")
	}
	start := r.pos
	for r.pos < len(r.s) && strings.IndexByte(",}] \t\n\r", r.s[r.pos]) < 0 {
		r.pos++
	}
	if r.pos == start {
		return fmt.Errorf("unexpected %q", r.s[r.pos])
	}
	return nil
}
