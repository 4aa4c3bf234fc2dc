package env

// Tool calls in each chat template's own format: the assistant's text is split into its
// content and the calls it makes, as the template would render them back.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Call is one tool call: a function's name and its arguments (a JSON object).
type Call struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// Format is a tool-call syntax.
type Format string

// The formats.
const (
	// Hermes is Qwen2.5's and Qwen3's: <tool_call>{"name": …, "arguments": {…}}</tool_call>.
	Hermes Format = "hermes"
	// LlamaJSON is Llama 3.1's and 3.2's: the message is {"name": …, "parameters": {…}}
	// (after <|python_tag|> when the model writes one), several separated by ';'.
	LlamaJSON Format = "llama3_json"
	// Mistral is [TOOL_CALLS][{"name": …, "arguments": {…}}, …] or, from the v11 tokenizers,
	// [TOOL_CALLS]name[ARGS]{…} repeated.
	Mistral Format = "mistral"
)

// Formats lists the formats, for messages.
var Formats = []Format{Hermes, LlamaJSON, Mistral}

// DetectFormat picks the tool-call format a chat template writes, from its text: "" when the
// template shows none of them.
func DetectFormat(template string) Format {
	switch {
	case strings.Contains(template, "<tool_call>"):
		return Hermes
	case strings.Contains(template, "[TOOL_CALLS]"):
		return Mistral
	case strings.Contains(template, "<|python_tag|>") || strings.Contains(template, "ipython"):
		return LlamaJSON
	}
	return ""
}

// ParseFormat checks a format's name.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("tool-call format %q is not one of hermes, llama3_json, mistral", s)
}

var hermesCall = regexp.MustCompile(`(?s)<tool_call>\s*(.*?)\s*</tool_call>`)

// Parse splits an assistant's text into its content and its tool calls. A call whose JSON
// does not parse is an error (the episode's tool call failed), the content then being the
// whole text.
func Parse(f Format, text string) (content string, calls []Call, err error) {
	switch f {
	case Hermes:
		ms := hermesCall.FindAllStringSubmatchIndex(text, -1)
		if len(ms) == 0 {
			if strings.Contains(text, "<tool_call>") {
				return text, nil, fmt.Errorf("an unclosed <tool_call>")
			}
			return text, nil, nil
		}
		var b strings.Builder
		prev := 0
		for _, m := range ms {
			b.WriteString(text[prev:m[0]])
			prev = m[1]
			c, err := decodeCall(text[m[2]:m[3]], "arguments")
			if err != nil {
				return text, nil, err
			}
			calls = append(calls, c)
		}
		b.WriteString(text[prev:])
		return strings.TrimSpace(b.String()), calls, nil
	case LlamaJSON:
		s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "<|python_tag|>"))
		if !strings.HasPrefix(s, "{") {
			return text, nil, nil
		}
		for _, part := range splitTop(s, ';') {
			c, err := decodeCall(part, "parameters")
			if err != nil {
				return text, nil, err
			}
			calls = append(calls, c)
		}
		return "", calls, nil
	case Mistral:
		at := strings.Index(text, "[TOOL_CALLS]")
		if at < 0 {
			return text, nil, nil
		}
		content = strings.TrimSpace(text[:at])
		rest := strings.TrimSpace(text[at+len("[TOOL_CALLS]"):])
		if strings.HasPrefix(rest, "[") {
			var list []json.RawMessage
			if err := json.Unmarshal([]byte(rest), &list); err != nil {
				return text, nil, fmt.Errorf("[TOOL_CALLS] is not followed by a JSON list: %v", err)
			}
			for _, raw := range list {
				c, err := decodeCall(string(raw), "arguments")
				if err != nil {
					return text, nil, err
				}
				calls = append(calls, c)
			}
			return content, calls, nil
		}
		// name[ARGS]{…}[TOOL_CALLS]name[ARGS]{…}
		for _, seg := range strings.Split(rest, "[TOOL_CALLS]") {
			name, args, ok := strings.Cut(seg, "[ARGS]")
			if !ok {
				return text, nil, fmt.Errorf("[TOOL_CALLS]%s has no [ARGS]", excerpt([]byte(seg)))
			}
			c := Call{Name: strings.TrimSpace(name)}
			if err := json.Unmarshal([]byte(strings.TrimSpace(args)), &c.Arguments); err != nil {
				return text, nil, fmt.Errorf("the arguments of %s are not a JSON object: %v", c.Name, err)
			}
			calls = append(calls, c)
		}
		return content, calls, nil
	}
	return text, nil, fmt.Errorf("unknown tool-call format %q", f)
}

// decodeCall reads {"name": …, argsKey: {…}} (either key name accepted for the arguments,
// which may also be a JSON string holding the object).
func decodeCall(s, argsKey string) (Call, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return Call{}, fmt.Errorf("a tool call that is not a JSON object (%v): %s", err, excerpt([]byte(s)))
	}
	var c Call
	if err := json.Unmarshal(raw["name"], &c.Name); err != nil || c.Name == "" {
		return Call{}, fmt.Errorf("a tool call without a name: %s", excerpt([]byte(s)))
	}
	args, ok := raw[argsKey]
	if !ok {
		args, ok = raw["arguments"]
	}
	if !ok {
		args, ok = raw["parameters"]
	}
	if !ok {
		c.Arguments = map[string]any{}
		return c, nil
	}
	var str string
	if json.Unmarshal(args, &str) == nil {
		args = json.RawMessage(str)
	}
	if err := json.Unmarshal(args, &c.Arguments); err != nil {
		return Call{}, fmt.Errorf("the arguments of %s are not a JSON object: %s", c.Name, excerpt(args))
	}
	return c, nil
}

// splitTop splits s at sep outside JSON strings and brackets.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, inStr, esc, start := 0, false, false, 0
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case esc:
			esc = false
		case inStr && ch == '\\':
			esc = true
		case ch == '"':
			inStr = !inStr
		case inStr:
		case ch == '{' || ch == '[':
			depth++
		case ch == '}' || ch == ']':
			depth--
		case ch == sep && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// Message is the assistant message of a turn as templates and environments take it:
// {"role": "assistant", "content": …, "tool_calls": [{"type": "function", "id": …,
// "function": {"name": …, "arguments": {…}}}]}. ids name the calls (Mistral's templates need
// nine alphanumerics).
func Message(content string, calls []Call, idOf func(k int) string) map[string]any {
	m := map[string]any{"role": "assistant", "content": content}
	if len(calls) > 0 {
		tc := make([]any, len(calls))
		for k, c := range calls {
			args := c.Arguments
			if args == nil {
				args = map[string]any{}
			}
			tc[k] = map[string]any{"type": "function", "id": idOf(k),
				"function": map[string]any{"name": c.Name, "arguments": args}}
		}
		m["tool_calls"] = tc
	}
	return m
}
