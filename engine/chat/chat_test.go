package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/data"
	"rlhfstation/internal/testref"
)

type Message = data.Message

// jsonMessage is a message as JSON spells it.
type jsonMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func fromJSON(ms []jsonMessage) []Message {
	out := make([]Message, len(ms))
	for i, m := range ms {
		out[i] = Message{Role: m.Role, Content: m.Content}
	}
	return out
}

func toJSON(ms []Message) []jsonMessage {
	out := make([]jsonMessage, len(ms))
	for i, m := range ms {
		out[i] = jsonMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

// expectedCase is one entry of ../shared/data/chat-templates/*.json: a conversation and its
// rendering by @huggingface/jinja (transformers.js), an independent implementation.
type expectedCase struct {
	Messages            []jsonMessage  `json:"messages"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	Kwargs              map[string]any `json:"kwargs"`
	Rendered            string         `json:"rendered"`
}

func readExpected(t *testing.T, name string) []expectedCase {
	t.Helper()
	b, err := os.ReadFile(testref.SharedData(t, filepath.Join("chat-templates", name+".json")))
	if err != nil {
		t.Fatal(err)
	}
	var cases []expectedCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("%s.json: no cases", name)
	}
	return cases
}

func readModelFolder(t *testing.T, name string) Folder {
	t.Helper()
	f, err := ReadFolder(testref.SharedData(t, filepath.Join("tokenizers", name)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestExpectedRenderings: the real Qwen3 (with and without enable_thinking) and Gemma-3
// templates render every expected case byte for byte.
func TestExpectedRenderings(t *testing.T) {
	for _, name := range []string{"qwen3", "gemma3"} {
		f := readModelFolder(t, name)
		if f.Template == nil {
			t.Fatalf("%s: no chat template found", name)
		}
		thinking := 0
		for i, c := range readExpected(t, name) {
			if _, ok := c.Kwargs["enable_thinking"]; ok {
				thinking++
			}
			got, err := f.Template.Render(fromJSON(c.Messages), c.AddGenerationPrompt, c.Kwargs)
			if err != nil {
				t.Errorf("%s case %d: %v", name, i, err)
				continue
			}
			if got != c.Rendered {
				t.Errorf("%s case %d:\n got %q\nwant %q", name, i, got, c.Rendered)
			}
		}
		if name == "qwen3" && thinking == 0 {
			t.Errorf("qwen3.json has no enable_thinking case")
		}
	}
}

func TestMistralV01HasNoTemplate(t *testing.T) {
	f := readModelFolder(t, "mistral")
	if f.Template != nil {
		t.Fatalf("Mistral-7B-v0.1 (a base model) has no chat template, got one from %s", f.Template.Source)
	}
	if f.Tokens.Named["bos_token"] != "<s>" || f.Tokens.Named["eos_token"] != "</s>" {
		t.Errorf("tokens = %v", f.Tokens.Named)
	}
}

// Special tokens may be strings or AddedToken objects; null leaves a token unset.
func TestSpecialTokens(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ConfigFile, `{"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>",
		"pad_token": null, "additional_special_tokens": ["<a>", {"content": "<b>"}],
		"chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ additional_special_tokens|join(',') }}"}`)
	f, err := ReadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Template.Render([]Message{{Role: "user", Content: "x"}}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "<s>|</s>|False|<a>,<b>"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// special_tokens_map.json overrides the config's tokens, as transformers loads them.
	write(t, dir, SpecialTokenFile, `{"eos_token": {"content": "<end>"}}`)
	if f, err = ReadFolder(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ = f.Template.Render([]Message{{Role: "user", Content: "x"}}, false, nil); got != "<s>|<end>|False|<a>,<b>" {
		t.Errorf("with special_tokens_map.json: got %q", got)
	}
}

// chat_template.jinja beside the config wins over its chat_template; a list of templates
// uses "default".
func TestTemplateSources(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ConfigFile, `{"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default {{ messages[0].content }}"}]}`)
	render := func() string {
		t.Helper()
		f, err := ReadFolder(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := f.Template.Render([]Message{{Role: "user", Content: "hi"}}, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := render(); got != "default hi" {
		t.Errorf("list: got %q", got)
	}
	write(t, dir, TemplateFile, "file {{ messages[0].content }}\n")
	if got := render(); got != "file hi" { // Jinja2 drops a template's final newline
		t.Errorf("chat_template.jinja: got %q", got)
	}

	empty := t.TempDir()
	if f, err := ReadFolder(empty); err != nil || f.Template != nil {
		t.Errorf("a folder without tokenizer_config.json: %v, %v", f.Template, err)
	}
	write(t, empty, ConfigFile, `{"eos_token": "</s>"}`)
	if f, err := ReadFolder(empty); err != nil || f.Template != nil {
		t.Errorf("a config without chat_template: %v, %v", f.Template, err)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	tokens := Tokens{Named: map[string]string{"bos_token": "<B>"}}
	write(t, dir, "t.jinja", "{{ bos_token }}{{ messages[0].content }}")
	write(t, dir, "other_config.json", `{"chat_template": "json {{ bos_token }}"}`)
	for file, want := range map[string]string{"t.jinja": "<B>hi", "other_config.json": "json <B>"} {
		tm, err := ReadFile(filepath.Join(dir, file), tokens)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tm.Render([]Message{{Role: "user", Content: "hi"}}, true, nil); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", file, got, err, want)
		}
	}
}

// Bad input: each error names the file, and the line or message that explains it.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		config string
		want   []string
	}{
		{`{"chat_template": "{% for m in messages %}\n{{ m.content }\n{% endfor %}"}`, []string{ConfigFile, "chat_template", "does not parse", "line 2"}},
		{`{"chat_template": "ok\n{% if x %}\nnever closed"}`, []string{ConfigFile, "does not parse", "unclosed if"}},
		{`{"chat_template": [{"name": "a", "template": "x"}, {"name": "b", "template": "y"}]}`, []string{ConfigFile, "a, b", `none named "default"`}},
		{`{"chat_template": 5}`, []string{ConfigFile, "must be a string or a list"}},
		{`{"bos_token": 5}`, []string{ConfigFile, "bos_token", "must be a string"}},
		{"{\n\"chat_template\": \"x\",\n}", []string{ConfigFile, "line 3", "bad JSON"}},
	}
	for _, c := range cases {
		write(t, dir, ConfigFile, c.config)
		_, err := ReadFolder(dir)
		wantError(t, err, c.want...)
	}

	write(t, dir, ConfigFile, `{"chat_template": "{% if messages[0].role != 'user' %}{{ raise_exception('Only user messages, got ' + messages[0].role) }}{% endif %}ok"}`)
	f, err := ReadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Template.Render([]Message{{Role: "system", Content: "x"}}, true, nil)
	wantError(t, err, ConfigFile, "raised an exception: Only user messages, got system")
	_, err = f.Template.Render([]Message{{Role: "robot", Content: "x"}}, true, nil)
	wantError(t, err, "message 1", `unknown role "robot"`, "system, user, assistant, tool")
	_, err = f.Template.Render([]Message{{Role: "user", Content: "x"}}, true, map[string]any{"messages": 1})
	wantError(t, err, `"messages" is set by the trainer`)
	_, err = f.Template.Render([]Message{{Role: "user", Content: "x"}}, true, map[string]any{"when": time.Now()})
	wantError(t, err, "chat_template_kwargs.when", "cannot be given")
	_, err = f.Template.Render(nil, true, nil)
	wantError(t, err, "no messages")

	_, err = ReadFile(filepath.Join(dir, "missing.jinja"), Tokens{})
	wantError(t, err, "missing.jinja")
	write(t, dir, "c.json", `{"eos_token": "x"}`)
	_, err = ReadFile(filepath.Join(dir, "c.json"), Tokens{})
	wantError(t, err, "c.json", `no "chat_template"`)
}

func TestStrftime(t *testing.T) {
	at := time.Date(2024, 7, 6, 9, 5, 3, 0, time.UTC)
	for format, want := range map[string]string{
		"%d %b %Y":          "06 Jul 2024",
		"%-d %B %Y":         "6 July 2024",
		"%Y-%m-%d %H:%M:%S": "2024-07-06 09:05:03",
		"%A %a %j %I%p %y":  "Saturday Sat 188 09AM 24",
		"%e|%k|%l|%u|%w|%%": " 6| 9| 9|6|6|%",
		"%F %T %D %R %C":    "2024-07-06 09:05:03 07/06/24 09:05 20",
		"%Q %":              "%Q %",
	} {
		if got := Strftime(at, format); got != want {
			t.Errorf("Strftime(%q) = %q, want %q", format, got, want)
		}
	}
}

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error; want one with %q", parts)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// jinja2 returns a python3 that has Jinja2, skipping (or failing in CI) without one.
func jinja2(t *testing.T) string {
	t.Helper()
	py := testref.Python3(t)
	if err := exec.Command(py, "-c", "import jinja2").Run(); err != nil {
		testref.Missing(t, "Python's Jinja2 (apt-get install python3-jinja2)")
	}
	return py
}

type refCase struct {
	Template            string         `json:"template"`
	Messages            []jsonMessage  `json:"messages"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	Vars                map[string]any `json:"vars"`
	Now                 string         `json:"now"`
}

