package data

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"rlhfstation/rewards"
)

// The columns tried, in order, when Options leave them unset: TRL's `prompt`, GSM8K's and
// most Hub math sets' `question`, MATH's `problem`, OpenRLHF's default `input`, and SFT-style
// `messages`; answers as TRL's examples (`solution`), GSM8K (`answer`) and verl
// (`reward_model.ground_truth`) name them.
var (
	promptKeys = []string{"prompt", "question", "problem", "input", "messages"}
	answerKeys = []string{"answer", "solution", "ground_truth", "reward_model.ground_truth"}
)

// mapping is how a dataset's columns become Examples.
type mapping struct {
	format               Format
	prompt, answer, text string   // keys; "" = none
	promptSet, answerSet bool     // named in Options (so required in every file)
	messagesColumn       bool     // the prompt column is SFT-style messages (final assistant turn = completion)
	used                 []string // top-level columns kept out of Extra
}

// mapColumns turns the rows of one or more files (shards of one dataset) into Examples.
func mapColumns(srcs []*source, o Options) (*Dataset, error) {
	first := srcs[0]
	m, err := detect(first, o)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Format: m.format, Container: first.kind, PromptKey: m.prompt, AnswerKey: m.answer, TextKey: m.text, Columns: first.columns}
	for _, s := range srcs {
		d.Files = append(d.Files, s.path)
		if s != first { // every shard must have the columns the first one gave
			for _, k := range []string{m.prompt, m.answer, m.text} {
				if k != "" && (k != m.answer || m.answerSet) && !hasColumn(s.columns, k) {
					return nil, fmt.Errorf("%s: no column %q (the first shard %s has it); its columns: %s", s.path, k, first.path, strings.Join(s.columns, ", "))
				}
			}
		}
		for _, r := range s.rows {
			x, err := m.example(s, r)
			if err != nil {
				return nil, err
			}
			if x.Messages != nil {
				d.Conversational = true
			}
			d.Examples = append(d.Examples, x)
		}
	}
	if len(d.Examples) == 0 {
		return nil, fmt.Errorf("%s: %w (no entries in it)", first.path, ErrEmpty)
	}
	return d, nil
}

// detect chooses the columns from the options and the first file's first entry.
func detect(s *source, o Options) (mapping, error) {
	r := s.rows[0]
	missing := func(key, setting string) error {
		return fmt.Errorf("%s: no column %q ([data] %s); the file's columns: %s", s.path, key, setting, strings.Join(s.columns, ", "))
	}
	m := mapping{format: PromptJSONL, prompt: o.PromptKey, answer: o.AnswerKey, promptSet: o.PromptKey != "", answerSet: o.AnswerKey != ""}
	if m.promptSet {
		if _, ok := lookup(r.cols, m.prompt); !ok && !hasColumn(s.columns, m.prompt) {
			return m, missing(m.prompt, "prompt_key")
		}
	} else {
		for _, k := range promptKeys {
			if v, ok := lookup(r.cols, k); ok && v != nil {
				m.prompt = k
				break
			}
		}
	}
	if m.answerSet {
		if _, ok := lookup(r.cols, m.answer); !ok && !hasColumn(s.columns, m.answer) {
			return m, missing(m.answer, "answer_key")
		}
	} else if m.prompt != "" {
		for _, k := range answerKeys {
			if v, ok := lookup(r.cols, k); ok && v != nil {
				m.answer = k
				break
			}
		}
	}
	switch {
	case m.prompt == "":
		if v, ok := r.cols["text"]; ok && v != nil {
			m.format, m.text, m.answer = TextJSONL, "text", ""
			break
		}
		return m, fmt.Errorf("%s: no prompt column: none of %s (or \"text\" for reference texts); the file's columns: %s; name one with [data] prompt_key",
			s.path, quoteList(promptKeys), strings.Join(s.columns, ", "))
	case m.prompt == "question" && m.answer == "answer":
		// GSM8K when its answers end with "#### N": then each must.
		if a, ok := r.cols["answer"].(string); ok && strings.Contains(a, "####") {
			m.format = GSM8K
		}
	}
	if v, _ := lookup(r.cols, m.prompt); m.prompt != "" && isList(v) && lastKey(m.prompt) == "messages" {
		m.messagesColumn = true
	}
	for _, k := range []string{m.prompt, m.answer, m.text} {
		if k != "" {
			m.used = append(m.used, k)
		}
	}
	if m.format == GSM8K || m.format == PromptJSONL && m.answer == "" && !m.answerSet {
		m.used = append(m.used, "answer") // an absent or null answer column is no extra column
	}
	return m, nil
}

