package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

var parquetMagic = []byte("PAR1")

// readParquet reads every row of a Parquet file as a nested map: lists as []any, groups
// (structs) as map[string]any, byte arrays that are UTF-8 as strings. The page index is not
// read (parquet-go v0.32.0 panics in File.ReadPageIndex on @dsnp/parquetjs's), and any panic
// of the reader on a damaged file becomes an error naming the file.
func readParquet(path string, b []byte) (*source, error) {
	return guard(path, func() (*source, error) { return decodeParquet(path, b) })
}

// guard runs read, turning a panic of the Parquet reader into an error naming the file.
func guard(path string, read func() (*source, error)) (s *source, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%s: damaged or unsupported Parquet file (the reader failed: %v)", path, r)
		}
	}()
	return read()
}

func decodeParquet(path string, b []byte) (*source, error) {
	if len(b) < 12 || !bytes.HasPrefix(b, parquetMagic) || !bytes.HasSuffix(b, parquetMagic) {
		return nil, fmt.Errorf("%s: not a Parquet file (it lacks the PAR1 marks at its start and end)", path)
	}
	// parquet-go allocates the footer's claimed length before comparing it with the file's:
	// a 12-byte file could ask for 4 GB.
	if n := binary.LittleEndian.Uint32(b[len(b)-8:]); int64(n) > int64(len(b)-12) {
		return nil, fmt.Errorf("%s: damaged Parquet file (its footer claims %d bytes of a %d-byte file)", path, n, len(b))
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, fmt.Errorf("%s: damaged or unsupported Parquet file: %v", path, err)
	}
	s := &source{path: path, kind: Parquet, columns: schemaColumns(f.Schema(), "")}
	r := parquet.NewReader(f)
	defer r.Close()
	for i := 1; ; i++ {
		m := map[string]any{}
		if err := r.Read(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %v", at(path, i, true), err)
		}
		s.rows = append(s.rows, row{cols: plain(m).(map[string]any), line: i})
	}
	return s, nil
}

// plain makes a decoded Parquet value like a decoded JSON one: byte arrays that are UTF-8
// become strings (a column without the STRING annotation), recursively.
func plain(v any) any {
	switch x := v.(type) {
	case []byte:
		if utf8.Valid(x) {
			return string(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = plain(e)
		}
	case []any:
		for i, e := range x {
			x[i] = plain(e)
		}
	}
	return v
}

// schemaColumns lists a schema's columns, fields of groups (structs) as dotted paths; lists
// (repeated fields, and LIST groups around one) are one column.
func schemaColumns(n parquet.Node, prefix string) []string {
	var out []string
	for _, f := range n.Fields() {
		name := prefix + f.Name()
		sub := f.Fields()
		if f.Leaf() || f.Repeated() || len(sub) == 0 || len(sub) == 1 && sub[0].Repeated() {
			out = append(out, name)
			continue
		}
		out = append(out, schemaColumns(f, name+".")...)
	}
	return out
}