type refResult struct {
	Rendered *string `json:"rendered"`
	Error    string  `json:"error"`
	Raised   bool    `json:"raised"`
}

func renderJinja2(t *testing.T, cases []refCase) []refResult {
	t.Helper()
	py := jinja2(t)
	req, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", "jinja2_render.py"))
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jinja2_render.py: %v\n%s", err, stderr.String())
	}
	var res []refResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("jinja2_render.py: %d results for %d cases, %v", len(res), len(cases), err)
	}
	return res
}

// conversations exercise what real templates branch on: system prompts first and later,
// multi-turn, assistant turns with <think> blocks, tool results, whitespace, non-ASCII, empty
// content, and bad alternation.
var conversations = [][]Message{
	{{Role: "user", Content: "What is 7 + 5?"}},
	{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Name a prime."}},
	{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: "Hello!"}, {Role: "user", Content: "Again?"}},
	{{Role: "user", Content: "Q1"}, {Role: "assistant", Content: "<think>\nstep one\nstep two\n</think>\n\nA1"}, {Role: "user", Content: "Q2"}, {Role: "assistant", Content: "<think>r2</think>A2"}},
	{{Role: "user", Content: "Q"}, {Role: "assistant", Content: "<think>\nonly thinking\n</think>"}},
	{{Role: "system", Content: "sys"}, {Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "system", Content: "late system"}, {Role: "user", Content: "q2"}},
	{{Role: "user", Content: "call it"}, {Role: "assistant", Content: "calling"}, {Role: "tool", Content: "42"}, {Role: "tool", Content: "43"}, {Role: "user", Content: "thanks"}},
	{{Role: "user", Content: "<tool_response>x</tool_response>"}, {Role: "assistant", Content: "ok"}},
	{{Role: "user", Content: "  padded\n\n  "}, {Role: "assistant", Content: "\n\nleading newlines"}},
	{{Role: "user", Content: "Ünïcödé ✓ 数学 🙂 \"quotes\" & <tags>"}},
	{{Role: "user", Content: ""}},
	{{Role: "assistant", Content: "I start"}, {Role: "user", Content: "then me"}},
	{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}},
	{{Role: "system", Content: "only a system prompt"}},
}

