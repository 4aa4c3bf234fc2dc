// Package pyjson reads JSON as Python writes it. Python's json module (and so Hugging Face's
// trainer_state.json) writes non-finite floats as the bare words NaN, Infinity and -Infinity,
// which are not JSON; encoding/json refuses them. Reader turns them into the strings "NaN",
// "+Inf" and "-Inf", which events.Metrics and Number accept, and passes everything else
// through byte for byte, streaming.
package pyjson

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
)

// Reader rewrites the non-finite words of a JSON stream outside strings.
type Reader struct {
	r   *bufio.Reader
	out []byte // rewritten bytes not yet returned

	inString, escape bool
}

// NewReader wraps r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Read implements io.Reader.
func (p *Reader) Read(b []byte) (int, error) {
	for len(p.out) == 0 {
		if err := p.step(); err != nil {
			return 0, err
		}
	}
	n := copy(b, p.out)
	p.out = p.out[n:]
	return n, nil
}

// step moves one byte (or one non-finite word) from the input to out.
func (p *Reader) step() error {
	c, err := p.r.ReadByte()
	if err != nil {
		return err
	}
	switch {
	case p.inString:
		switch {
		case p.escape:
			p.escape = false
		case c == '\\':
			p.escape = true
		case c == '"':
			p.inString = false
		}
	case c == '"':
		p.inString = true
	case c == 'N' || c == 'I' || (c == '-' && p.peek('I')):
		word := []byte{c}
		for {
			d, err := p.r.ReadByte()
			if err != nil {
				break
			}
			if !(d >= 'a' && d <= 'z' || d >= 'A' && d <= 'Z') {
				p.r.UnreadByte()
				break
			}
			word = append(word, d)
		}
		switch string(word) {
		case "NaN":
			p.out = append(p.out, `"NaN"`...)
		case "Infinity":
			p.out = append(p.out, `"+Inf"`...)
		case "-Infinity":
			p.out = append(p.out, `"-Inf"`...)
		default: // not JSON either way: let the decoder say where
			p.out = append(p.out, word...)
		}
		return nil
	}
	p.out = append(p.out, c)
	return nil
}

func (p *Reader) peek(want byte) bool {
	b, err := p.r.Peek(1)
	return err == nil && b[0] == want
}

// Number reads a JSON value as a number: a JSON number, or one of the strings "NaN", "+Inf",
// "Inf", "-Inf", "Infinity", "-Infinity". ok is false for anything else: other strings, lists,
// objects, booleans and null (which means "none" to Python's json, but a non-finite float to
// orjson: the caller knows which wrote the file).
func Number(raw json.RawMessage) (v float64, ok bool) {
	if len(raw) == 0 {
		return 0, false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		switch s {
		case "NaN", "nan":
			return math.NaN(), true
		case "+Inf", "Inf", "Infinity", "inf":
			return math.Inf(1), true
		case "-Inf", "-Infinity", "-inf":
			return math.Inf(-1), true
		}
		return 0, false
	case 'n', 't', 'f', '[', '{':
		return 0, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false
	}
	return v, true
}
