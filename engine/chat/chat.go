// Package chat renders conversations with a model's chat template (the Jinja template of its
// tokenizer_config.json or chat_template.jinja) the way Hugging Face's apply_chat_template does:
// trim_blocks and lstrip_blocks on, loop controls, raise_exception and strftime_now as globals,
// the tokenizer's special tokens (bos_token, eos_token, ...), messages, add_generation_prompt,
// tools and documents set to none, and the caller's extra variables (chat_template_kwargs, such
// as Qwen3's enable_thinking).
//
// A rendered prompt already holds the special tokens the template writes (Gemma's <bos>):
// it must be tokenized without adding special tokens again, or the model sees two BOS.
//
// Templates run on github.com/ardanlabs/jinja. Where it differs from Python's Jinja2: its
// tojson ignores sort_keys and, with indent, sorts keys and escapes <, > and & (no template
// of the kind this program renders, without tools, uses either), and printing none gives ""
// where Jinja2 prints "None".
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"

	"rlhfstation/engine/data"
)

// checkRole returns an error for a role that is not one of data.Roles.
func checkRole(role string) error {
	if slices.Contains(data.Roles, role) {
		return nil
	}
	return fmt.Errorf("unknown role %q (a role is one of %s)", role, strings.Join(data.Roles, ", "))
}

// Template is a compiled chat template with the special tokens it is rendered with. Render
// may be called from several goroutines.
type Template struct {
	// Source names where the template came from, for messages: a .jinja file, or
	// "DIR/tokenizer_config.json: chat_template".
	Source string
	Text   string
	// Now is strftime_now's clock (time.Now when nil).
	Now func() time.Time

	tmpl   *jinja.Template
	tokens Tokens
}

// Parse compiles a template. A syntax error names source and, where the parser knows it,
// the template's line.
func Parse(text, source string, tokens Tokens) (*Template, error) {
	tmpl, err := jinja.Compile(normalizeWhitespace(text))
	if err != nil {
		msg := err.Error()
		for _, p := range []string{"jinja scan: ", "jinja parse: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		return nil, fmt.Errorf("%s: the chat template does not parse: %s", source, msg)
	}
	if tokens.Named == nil {
		tokens.Named = map[string]string{}
	}
	return &Template{Source: source, Text: text, tmpl: tmpl, tokens: tokens}, nil
}

// Reserved are the variables Render sets itself; chat_template_kwargs may not set them.
var Reserved = []string{"messages", "add_generation_prompt", "tools", "documents"}

// Raised is the error of a template's raise_exception call.
type Raised struct{ Message string }

func (r *Raised) Error() string { return r.Message }

// Render renders msgs. addGenerationPrompt asks the template to open the assistant's turn
// (what a prompt to be completed needs); kwargs are extra variables, which override the
// special tokens as in transformers.
func (t *Template) Render(msgs []data.Message, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("no messages to render")
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		if err := checkRole(m.Role); err != nil {
			return "", fmt.Errorf("message %d: %w", i+1, err)
		}
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	return t.render(list, jinja.None(), addGenerationPrompt, kwargs)
}

// RenderTools renders messages given as JSON-like values (an assistant's tool_calls, a tool
// message's name or tool_call_id kept) with tools, the functions' JSON schemas, passed to the
// template as `tools` (none when empty): the turns of a multi-turn episode.
func (t *Template) RenderTools(msgs []map[string]any, tools []any, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("no messages to render")
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		role, _ := m["role"].(string)
		if err := checkRole(role); err != nil {
			return "", fmt.Errorf("message %d: %w", i+1, err)
		}
		v, err := Value(m)
		if err != nil {
			return "", fmt.Errorf("message %d: %w", i+1, err)
		}
		list[i] = v
	}
	tv := jinja.None()
	if len(tools) > 0 {
		var err error
		if tv, err = Value(tools); err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
	}
	return t.render(list, tv, addGenerationPrompt, kwargs)
}