// TestMatchesJinja2: the real Qwen3 and Gemma-3 templates and templates written here for
// each feature of HF's environment render as Python's Jinja2 renders them set up like HF,
// errors (raise_exception's message) included.
func TestMatchesJinja2(t *testing.T) {
	var cases []refCase
	var tmpls []*Template
	add := func(tm *Template, msgs []Message, gen bool, vars map[string]any) {
		all := map[string]any{}
		for k, v := range tm.tokens.Named {
			all[k] = v
		}
		if tm.tokens.Additional != nil {
			all["additional_special_tokens"] = tm.tokens.Additional
		}
		for k, v := range vars {
			all[k] = v
		}
		tmpls = append(tmpls, tm)
		cases = append(cases, refCase{Template: tm.Text, Messages: toJSON(msgs), AddGenerationPrompt: gen, Vars: all, Now: "2024-07-06T09:05:03"})
	}
	for _, name := range []string{"qwen3", "gemma3"} {
		f := readModelFolder(t, name)
		for _, msgs := range conversations {
			for _, gen := range []bool{true, false} {
				add(f.Template, msgs, gen, nil)
			}
			add(f.Template, msgs, true, map[string]any{"enable_thinking": false})
			add(f.Template, msgs, true, map[string]any{"enable_thinking": true})
		}
	}
	tokens := Tokens{Named: map[string]string{"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}, Additional: []string{"<x>", "<y>"}}
	for i, src := range featureTemplates {
		tm, err := Parse(src, "feature template "+string(rune('A'+i)), tokens)
		if err != nil {
			t.Fatalf("feature template %d: %v", i, err)
		}
		for _, msgs := range conversations[:10] {
			add(tm, msgs, true, map[string]any{"enable_thinking": false, "n": int64(3), "name": "Ada", "opts": map[string]any{"b": 1.5, "a": []any{"x", true}}})
			add(tm, msgs, false, nil)
		}
	}
	for i, src := range whitespaceTemplates {
		tm, err := Parse(src, fmt.Sprintf("whitespace template %d", i), tokens)
		if err != nil {
			t.Fatalf("whitespace template %d: %v", i, err)
		}
		add(tm, conversations[2], true, nil)
	}
	ref := renderJinja2(t, cases)
	same := 0
	for i, c := range cases {
		tm := tmpls[i]
		tm.Now = func() time.Time { return time.Date(2024, 7, 6, 9, 5, 3, 0, time.Local) }
		got, err := tm.Render(fromJSON(c.Messages), c.AddGenerationPrompt, extraVars(c.Vars, tm.tokens))
		r := ref[i]
		switch {
		case r.Rendered != nil && err != nil:
			t.Errorf("%s, case %d: Jinja2 renders %q, we fail: %v", tm.Source, i, *r.Rendered, err)
		case r.Rendered != nil && got != *r.Rendered:
			t.Errorf("%s, case %d (%v, gen %v):\n got %q\nwant %q", tm.Source, i, c.Messages, c.AddGenerationPrompt, got, *r.Rendered)
		case r.Rendered == nil && err == nil:
			t.Errorf("%s, case %d: Jinja2 fails (%s), we render %q", tm.Source, i, r.Error, got)
		case r.Rendered == nil && r.Raised && !strings.Contains(err.Error(), "raised an exception: "+r.Error):
			t.Errorf("%s, case %d: Jinja2 raised %q, we: %v", tm.Source, i, r.Error, err)
		default:
			same++
		}
	}
	t.Logf("%d of %d renderings identical to Jinja2's", same, len(cases))
}

// extraVars are the case's variables less the template's own special tokens: what a caller
// passes as chat_template_kwargs.
func extraVars(vars map[string]any, tokens Tokens) map[string]any {
	out := map[string]any{}
	for k, v := range vars {
		if _, ok := tokens.Named[k]; ok || k == "additional_special_tokens" {
			continue
		}
		out[k] = v
	}
	return out
}

// featureTemplates exercise HF's environment one feature at a time.
var featureTemplates = []string{
	// trim_blocks and lstrip_blocks on indented block tags
	`{{ bos_token }}
{% for m in messages %}
    {% if m.role == 'user' %}
  [U] {{ m.content }}
    {% else %}
  [{{ m.role|upper }}] {{ m.content }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
[A]
{% endif %}`,
	// loop controls, loop variables
	`{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ loop.index }}/{{ loop.length }}:{{ m.content }};{% if loop.index >= 3 %}{% break %}{% endif %}{% endfor %}`,
	// namespace, set, string methods and filters
	`{%- set ns = namespace(chars=0, last='') -%}
{%- for m in messages -%}
  {%- set ns.chars = ns.chars + m.content|length -%}
  {%- if m.content.strip() %}{% set ns.last = m.content.strip().split('\n')[-1] %}{% endif -%}
{%- endfor -%}
{{ ns.chars }}|{{ ns.last }}|{{ messages|length }}|{{ (messages|last).role }}|{{ messages[1:]|length }}|{{ messages[0].content.startswith('Q') }}|{{ messages[-1]['content']|trim }}`,
	// tojson of messages (keys in their order) and of kwargs
	`{{ messages|tojson }}{% if opts is defined %}|{{ opts|tojson }}|{{ name|tojson }}{% endif %}`,
	// strftime_now, raise_exception, special tokens, tools and kwargs
	`{{ bos_token }}{{ strftime_now("%d %b %Y") }} {{ strftime_now("%A %-d %B, %H:%M") }}
{% if tools is none %}no tools{% endif %}{% if tools is defined %} (defined){% endif %}
{{ additional_special_tokens|join(',') }} {{ pad_token }}
{% if n is defined %}{{ n * 2 }} {{ name }} {{ enable_thinking }}{% endif %}
{% if messages[0].role == 'assistant' %}{{ raise_exception('The first message must not be the assistant\'s') }}{% endif %}
{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}`,
	// macros, inline if, string concatenation and ~
	`{% macro turn(m, first) %}<{{ m.role }}{{ '*' if first else '' }}>{{ m.content ~ '.' }}{% endmacro %}{% for m in messages %}{{ turn(m, loop.first) }}{% endfor %}{{ '<gen>' if add_generation_prompt }}`,
}

// whitespaceTemplates exercise Jinja2's whitespace control: markers, lstrip_blocks and
// trim_blocks next to {{ }} tags, raw blocks, comments, newlines and the final newline.
var whitespaceTemplates = []string{
	"{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}\n{% else %}A: {{ m.content }}\n{% endif %}{% endfor %}|",
	"{% if true %}{{ 1 }}\n{% elif false %}Y\n{% endif %}|",
	"Hello {{ messages[0].content }}  {%- if true %} x{% endif %}",
	"{{ 'q' }}  {%- if true -%}  \n  {{ 'r' }}  {%- endif -%}\n\n",
	"a\n  {%+ if true %}x{% endif %}|\n  {% if true %}y{% endif %}",
	"{% if true +%}\nx{% endif %}|{% if true %}\nz{% endif %}",
	"x\n   {% raw %}\n  {{ y }} {% if %}\n  {% endraw %}\nz",
	"x {%- raw -%} \n a {{b}} \n {%- endraw -%} \n z",
	"a\r\nb\rc{% if true %}\r\nd{% endif %}\r\n",
	"trailing\n\n",
	"trailing {{ 1 }}\n",
	"a {#- c -#} b\n  {# c #}\nb\n{#\nmulti\nline\n#}\nc",
	"\u3000a\u3000{%- if true -%}\u3000b{% endif %}\x1c{%- if true %}{% endif %}",
	"  {% if true %}x{% endif %}",
	"{% if true %}\n    {% if true %}y{% endif %}\n{% endif %}",
	"{% for m in messages %}\n    {{- m.role }}: {{ m.content }}\n    {% if not loop.last %}---\n    {% endif %}\n{% endfor %}",
	"{{ \"}}\" }} {{ '%}' }} {% set x = \"{% \\\" %}\" %}{{ x }} \\ \"quoted\"",
	"  \t{# indented comment #}\nafter",
	"{{ 1 }}\n  {% if true %}{% endif %}|{{ 2 }} \n{% if true %}{% endif %}|",
}

// RenderPrompt renders prompts as TRL does: the generation prompt after a user message, an
// assistant message continued (transformers' continue_final_message), a system message last
// refused. Expected strings written out by hand from the templates.
func TestRenderPrompt(t *testing.T) {
	qwen, gemma := readModelFolder(t, "qwen3").Template, readModelFolder(t, "gemma3").Template
	q := Message{Role: "user", Content: "What is 7 + 5?"}
	for _, tc := range []struct {
		tm   *Template
		msgs []Message
		want string
	}{
		{qwen, []Message{q}, "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n"},
		{qwen, []Message{q, {Role: "assistant", Content: "The answer is"}}, "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is"},
		// Gemma trims the message: its trailing space is gone from the rendering, and the cut
		// comes after the stripped text.
		{gemma, []Message{q, {Role: "assistant", Content: "The answer is "}}, "<bos><start_of_turn>user\nWhat is 7 + 5?<end_of_turn>\n<start_of_turn>model\nThe answer is"},
	} {
		got, err := tc.tm.RenderPrompt(tc.msgs, nil)
		if err != nil || got != tc.want {
			t.Errorf("%s %v:\n got %q, %v\nwant %q", tc.tm.Source, tc.msgs, got, err, tc.want)
		}
	}
	raw, err := Parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}", "raw", Tokens{})
	if err != nil {
		t.Fatal(err)
	}
	for final, want := range map[string]string{
		"kept ":   "<user>q</user><assistant>kept ",  // trailing whitespace the template kept stays
		"  lead ": "<user>q</user><assistant>  lead", // leading whitespace: cut after the stripped text
		"":        "<user>q</user><assistant></assistant>",
	} {
		got, err := raw.RenderPrompt([]Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: final}}, nil)
		if err != nil || got != want {
			t.Errorf("continue %q: got %q, %v; want %q", final, got, err, want)
		}
	}
	upper, err := Parse("{% for m in messages %}{{ m.content|upper }}{% endfor %}", "upper.jinja", Tokens{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = upper.RenderPrompt([]Message{q, {Role: "assistant", Content: "the answer"}}, nil)
	wantError(t, err, "upper.jinja", "cannot be continued")
	_, err = qwen.RenderPrompt([]Message{q, {Role: "system", Content: "s"}}, nil)
	wantError(t, err, "the last message is a system message")
}
