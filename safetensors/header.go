package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"unicode/utf8"
)

// MaxHeaderSize bounds the JSON header, as the reference implementation does (100 MB).
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header entry holding free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a file; Begin and End are byte offsets into the buffer
// that follows the header.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	Begin int64
	End   int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// FormatError is a malformed file: Path is the file (empty from ParseHeader), Tensor the
// tensor concerned (empty when the fault is the header as a whole).
type FormatError struct {
	Path   string
	Tensor string
	Msg    string
}

func (e *FormatError) Error() string {
	s := "safetensors: "
	if e.Path != "" {
		s += e.Path + ": "
	}
	if e.Tensor != "" {
		s += fmt.Sprintf("tensor %q: ", e.Tensor)
	}
	return s + e.Msg
}

func headerErr(tensor, format string, a ...any) error {
	return &FormatError{Tensor: tensor, Msg: fmt.Sprintf(format, a...)}
}

// rawEntry is one tensor entry as the JSON holds it; pointers tell a missing field from a
// zero one.
type rawEntry struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the JSON header b of a file of fileSize bytes in all
// (8 length bytes + len(b) header bytes + the buffer). It checks every dtype, shape and
// offset pair, that the tensors tile the buffer exactly (contiguous, no overlap, starting at
// 0 and ending at its last byte) and that no name repeats. Errors are *FormatError.
func ParseHeader(b []byte, fileSize int64) (map[string]TensorInfo, map[string]string, error) {
	if len(b) > MaxHeaderSize {
		return nil, nil, headerErr("", "header is %d bytes, more than the %d allowed", len(b), MaxHeaderSize)
	}
	bufSize := fileSize - 8 - int64(len(b))
	if bufSize < 0 {
		return nil, nil, headerErr("", "file is %d bytes, shorter than its 8-byte length and %d-byte header (truncated?)", fileSize, len(b))
	}
	if !utf8.Valid(b) {
		return nil, nil, headerErr("", "header is not valid UTF-8")
	}
	entries, names, metadata, err := decodeHeader(b)
	if err != nil {
		return nil, nil, err
	}
	infos := make(map[string]TensorInfo, len(entries))
	for _, name := range names {
		info, err := checkEntry(name, entries[name], bufSize)
		if err != nil {
			return nil, nil, err
		}
		infos[name] = info
	}
	if err := checkTiling(infos, bufSize); err != nil {
		return nil, nil, err
	}
	return infos, metadata, nil
}

// decodeHeader walks the top-level object token by token so that duplicate names are caught
// (a plain map decode would keep the last one silently). names come back sorted.
func decodeHeader(b []byte) (map[string]rawEntry, []string, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, nil, headerErr("", "header is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, nil, headerErr("", "header is not a JSON object")
	}
	entries := map[string]rawEntry{}
	var metadata map[string]string
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, nil, headerErr("", "header is not JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, nil, nil, headerErr("", "header is not JSON: key %v", tok)
		}
		if name == metadataKey {
			if seenMeta {
				return nil, nil, nil, headerErr("", "%s appears twice", metadataKey)
			}
			seenMeta = true
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, nil, nil, headerErr("", "header is not JSON: %v", err)
			}
			if err := json.Unmarshal(raw, &metadata); err != nil {
				return nil, nil, nil, headerErr("", "%s must map strings to strings: %v", metadataKey, err)
			}
			continue
		}
		if _, dup := entries[name]; dup {
			return nil, nil, nil, headerErr(name, "name appears twice in the header")
		}
		var e rawEntry
		if err := dec.Decode(&e); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return nil, nil, nil, headerErr(name, "malformed entry: %v", err)
			}
			return nil, nil, nil, headerErr("", "header is not JSON: %v", err)
		}
		entries[name] = e
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, nil, headerErr("", "header is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, nil, headerErr("", "header has data after its JSON object (only space padding is allowed)")
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return entries, names, metadata, nil
}

func checkEntry(name string, e rawEntry, bufSize int64) (TensorInfo, error) {
	if name == "" {
		return TensorInfo{}, headerErr(name, "empty tensor name")
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return TensorInfo{}, headerErr(name, "entry needs dtype, shape and data_offsets")
	}
	dt := DType(*e.DType)
	if !dt.Known() {
		return TensorInfo{}, headerErr(name, "unknown dtype %q", *e.DType)
	}
	info := TensorInfo{Name: name, DType: dt, Shape: make([]int, len(*e.Shape))}
	// Element count, saturating above bufSize so that a huge shape cannot overflow.
	limit := bufSize/int64(dt.Size()) + 1
	n := int64(1)
	for i, d := range *e.Shape {
		if d < 0 {
			return TensorInfo{}, headerErr(name, "shape %v has an invalid dimension %d", *e.Shape, d)
		}
		info.Shape[i] = int(d)
		if n != 0 && d != 0 && n > limit/d {
			n = limit
		} else {
			n = min(n*d, limit)
		}
	}
	off := *e.DataOffsets
	if len(off) != 2 {
		return TensorInfo{}, headerErr(name, "data_offsets must be [begin, end], got %v", off)
	}
	info.Begin, info.End = off[0], off[1]
	if info.Begin < 0 || info.End < info.Begin {
		return TensorInfo{}, headerErr(name, "data_offsets [%d, %d] are not an ordered pair of non-negative offsets", info.Begin, info.End)
	}
	if want := n * int64(dt.Size()); n >= limit || info.End-info.Begin != want {
		return TensorInfo{}, headerErr(name, "data_offsets [%d, %d] span %d bytes but %s %v needs %s",
			info.Begin, info.End, info.End-info.Begin, dt, *e.Shape, neededBytes(n, limit, want))
	}
	if info.End > bufSize {
		return TensorInfo{}, headerErr(name, "data ends at byte %d of the buffer but the file holds only %d buffer bytes (truncated?)", info.End, bufSize)
	}
	return info, nil
}

func neededBytes(n, limit, want int64) string {
	if n >= limit {
		return "more than the whole file"
	}
	return fmt.Sprintf("%d", want)
}

// checkTiling verifies that the tensors, sorted by offset, cover [0, bufSize) exactly once.
func checkTiling(infos map[string]TensorInfo, bufSize int64) error {
	list := make([]TensorInfo, 0, len(infos))
	for _, t := range infos {
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	var at int64
	prev := ""
	for _, t := range list {
		switch {
		case t.Begin < at:
			return headerErr(t.Name, "data_offsets [%d, %d] overlap tensor %q", t.Begin, t.End, prev)
		case t.Begin > at:
			return headerErr(t.Name, "data_offsets [%d, %d] leave a gap: bytes [%d, %d) belong to no tensor", t.Begin, t.End, at, t.Begin)
		}
		at, prev = t.End, t.Name
	}
	if at != bufSize {
		return headerErr("", "tensors end at byte %d of the buffer but the buffer holds %d bytes", at, bufSize)
	}
	return nil
}
