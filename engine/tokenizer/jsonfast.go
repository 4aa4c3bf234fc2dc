package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The vocabulary and merges are most of a tokenizer.json (151k entries each for
// Qwen); reading them with encoding/json's reflection costs more than the rest of
// loading together. These readers take the already validated raw JSON of the two.

// vocabJSON is the model's "vocab" object: token → id.
type vocabJSON map[string]int

func (v *vocabJSON) UnmarshalJSON(raw []byte) error {
	r := jsonReader{b: raw}
	if r.peek() != '{' {
		return nil // not a BPE vocabulary: parseModel names the model's type
	}
	m := map[string]int{}
	if err := r.expect('{'); err != nil {
		return err
	}
	if r.peek() == '}' {
		*v = m
		return nil
	}
	for {
		k, err := r.str()
		if err != nil {
			return err
		}
		if err := r.expect(':'); err != nil {
			return err
		}
		id, err := r.int()
		if err != nil {
			return fmt.Errorf("vocab %q: %w", k, err)
		}
		m[k] = id
		c, err := r.next()
		if err != nil {
			return err
		}
		if c == '}' {
			*v = m
			return nil
		}
		if c != ',' {
			return fmt.Errorf("vocab: unexpected %q", c)
		}
	}
}

// mergesJSON is the model's "merges" in either spelling: "a b" strings or
// ["a", "b"] pairs.
type mergesJSON [][2]string

func (ms *mergesJSON) UnmarshalJSON(raw []byte) error {
	r := jsonReader{b: raw}
	if r.peek() == 'n' { // null
		*ms = nil
		return nil
	}
	if err := r.expect('['); err != nil {
		return err
	}
	out := mergesJSON{}
	if r.peek() == ']' {
		*ms = out
		return nil
	}
	for i := 0; ; i++ {
		var pair [2]string
		if r.peek() == '[' {
			r.pos++
			for k := 0; k < 2; k++ {
				s, err := r.str()
				if err != nil {
					return fmt.Errorf("merges[%d]: %w", i, err)
				}
				pair[k] = s
				if k == 0 {
					if err := r.expect(','); err != nil {
						return fmt.Errorf("merges[%d]: want a pair: %w", i, err)
					}
				}
			}
			if err := r.expect(']'); err != nil {
				return fmt.Errorf("merges[%d]: want a pair: %w", i, err)
			}
		} else {
			s, err := r.str()
			if err != nil {
				return fmt.Errorf("merges[%d]: %w", i, err)
			}
			var ok bool
			if pair, ok = splitMerge(s); !ok {
				return fmt.Errorf("merges[%d] %q: want two tokens separated by one space", i, s)
			}
		}
		out = append(out, pair)
		c, err := r.next()
		if err != nil {
			return err
		}
		if c == ']' {
			*ms = out
			return nil
		}
		if c != ',' {
			return fmt.Errorf("merges: unexpected %q", c)
		}
	}
}

func splitMerge(s string) ([2]string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			a, b := s[:i], s[i+1:]
			for j := 0; j < len(b); j++ {
				if b[j] == ' ' {
					return [2]string{}, false
				}
			}
			return [2]string{a, b}, true
		}
	}
	return [2]string{}, false
}

// jsonReader walks valid JSON text.
type jsonReader struct {
	b   []byte
	pos int
}

func (r *jsonReader) skip() {
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *jsonReader) peek() byte {
	r.skip()
	if r.pos < len(r.b) {
		return r.b[r.pos]
	}
	return 0
}

func (r *jsonReader) next() (byte, error) {
	c := r.peek()
	if c == 0 {
		return 0, fmt.Errorf("unexpected end of JSON")
	}
	r.pos++
	return c, nil
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

func (r *jsonReader) str() (string, error) {
	if err := r.expect('"'); err != nil {
		return "", err
	}
	start, escaped := r.pos, false
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case '\\':
			escaped = true
			r.pos += 2
			continue
		case '"':
			r.pos++
			if !escaped {
				return string(r.b[start : r.pos-1]), nil
			}
			var s string
			err := json.Unmarshal(r.b[start-1:r.pos], &s)
			return s, err
		}
		r.pos++
	}
	return "", fmt.Errorf("unterminated string")
}

func (r *jsonReader) int() (int, error) {
	r.skip()
	start := r.pos
	for r.pos < len(r.b) && (r.b[r.pos] == '-' || r.b[r.pos] >= '0' && r.b[r.pos] <= '9') {
		r.pos++
	}
	return strconv.Atoi(string(r.b[start:r.pos]))
}
