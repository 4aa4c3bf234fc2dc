package env

import (
	"fmt"
	"strings"

	"rlhfstation/engine/chat"
)

// Renderer renders an episode's turns with a chat template, incrementally: after each
// assistant turn only the text of the messages that follow is rendered, to be tokenized and
// appended to the episode's tokens, so that the tokens the model wrote are never re-tokenized
// (a template's rendering of them could tokenize differently).
type Renderer struct {
	Template *chat.Template
	Kwargs   map[string]any
	// EndOfTurn is the text of the token that ends an assistant turn (the stop token the
	// turn's generation ended at): the episode's tokens end there when the environment's
	// messages are appended.
	EndOfTurn string
}

// Prompt renders the reset's messages with the generation prompt: the episode's prompt.
func (r *Renderer) Prompt(msgs []map[string]any, tools []any) (string, error) {
	return r.Template.RenderTools(msgs, tools, true, r.Kwargs)
}

// Next is the text that follows an assistant turn's end-of-turn token when the messages next
// are appended to history (which ends with that assistant message), up to and including the
// generation prompt of the next assistant turn: the full rendering's text after its n-th
// end-of-turn, n being how many the rendering of history alone writes. Counting turns rather
// than comparing text lets a template render an earlier turn differently once later ones
// follow (Qwen3 drops the empty think block of an assistant turn that is no longer the last):
// the model's tokens of that turn stay as it wrote them, as verl keeps them.
func (r *Renderer) Next(history, next []map[string]any, tools []any) (string, error) {
	prev, err := r.Template.RenderTools(history, tools, false, r.Kwargs)
	if err != nil {
		return "", err
	}
	all := append(append(make([]map[string]any, 0, len(history)+len(next)), history...), next...)
	full, err := r.Template.RenderTools(all, tools, true, r.Kwargs)
	if err != nil {
		return "", err
	}
	if r.EndOfTurn == "" {
		if !strings.HasPrefix(full, prev) {
			return "", fmt.Errorf("the chat template (%s) renders the earlier turns differently once the environment's messages follow, and no end-of-turn token marks where the assistant's turn ends", r.Template.Source)
		}
		return full[len(prev):], nil
	}
	n := strings.Count(prev, r.EndOfTurn)
	if n == 0 {
		return "", fmt.Errorf("the chat template (%s) does not end the assistant's turn with %q", r.Template.Source, r.EndOfTurn)
	}
	cut := 0
	for i := 0; i < n; i++ {
		at := strings.Index(full[cut:], r.EndOfTurn)
		if at < 0 {
			return "", fmt.Errorf("the chat template (%s) writes fewer turns once the environment's messages follow", r.Template.Source)
		}
		cut += at + len(r.EndOfTurn)
	}
	return full[cut:], nil
}

// PlainTemplate is the template of models without one of their own (the built-in model):
// messages as plain text, an assistant turn ended by the EOS token, tool calls in the hermes
// format and tool results in <tool_response> tags.
const PlainTemplate = `{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}{% endif %}{{ eos_token }}
{%- elif m.role == 'tool' -%}
<tool_response>{{ m.content }}</tool_response>
{% else -%}
{{ m.content }}
{% endif -%}
{%- endfor -%}`
