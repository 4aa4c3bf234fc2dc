package cli

import (
	"flag"
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
	fs := newFlagSet("tokenize", tokenizeHelp, s.stderr)
	model := fs.String("model", "", modelFlagHelp)
	asJSON := fs.Bool("json", false, `print one JSON document {"ids", "tokens", "offsets"}, and "text" (the rendered prompt) with --chat; offsets are byte ranges in TEXT, or in the rendered prompt with --chat`)
	special := fs.Bool("special", true, "add the tokenizer's special tokens (a BOS, say), as Hugging Face's encode does by default; --special=false for the text's tokens only")
	cf := addChatFlags(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check("tokenize"); err != nil {
		return err
	}
	if *cf.on && flagSet(fs, "special") && *special {
		return usagef("tokenize: --chat encodes without adding special tokens (the template writes them): drop --special")
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
	prompt, rendered, err := cf.prompt(dir, text)
	if err != nil {
		return err
	}
	if !rendered {
		return printTokens(s.stdout, tok, tok.Encode(text, *special), nil, *asJSON)
	}
	return printTokens(s.stdout, tok, tok.Encode(prompt, false), &prompt, *asJSON)
}

const tokenizeHelp = `tokenize [--model DIR] [--json] [--special=false] [--chat [--chat-template FILE] [--chat-template-kwargs JSON]] TEXT...

Prints the tokens the model's tokenizer makes of TEXT (the words joined with single spaces; -
reads standard input). With --chat, TEXT is first rendered as one user message with the model's
chat template and its generation prompt, and the rendering is printed above its tokens: the
prompt as a run sees a conversational one, encoded without adding special tokens again (the
template writes the BOS where the model wants one).`

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// printTokens prints an encoding; rendered is the text a chat template made, nil for none.
func printTokens(w io.Writer, tok *tokenizer.Tokenizer, e tokenizer.Encoding, rendered *string, asJSON bool) error {
	if asJSON {
		doc := struct {
			Text    *string  `json:"text,omitempty"`
			IDs     []int    `json:"ids"`
			Tokens  []string `json:"tokens"`
			Offsets [][2]int `json:"offsets"`
		}{Text: rendered, IDs: e.IDs, Tokens: make([]string, len(e.IDs)), Offsets: e.Offsets}
		if doc.IDs == nil {
			doc.IDs, doc.Offsets = []int{}, [][2]int{}
		}
		for i, id := range e.IDs {
			doc.Tokens[i] = tok.Token(id)
		}
		return writeJSON(w, false, doc)
	}
	if rendered != nil {
		fmt.Fprintf(w, "rendered with the chat template:\n%s\n\n", *rendered)
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
