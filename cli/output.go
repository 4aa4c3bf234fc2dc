package cli

import (
	"encoding/json"
	"io"
)

// writeJSON prints v as a command's one --json document: indented for reports people read
// too, compact for token-level output; never HTML-escaped, so "<|endoftext|>" stays readable.
func writeJSON(w io.Writer, indent bool, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}
