package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"rlhfstation/engine"
	"rlhfstation/engine/tokenizer"
	"strconv"
	"strings"
)

func init() {
	register(command{name: "tokenize", summary: "show the tokens a model's tokenizer makes of a text", order: 40, run: runTokenize})
}

func runTokenize(s streams, args []string) error {
	fs := newFlagSet("tokenize", "tokenize --model DIR [--json] [--special=false] TEXT...\n\nTEXT: the words are joined with single spaces; - reads the text from standard input.", s.stderr)
	model := fs.String("model", "", modelFlagHelp)
	asJSON := fs.Bool("json", false, `print one JSON document {"ids", "tokens", "offsets"} (offsets: byte ranges in TEXT)`)
	special := fs.Bool("special", true, "add the tokenizer's special tokens (a BOS, say), as Hugging Face's encode does by default; --special=false for the text's tokens only")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usagef("tokenize needs a TEXT (or - to read standard input)")
	}
	text := strings.Join(rest, " ")
	if len(rest) == 1 && rest[0] == "-" {
		b, err := io.ReadAll(s.stdin)
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		text = string(b)
	}
	dir, err := engine.ModelDir(*model)
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return err
	}
	return printTokens(s.stdout, tok, tok.Encode(text, *special), *asJSON)
}

func printTokens(w io.Writer, tok *tokenizer.Tokenizer, e tokenizer.Encoding, asJSON bool) error {
	if asJSON {
		doc := struct {
			IDs     []int    `json:"ids"`
			Tokens  []string `json:"tokens"`
			Offsets [][2]int `json:"offsets"`
		}{IDs: e.IDs, Tokens: make([]string, len(e.IDs)), Offsets: e.Offsets}
		if doc.IDs == nil {
			doc.IDs, doc.Offsets = []int{}, [][2]int{}
		}
		for i, id := range e.IDs {
			doc.Tokens[i] = tok.Token(id)
		}
		return writeJSON(w, false, doc)
	}
	width := len("id")
	for _, id := range e.IDs {
		width = max(width, len(strconv.Itoa(id)))
	}
	fmt.Fprintf(w, "%*s  %s\n", width, "id", "token")
	for _, id := range e.IDs {
		fmt.Fprintf(w, "%*d  %s\n", width, id, readableToken(tok, id))
	}
	_, err := fmt.Fprintf(w, "%d tokens\n", len(e.IDs))
	return err
}
