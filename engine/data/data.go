// Package data reads prompt datasets and reference texts (DESIGN §6.3): JSONL with `prompt`
// and an optional `answer`, GSM8K JSONL (`question`/`answer`), JSONL with `text`, and plain
// text split into lines or into blank-line-separated documents. Errors name the file and line.
package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"rlhfstation/rewards"
)

// Example is one dataset entry.
type Example struct {
	Prompt string // what the policy is asked; "" for reference-only text
	// Answer is the ground truth compared with completions: GSM8K's text after `#### `
	// (commas removed), or a prompt file's `answer`, normalised the same way; "" when absent.
	Answer string
	// Text is the reference text for perplexity baselines: the `text` field, a line or a
	// document of a text file, or the full reference answer (GSM8K's worked solution).
	Text string
	// Extra holds the entry's other columns (the fields the reader did not map to Prompt,
	// Answer or Text), as decoded from JSON; nil when there are none. Command rewards receive
	// them, as TRL passes a dataset's other columns to reward functions.
	Extra map[string]any
	Line  int // the line the entry starts on
}

// Format is a dataset layout.
type Format string

// The formats Read recognises.
const (
	PromptJSONL Format = "jsonl"       // {"prompt": ..., "answer": ...}
	GSM8K       Format = "gsm8k"       // {"question": ..., "answer": "... #### 72"}
	TextJSONL   Format = "jsonl-text"  // {"text": ...}
	Lines       Format = "text-lines"  // one prompt a line
	Documents   Format = "text-blocks" // documents separated by blank lines
)

// Read reads a dataset, detecting its format: a file whose first non-blank line is a JSON
// object is JSONL (GSM8K when it has `question`, else `prompt`, else `text`), anything else
// is plain text with one prompt a line.
func Read(path string) ([]Example, Format, error) {
	f, err := detect(path)
	if err != nil {
		return nil, "", err
	}
	ex, err := ReadFormat(path, f)
	return ex, f, err
}

// ReadDocuments reads reference texts for baselines: JSONL files as Read does, plain text as
// blank-line-separated documents.
func ReadDocuments(path string) ([]Example, Format, error) {
	f, err := detect(path)
	if err != nil {
		return nil, "", err
	}
	if f == Lines {
		f = Documents
	}
	ex, err := ReadFormat(path, f)
	return ex, f, err
}

// ReadFormat reads path in the given format.
func ReadFormat(path string, f Format) ([]Example, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ex []Example
	switch f {
	case PromptJSONL, GSM8K, TextJSONL:
		ex, err = parseJSONL(path, b, f)
	case Lines:
		ex = splitLines(string(b))
	case Documents:
		ex = splitDocuments(string(b))
	default:
		return nil, fmt.Errorf("%s: unknown dataset format %q", path, f)
	}
	if err != nil {
		return nil, err
	}
	if len(ex) == 0 {
		return nil, fmt.Errorf("%s: %w (no %s in it)", path, ErrEmpty, what(f))
	}
	return ex, nil
}

func what(f Format) string {
	if f == Documents {
		return "document"
	}
	if f == TextJSONL {
		return "text"
	}
	return "prompt"
}

// detect sniffs the first non-blank line.
func detect(path string) (Format, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	r := bufio.NewReader(fh)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if t[0] != '{' {
				return Lines, nil
			}
			var obj map[string]json.RawMessage
			if jerr := json.Unmarshal(t, &obj); jerr != nil {
				if strings.EqualFold(filepath.Ext(path), ".jsonl") || strings.EqualFold(filepath.Ext(path), ".json") {
					return "", fmt.Errorf("%s:%d: bad JSON: %v", path, n, jerr)
				}
				return Lines, nil // text that starts with a brace
			}
			switch {
			case obj["question"] != nil:
				return GSM8K, nil
			case obj["prompt"] != nil:
				return PromptJSONL, nil
			case obj["text"] != nil:
				return TextJSONL, nil
			}
			return "", fmt.Errorf("%s:%d: a JSON line with none of the fields \"prompt\", \"question\" (GSM8K) or \"text\"", path, n)
		}
		if err == io.EOF {
			return "", fmt.Errorf("%s: %w", path, ErrEmpty)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
}

// parseJSONL reads one object a line; blank lines are skipped.
func parseJSONL(path string, b []byte, f Format) ([]Example, error) {
	var out []Example
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		at := fmt.Sprintf("%s:%d", path, n+1)
		var obj map[string]any
		// Numbers stay as written (json.Number): other columns pass through to command
		// rewards unchanged, large integer ids included.
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil || dec.More() {
			if err == nil {
				err = errors.New("more than one JSON value on the line")
			}
			return nil, fmt.Errorf("%s: bad JSON: %v", at, err)
		}
		field := func(name string, required bool) (string, error) {
			v, ok := obj[name]
			if !ok || v == nil {
				if required {
					return "", fmt.Errorf("%s: missing field %q", at, name)
				}
				return "", nil
			}
			switch x := v.(type) {
			case string:
				return x, nil
			case json.Number: // answers are often bare numbers
				f, err := x.Float64()
				if err != nil {
					return "", fmt.Errorf("%s: field %q: %v", at, name, err)
				}
				return strconv.FormatFloat(f, 'f', -1, 64), nil
			}
			return "", fmt.Errorf("%s: field %q is not a string", at, name)
		}
		var ex Example
		var err error
		ex.Line = n + 1
		used := map[Format][]string{GSM8K: {"question", "answer"}, PromptJSONL: {"prompt", "answer"}, TextJSONL: {"text"}}[f]
		for k, v := range obj {
			if !slices.Contains(used, k) {
				if ex.Extra == nil {
					ex.Extra = map[string]any{}
				}
				ex.Extra[k] = v
			}
		}
		switch f {
		case GSM8K:
			if ex.Prompt, err = field("question", true); err != nil {
				return nil, err
			}
			if ex.Text, err = field("answer", true); err != nil {
				return nil, err
			}
			if !strings.Contains(ex.Text, "####") {
				return nil, fmt.Errorf("%s: GSM8K answer without a \"#### N\" line", at)
			}
			ex.Answer = rewards.GroundTruth(ex.Text)
		case PromptJSONL:
			if ex.Prompt, err = field("prompt", true); err != nil {
				return nil, err
			}
			if ex.Text, err = field("answer", false); err != nil {
				return nil, err
			}
			ex.Answer = rewards.GroundTruth(ex.Text)
		case TextJSONL:
			if ex.Text, err = field("text", true); err != nil {
				return nil, err
			}
		}
		out = append(out, ex)
	}
	return out, nil
}

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
