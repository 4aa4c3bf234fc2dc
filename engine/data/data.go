// Package data reads prompt datasets and reference texts (DESIGN §6.3) the way users bring
// them: JSONL, a JSON array, Parquet (flat Hub tables and verl's nested layout), a folder of
// shards of one of these, and plain text split into lines or into blank-line-separated
// documents. A prompt is a string or a list of {role, content} messages (TRL's conversational
// format). Errors name the file and the line (or the Parquet row).
package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Message is one turn of a conversational prompt.
type Message struct{ Role, Content string }

// Roles are the message roles accepted (those of Hugging Face chat templates).
var Roles = []string{"system", "user", "assistant", "tool"}

// Example is one dataset entry.
type Example struct {
	// Prompt is what the policy is asked, as plain text; "" for a conversational prompt (see
	// Messages) and for reference-only text.
	Prompt string
	// Messages is the prompt as chat turns when the dataset gives it as a list of
	// {role, content} messages (a `prompt` list, or a `messages` column without its final
	// assistant turn); nil for plain prompts. A chat template renders it.
	Messages []Message
	// Answer is the ground truth compared with completions: GSM8K's text after `#### `
	// (commas removed), or the answer column, normalised the same way; "" when absent.
	Answer string
	// Text is the reference text for perplexity baselines: the `text` field, a line or a
	// document of a text file, the full reference answer (GSM8K's worked solution), or the
	// final assistant turn of a `messages` column.
	Text string
	// Extra holds the entry's other columns (the top-level columns the reader did not map to
	// Prompt, Answer or Text; a column read through a dotted key such as
	// reward_model.ground_truth stays), as decoded from JSON or Parquet; nil when there are
	// none. Command rewards receive them, as TRL passes a dataset's other columns to reward
	// functions.
	Extra map[string]any
	File  string // the file the entry comes from (a shard, for a folder)
	Line  int    // the line the entry starts on; the row (from 1) in a Parquet file
	row   bool   // Line counts Parquet rows
}

// Where names the entry's place for messages: "file:line", or "file row N" for Parquet.
func (x Example) Where() string { return at(x.File, x.Line, x.row) }

func at(file string, n int, row bool) string {
	if row {
		return fmt.Sprintf("%s row %d", file, n)
	}
	return fmt.Sprintf("%s:%d", file, n)
}

// Format is a dataset layout: which columns hold the prompt and the references.
type Format string

// The layouts Read recognises.
const (
	PromptJSONL Format = "jsonl"       // a prompt column and an optional answer column
	GSM8K       Format = "gsm8k"       // {"question": ..., "answer": "... #### 72"}
	TextJSONL   Format = "jsonl-text"  // {"text": ...}
	Lines       Format = "text-lines"  // one prompt a line
	Documents   Format = "text-blocks" // documents separated by blank lines
)

// Container is a file format.
type Container string

// The file formats read.
const (
	JSONL   Container = "JSONL"
	JSON    Container = "JSON array"
	Parquet Container = "Parquet"
	Text    Container = "text"
)

// Options choose a dataset's columns. Keys are column names or dotted paths into nested
// columns ("reward_model.ground_truth"); "" detects them (see Load).
type Options struct {
	PromptKey string
	AnswerKey string
}

// Dataset is what Load read.
type Dataset struct {
	Examples  []Example
	Format    Format
	Container Container
	Files     []string // the files read, in order: one, or a folder's shards
	// PromptKey, AnswerKey and TextKey are the columns used ("" when none).
	PromptKey, AnswerKey, TextKey string
	// Conversational is set when prompts are message lists.
	Conversational bool
	// Columns are the columns of the first file, nested ones as dotted paths.
	Columns []string
	Folder  string // the folder of shards read, "" for a file
	Split   string // the split chosen in a folder holding several ("train"), else ""
}

// Describe says in one line what was read and which columns were used, for a run's first lines.
func (d *Dataset) Describe() string {
	var b strings.Builder
	src := d.Files[0]
	if d.Folder != "" {
		first, last := filepath.Base(d.Files[0]), filepath.Base(d.Files[len(d.Files)-1])
		src = fmt.Sprintf("%s (%d files: %s … %s", d.Folder, len(d.Files), first, last)
		if len(d.Files) == 1 {
			src = fmt.Sprintf("%s (1 file: %s", d.Folder, first)
		}
		if d.Split != "" {
			src += fmt.Sprintf(", split %q", d.Split)
		}
		src += ")"
	}
	fmt.Fprintf(&b, "%s: %d entries, %s", src, len(d.Examples), d.Container)
	switch {
	case d.PromptKey != "":
		kind := "text"
		if d.Conversational {
			kind = "messages"
		}
		fmt.Fprintf(&b, "; prompt from %q (%s)", d.PromptKey, kind)
		if d.AnswerKey != "" {
			fmt.Fprintf(&b, ", answer from %q", d.AnswerKey)
		} else if d.TextKey != "" {
			fmt.Fprintf(&b, ", reference from %q", d.TextKey)
		} else {
			b.WriteString(", no answer column")
		}
	case d.TextKey != "":
		fmt.Fprintf(&b, "; text from %q", d.TextKey)
	default:
		fmt.Fprintf(&b, " (%s)", d.Format)
	}
	if d.Format == GSM8K {
		b.WriteString(`, GSM8K "####" answers`)
	}
	return b.String()
}