// render runs the template over a message list.
func (t *Template) render(list []jinja.Value, tools jinja.Value, addGenerationPrompt bool, kwargs map[string]any) (string, error) {
	vars := map[string]jinja.Value{}
	for name, tok := range t.tokens.Named {
		vars[name] = jinja.NewString(tok)
	}
	if t.tokens.Additional != nil {
		add := make([]jinja.Value, len(t.tokens.Additional))
		for i, s := range t.tokens.Additional {
			add[i] = jinja.NewString(s)
		}
		vars["additional_special_tokens"] = jinja.NewList(add)
	}
	for _, k := range slices.Sorted(maps.Keys(kwargs)) {
		if slices.Contains(Reserved, k) {
			return "", fmt.Errorf("chat_template_kwargs: %q is set by the trainer", k)
		}
		v, err := Value(kwargs[k])
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs.%s: %w", k, err)
		}
		vars[k] = v
	}
	vars["messages"] = jinja.NewList(list)
	vars["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	vars["tools"] = tools
	vars["documents"] = jinja.None()
	vars["raise_exception"] = jinja.NewCallable("raise_exception", raiseException)
	now := t.Now
	if now == nil {
		now = time.Now
	}
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now takes one format string")
		}
		return jinja.NewString(Strftime(now(), args[0].AsString())), nil
	})
	out, err := t.tmpl.RenderValues(vars)
	if err != nil {
		var r *Raised
		if errors.As(err, &r) {
			return "", fmt.Errorf("the chat template (%s) raised an exception: %s", t.Source, r.Message)
		}
		return "", fmt.Errorf("the chat template (%s) failed: %v", t.Source, err)
	}
	return out, nil
}

// RenderPrompt renders a conversation as a prompt to be completed, as TRL renders a
// prompt-only example: one ending with a user (or tool) message gets the generation prompt,
// which opens the assistant's turn; one ending with an assistant message is continued
// (transformers' continue_final_message: the rendering is cut after that message's text, so
// the completion extends it). A prompt ending with a system message is refused, as TRL
// refuses it.
func (t *Template) RenderPrompt(msgs []data.Message, kwargs map[string]any) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("no messages to render")
	}
	switch last := msgs[len(msgs)-1]; last.Role {
	case "user", "tool":
		return t.Render(msgs, true, kwargs)
	case "assistant":
		s, err := t.Render(msgs, false, kwargs)
		if err != nil {
			return "", err
		}
		return continueFinal(s, last.Content, t.Source)
	default:
		return "", fmt.Errorf("the last message is a %s message: a prompt ends with a user message (the model answers it) or an assistant message (the model continues it)", last.Role)
	}
}

// continueFinal cuts a rendering after the final message's text, as transformers does for
// continue_final_message: at the last place the text (stripped) appears, keeping its trailing
// whitespace when the template kept it.
func continueFinal(rendered, final, source string) (string, error) {
	stripped := strings.TrimFunc(final, isSpace)
	at := strings.LastIndex(rendered, stripped)
	if at < 0 {
		return "", fmt.Errorf("the chat template (%s) does not write the final assistant message as given, so it cannot be continued (the template changes its text)", source)
	}
	// transformers compares len(final.lstrip()) characters there with the whole message: they
	// match only when the message has no leading whitespace and the template kept the rest.
	n := len(strings.TrimLeftFunc(final, isSpace))
	if at+n <= len(rendered) && rendered[at:at+n] == final {
		return rendered[:at+n], nil
	}
	return rendered[:at+len(stripped)], nil
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	msg := "raise_exception called without a message"
	if len(args) > 0 {
		msg = args[0].String()
		if args[0].IsString() {
			msg = args[0].AsString()
		}
	}
	return jinja.Undefined(), &Raised{Message: msg}
}

// Value converts a setting (as TOML or JSON decode it) to a template value: booleans,
// integers, floats, strings, lists and tables (keys sorted).
func Value(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case json.Number: // integers stay integers, as Python's json reads them
		if i, err := x.Int64(); err == nil {
			return jinja.NewInt(i), nil
		}
		f, err := x.Float64()
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	case string:
		return jinja.NewString(x), nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			var err error
			if items[i], err = Value(e); err != nil {
				return jinja.Value{}, err
			}
		}
		return jinja.NewList(items), nil
	case []map[string]any: // a TOML array of tables
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			var err error
			if items[i], err = Value(e); err != nil {
				return jinja.Value{}, err
			}
		}
		return jinja.NewList(items), nil
	case map[string]any:
		d := jinja.NewDict()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			e, err := Value(x[k])
			if err != nil {
				return jinja.Value{}, err
			}
			d.AsDict().Set(k, e)
		}
		return d, nil
	}
	return jinja.Value{}, fmt.Errorf("a %T cannot be given to a template (use a boolean, number, string, list or table)", v)
}