// example maps one row.
func (m *mapping) example(s *source, r row) (Example, error) {
	x := Example{File: s.path, Line: r.line, row: s.kind == Parquet}
	where := s.at(r.line)
	for k, v := range r.cols {
		if !slices.Contains(m.used, k) {
			if x.Extra == nil {
				x.Extra = map[string]any{}
			}
			x.Extra[k] = v
		}
	}
	field := func(key string) (any, error) {
		v, ok := lookup(r.cols, key)
		if !ok {
			return nil, fmt.Errorf("%s: missing field %q", where, key)
		}
		if v == nil {
			return nil, fmt.Errorf("%s: field %q is null", where, key)
		}
		return v, nil
	}
	if m.format == TextJSONL {
		v, err := field(m.text)
		if err != nil {
			return x, err
		}
		s, ok := v.(string)
		if _, binary := v.([]byte); binary {
			return x, fmt.Errorf("%s: field %q is not UTF-8 text", where, m.text)
		}
		if !ok {
			return x, fmt.Errorf("%s: field %q is %s, not a string", where, m.text, kindOf(v))
		}
		if !utf8.ValidString(s) {
			return x, fmt.Errorf("%s: field %q is not UTF-8 text", where, m.text)
		}
		x.Text = s
		return x, nil
	}

	v, err := field(m.prompt)
	if err != nil {
		return x, err
	}
	switch p := v.(type) {
	case string:
		if !utf8.ValidString(p) {
			return x, fmt.Errorf("%s: field %q is not UTF-8 text", where, m.prompt)
		}
		x.Prompt = p
	case []any:
		if x.Messages, err = messages(p, where, m.prompt); err != nil {
			return x, err
		}
		if m.messagesColumn && x.Messages[len(x.Messages)-1].Role == "assistant" {
			// SFT-style conversation: its final assistant turn is the reference completion.
			x.Text = x.Messages[len(x.Messages)-1].Content
			x.Messages = x.Messages[:len(x.Messages)-1]
		}
		if len(x.Messages) == 0 {
			return x, fmt.Errorf("%s: field %q holds no message before the final assistant turn", where, m.prompt)
		}
	case []byte: // a Parquet byte array that is not UTF-8
		return x, fmt.Errorf("%s: field %q is not UTF-8 text", where, m.prompt)
	default:
		return x, fmt.Errorf("%s: field %q is %s, not a string or a list of {role, content} messages", where, m.prompt, kindOf(v))
	}

	if m.answer != "" {
		v, ok := lookup(r.cols, m.answer)
		switch {
		case (!ok || v == nil) && m.format == GSM8K:
			return x, fmt.Errorf("%s: missing field %q", where, m.answer)
		case !ok || v == nil:
			// an entry without an answer: allowed, as in prompt-only data
		default:
			a, err := answerText(v)
			if err != nil {
				return x, fmt.Errorf("%s: field %q %v", where, m.answer, err)
			}
			if m.format == GSM8K && !strings.Contains(a, "####") {
				return x, fmt.Errorf("%s: GSM8K answer without a \"#### N\" line", where)
			}
			x.Text = a
		}
	}
	if x.Text != "" && (m.answer != "" || m.messagesColumn) {
		x.Answer = rewards.GroundTruth(x.Text)
	}
	return x, nil
}

// messages reads a list of {role, content} objects.
func messages(list []any, where, key string) ([]Message, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("%s: field %q is an empty list of messages", where, key)
	}
	out := make([]Message, len(list))
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: field %q, message %d is %s, not a {role, content} object", where, key, i+1, kindOf(e))
		}
		role, ok := obj["role"].(string)
		if !ok {
			return nil, fmt.Errorf("%s: field %q, message %d has no string \"role\"", where, key, i+1)
		}
		if !slices.Contains(Roles, role) {
			return nil, fmt.Errorf("%s: field %q, message %d: unknown role %q (want system, user, assistant or tool)", where, key, i+1, role)
		}
		content, ok := obj["content"].(string)
		if !ok {
			return nil, fmt.Errorf("%s: field %q, message %d (%s): \"content\" is %s, not a string", where, key, i+1, role, kindOf(obj["content"]))
		}
		if !utf8.ValidString(content) {
			return nil, fmt.Errorf("%s: field %q, message %d (%s): content is not UTF-8 text", where, key, i+1, role)
		}
		out[i] = Message{Role: role, Content: content}
	}
	return out, nil
}

// answerText gives an answer value as text: strings as they are, numbers as written.
func answerText(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return "", fmt.Errorf("is not UTF-8 text")
		}
		return x, nil
	case []byte:
		return "", fmt.Errorf("is not UTF-8 text")
	case json.Number: // answers are often bare numbers
		if _, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return string(x), nil
		}
		f, err := x.Float64()
		if err != nil {
			return "", err
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("is %v, not a usable answer", x)
		}
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return answerText(float64(x))
	}
	return "", fmt.Errorf("is %s, not a string or a number", kindOf(v))
}

// lookup finds key in cols: a column of that exact name, else a dotted path into nested
// objects ("reward_model.ground_truth").
func lookup(cols map[string]any, key string) (any, bool) {
	if v, ok := cols[key]; ok {
		return v, true
	}
	for i := 0; i < len(key); i++ {
		if key[i] != '.' {
			continue
		}
		if sub, ok := cols[key[:i]].(map[string]any); ok {
			if v, ok := lookup(sub, key[i+1:]); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// columnsOf lists an object's keys, sorted, with nested objects' keys as dotted paths.
func columnsOf(cols map[string]any, prefix string) []string {
	var out []string
	for k, v := range cols {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			out = append(out, columnsOf(sub, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	sort.Strings(out)
	return out
}

// hasColumn reports whether key is a column or a prefix of nested columns.
func hasColumn(columns []string, key string) bool {
	for _, c := range columns {
		if c == key || strings.HasPrefix(c, key+".") {
			return true
		}
	}
	return false
}

func isList(v any) bool { _, ok := v.([]any); return ok }

func lastKey(k string) string { return k[strings.LastIndexByte(k, '.')+1:] }

// kindOf names a decoded value's type for messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number, int64, int32, uint64, float64, float32, int:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case []byte:
		return "binary data"
	}
	return fmt.Sprintf("a %T", v)
}

func quoteList(ks []string) string {
	q := make([]string, len(ks))
	for i, k := range ks {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}