// Read reads a dataset with its columns detected (see Load).
func Read(path string) ([]Example, Format, error) {
	d, err := Load(path, Options{})
	if err != nil {
		return nil, "", err
	}
	return d.Examples, d.Format, nil
}

// ReadDocuments reads reference texts for baselines: data files as Read does, plain text as
// blank-line-separated documents.
func ReadDocuments(path string) ([]Example, Format, error) {
	d, err := load(path, Options{}, Documents)
	if err != nil {
		return nil, "", err
	}
	return d.Examples, d.Format, nil
}

// ReadFormat reads a plain-text file as Lines or Documents; other formats are detected.
func ReadFormat(path string, f Format) ([]Example, error) {
	d, err := load(path, Options{}, f)
	if err != nil {
		return nil, err
	}
	return d.Examples, nil
}

// Load reads a dataset: a file, or a folder of shards (see readFolder). The file format comes
// from the name and the content: Parquet (.parquet, or PAR1 magic), a JSON array (first
// character `[`), JSONL (first line a JSON object; GSM8K when it has question/answer with
// "#### N" answers), else plain text with one prompt a line.
//
// Columns, when o leaves them unset: the prompt is the first of prompt, question, problem,
// input, messages that the first entry has; the answer the first of answer, solution,
// ground_truth, reward_model.ground_truth; a file with none of the prompt columns but `text`
// holds reference texts. A `messages` list ending with an assistant turn gives that turn as
// the reference completion (Text, and the Answer when there is no answer column).
func Load(path string, o Options) (*Dataset, error) { return load(path, o, Lines) }

// load reads path; plain text is split as textFormat says (Lines or Documents).
func load(path string, o Options, textFormat Format) (*Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return readFolder(path, o)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, b, o, textFormat)
}

// parse reads a file's bytes b; path names it in errors.
func parse(path string, b []byte, o Options, textFormat Format) (*Dataset, error) {
	c, err := sniff(path, b)
	if err != nil {
		return nil, err
	}
	if c == Text {
		return readText(path, b, textFormat)
	}
	src, err := readRows(path, b, c)
	if err != nil {
		return nil, err
	}
	return mapColumns([]*source{src}, o)
}

// readText splits a text file into lines or documents.
func readText(path string, b []byte, f Format) (*Dataset, error) {
	if err := checkUTF8(path, b); err != nil {
		return nil, err
	}
	var ex []Example
	switch f {
	case Lines:
		ex = splitLines(string(b))
	case Documents:
		ex = splitDocuments(string(b))
	default:
		return nil, fmt.Errorf("%s: a text file cannot be read as %q", path, f)
	}
	if len(ex) == 0 {
		what := "prompt"
		if f == Documents {
			what = "document"
		}
		return nil, fmt.Errorf("%s: %w (no %s in it)", path, ErrEmpty, what)
	}
	for i := range ex {
		ex[i].File = path
	}
	return &Dataset{Examples: ex, Format: f, Container: Text, Files: []string{path}}, nil
}

// checkUTF8 refuses text that is not UTF-8, naming the line of the first bad byte (JSON
// decoding would silently turn it into U+FFFD).
func checkUTF8(path string, b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		i += n
	}
	return fmt.Errorf("%s:%d: not UTF-8 text (byte 0x%02x at offset %d): convert the file to UTF-8", path, lineAt(b, i), b[i], i)
}

// lineAt is the line (from 1) holding byte offset i of b.
func lineAt(b []byte, i int) int { return 1 + strings.Count(string(b[:i]), "\n") }

// splitLines gives one example per non-blank line (its Prompt and Text).
func splitLines(s string) []Example {
	var out []Example
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		out = append(out, Example{Prompt: line, Text: line, Line: n + 1})
	}
	return out
}

// splitDocuments gives one example per run of non-blank lines, joined with newlines.
func splitDocuments(s string) []Example {
	var out []Example
	var doc []string
	start := 0
	flush := func() {
		if len(doc) > 0 {
			text := strings.Join(doc, "\n")
			out = append(out, Example{Prompt: text, Text: text, Line: start})
			doc = nil
		}
	}
	for n, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if doc == nil {
			start = n + 1
		}
		doc = append(doc, line)
	}
	flush()
	return out
}

// ErrEmpty is wrapped by errors for files without entries.
var ErrEmpty = errors.New("empty file")
