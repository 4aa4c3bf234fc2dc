package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// row is one entry before its columns are mapped: a JSON object or a Parquet row.
type row struct {
	cols map[string]any
	line int // JSONL/JSON line the entry starts on, or Parquet row from 1
}

// source is one file's rows.
type source struct {
	path    string
	kind    Container
	rows    []row
	columns []string // column names, nested ones as dotted paths
}

func (s *source) at(n int) string { return at(s.path, n, s.kind == Parquet) }

var bom = []byte("\xef\xbb\xbf")

// sniff tells a data file's format from its name and first bytes.
func sniff(path string, b []byte) (Container, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".parquet" || bytes.HasPrefix(b, []byte("PAR1")) {
		return Parquet, nil
	}
	jsonName := ext == ".json" || ext == ".jsonl"
	t := bytes.TrimLeft(bytes.TrimPrefix(b, bom), " \t\r\n")
	if len(t) == 0 {
		return "", fmt.Errorf("%s: %w", path, ErrEmpty)
	}
	switch t[0] {
	case '[':
		if jsonName || json.Valid(t) {
			return JSON, nil
		}
	case '{':
		first, _, _ := bytes.Cut(t, []byte("\n"))
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(first, &obj); err == nil {
			return JSONL, nil
		} else if jsonName {
			if json.Valid(t) {
				return "", fmt.Errorf("%s: one JSON object spread over lines: want one object a line (JSONL) or an array of objects", path)
			}
			return "", fmt.Errorf("%s:%d: bad JSON: %v", path, lineAt(b, len(b)-len(t)), err)
		}
	default:
		if jsonName {
			return "", fmt.Errorf("%s:%d: a JSON file must hold one object a line or an array of objects, found %q", path, lineAt(b, len(b)-len(t)), t[:min(len(t), 20)])
		}
	}
	return Text, nil // text, even if it starts with a brace
}

// readRows reads a JSONL, JSON array or Parquet file's entries.
func readRows(path string, b []byte, c Container) (*source, error) {
	var (
		s   *source
		err error
	)
	switch c {
	case JSONL:
		s, err = readJSONL(path, b)
	case JSON:
		s, err = readJSONArray(path, b)
	case Parquet:
		s, err = readParquet(path, b)
	default:
		return nil, fmt.Errorf("%s: no rows in a %s file", path, c)
	}
	if err != nil {
		return nil, err
	}
	if len(s.rows) == 0 {
		return nil, fmt.Errorf("%s: %w (no entries in it)", path, ErrEmpty)
	}
	if s.columns == nil {
		s.columns = columnsOf(s.rows[0].cols, "")
	}
	return s, nil
}

// decodeObject decodes one JSON object. Numbers stay as written (json.Number): other columns
// pass through to command rewards unchanged, large integer ids included.
func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s, not a JSON object", kindOf(v))
	}
	return obj, nil
}

// readJSONL reads one object a line; blank lines are skipped.
func readJSONL(path string, b []byte) (*source, error) {
	if err := checkUTF8(path, b); err != nil {
		return nil, err
	}
	s := &source{path: path, kind: JSONL}
	for n, line := range bytes.Split(bytes.TrimPrefix(b, bom), []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		obj, err := decodeObject(line)
		if err != nil {
			return nil, fmt.Errorf("%s: bad JSON: %v", s.at(n+1), err)
		}
		s.rows = append(s.rows, row{cols: obj, line: n + 1})
	}
	return s, nil
}

// readJSONArray reads a file holding one array of objects; each entry's line is where it starts.
func readJSONArray(path string, b []byte) (*source, error) {
	if err := checkUTF8(path, b); err != nil {
		return nil, err
	}
	s := &source{path: path, kind: JSON}
	b = bytes.TrimPrefix(b, bom) // no newline in it: lines stay
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	line, counted := 1, 0
	lineOf := func(off int) int { // off only grows
		line += bytes.Count(b[counted:off], []byte("\n"))
		counted = off
		return line
	}
	if _, err := dec.Token(); err != nil { // the '[' sniff saw
		return nil, fmt.Errorf("%s: bad JSON: %v", path, err)
	}
	for i := 1; dec.More(); i++ {
		start := int(dec.InputOffset())
		for start < len(b) && strings.IndexByte(" \t\r\n,", b[start]) >= 0 {
			start++
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: bad JSON in entry %d: %v", at(path, lineOf(start), false), i, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: entry %d is %s, not a JSON object", at(path, lineOf(start), false), i, kindOf(v))
		}
		s.rows = append(s.rows, row{cols: obj, line: lineOf(start)})
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, fmt.Errorf("%s:%d: bad JSON: %v", path, lineOf(int(dec.InputOffset())), err)
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return nil, fmt.Errorf("%s:%d: text after the JSON array", path, lineOf(len(b)-len(rest)))
	}
	return s, nil
}
