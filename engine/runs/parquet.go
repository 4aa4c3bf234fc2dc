package runs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"

	"rlhfstation/engine/events"
)

// readParquetTable reads TRL's completions_<step>.parquet (pandas' to_parquet of the
// completions table). Columns may be nested (a conversational prompt is a list of
// {role, content}): their string leaves are joined, role and content paired.
func readParquetTable(path string, step *int) ([]events.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, fi.Size())
	if err != nil {
		return nil, err
	}
	leaves := pf.Schema().Columns() // leaf column index → path
	var cols []string               // top-level columns, in order
	top := make([]int, len(leaves)) // leaf → index in cols
	for i, p := range leaves {
		if len(cols) == 0 || cols[len(cols)-1] != p[0] {
			cols = append(cols, p[0])
		}
		top[i] = len(cols) - 1
	}
	if !contains(cols, "completion") {
		return nil, fmt.Errorf("no completion column (columns %v)", cols)
	}
	var rows [][]any
	buf := make([]parquet.Row, 16)
	for _, rg := range pf.RowGroups() {
		rr := rg.Rows()
		for len(rows) < maxSamples {
			n, err := rr.ReadRows(buf)
			for _, row := range buf[:n] {
				rows = append(rows, rowValues(row, leaves, top, len(cols)))
			}
			if errors.Is(err, io.EOF) || n == 0 {
				break
			}
			if err != nil {
				rr.Close()
				return nil, err
			}
		}
		rr.Close()
	}
	return tableSamples(cols, func(i int) []any { return rows[i] }, len(rows), step), nil
}

// rowValues gathers a row's leaf values into one value per top-level column: a number or a
// string for flat columns, the joined text of nested ones.
func rowValues(row parquet.Row, leaves [][]string, top []int, ncols int) []any {
	out := make([]any, ncols)
	nested := map[int]map[string][]string{} // column → leaf name → strings
	for _, v := range row {
		c := v.Column()
		if c < 0 || c >= len(leaves) || v.IsNull() {
			continue
		}
		t := top[c]
		if len(leaves[c]) > 1 {
			if nested[t] == nil {
				nested[t] = map[string][]string{}
			}
			leaf := leaves[c][len(leaves[c])-1]
			nested[t][leaf] = append(nested[t][leaf], valueText(v))
			continue
		}
		switch v.Kind() {
		case parquet.Boolean:
			out[t] = v.Boolean()
		case parquet.Int32:
			out[t] = float64(v.Int32())
		case parquet.Int64:
			out[t] = float64(v.Int64())
		case parquet.Float:
			out[t] = float64(v.Float())
		case parquet.Double:
			out[t] = v.Double()
		default:
			out[t] = string(v.ByteArray())
		}
	}
	for t, leaves := range nested {
		roles, contents := leaves["role"], leaves["content"]
		if len(roles) == len(contents) && len(roles) > 0 {
			lines := make([]string, len(roles))
			for i := range roles {
				lines[i] = roles[i] + ": " + contents[i]
			}
			out[t] = strings.Join(lines, "\n")
			continue
		}
		var all []string
		for _, k := range sortedKeys(leaves) {
			all = append(all, leaves[k]...)
		}
		out[t] = strings.Join(all, "\n")
	}
	return out
}

func valueText(v parquet.Value) string {
	switch v.Kind() {
	case parquet.ByteArray, parquet.FixedLenByteArray:
		return string(v.ByteArray())
	}
	return v.String()
}
