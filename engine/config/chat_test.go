package config

import (
	"reflect"
	"strings"
	"testing"
)

// [data] chat_template and the free-form [data.chat_template_kwargs] table: decoded, written
// back so that they load again, their keys located on errors.
func TestChatTemplateSettings(t *testing.T) {
	if c := Default(); c.Data.ChatTemplate != "auto" || c.Data.ChatTemplateKwargs != nil {
		t.Fatalf("defaults: %+v", c.Data)
	}
	p := writeTOML(t, `[data]
path = "p.jsonl"
chat_template = "my.jinja"

[data.chat_template_kwargs]
enable_thinking = false
n = 3
"odd key" = 1.5
nested = {list = [1, "a"], t = {x = true}}
`)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"enable_thinking": false, "n": int64(3), "odd key": 1.5,
		"nested": map[string]any{"list": []any{int64(1), "a"}, "t": map[string]any{"x": true}}}
	if c.Data.ChatTemplate != "my.jinja" || !reflect.DeepEqual(c.Data.ChatTemplateKwargs, want) {
		t.Fatalf("got %q %#v", c.Data.ChatTemplate, c.Data.ChatTemplateKwargs)
	}
	if o := c.Origin("data.chat_template_kwargs.enable_thinking"); o != p+":6" {
		t.Errorf("origin %q", o)
	}
	enc := string(c.Encode())
	if !strings.Contains(enc, "\n[data.chat_template_kwargs]\nenable_thinking = false\nn = 3\nnested = {list = [1, \"a\"], t = {x = true}}\n\"odd key\" = 1.5\n") {
		t.Errorf("encoded:\n%s", enc)
	}
	back, err := Load(writeTOML(t, enc))
	if err != nil {
		t.Fatalf("the encoded config does not load: %v\n%s", err, enc)
	}
	if !reflect.DeepEqual(back.Data, c.Data) || back.Hash() != c.Hash() {
		t.Errorf("round trip: %+v, want %+v", back.Data, c.Data)
	}
	if m := c.Map()["data"].(map[string]any); !reflect.DeepEqual(m["chat_template_kwargs"], want) || m["chat_template"] != "my.jinja" {
		t.Errorf("Map: %v", m)
	}
	old := Default()
	if ch := c.Changes(old); !strings.Contains(strings.Join(ch, "\n"), "data.chat_template_kwargs: {} → {enable_thinking = false") {
		t.Errorf("changes: %q", ch)
	}

	// An inline table works too, and the flag sets chat_template.
	p = writeTOML(t, "[data]\nchat_template_kwargs = {enable_thinking = true}\n")
	c, err = newFlags(t, "--config", p, "--chat-template", "none").Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Data.ChatTemplate != "none" || c.Data.ChatTemplateKwargs["enable_thinking"] != true {
		t.Errorf("got %+v", c.Data)
	}

	for _, tc := range []struct{ text, want string }{
		{"[data]\nchat_template_kwargs = 5\n", `:2: data.chat_template_kwargs: want a table of template variables, got the integer 5`},
		{"[data.chat_template_kwargs]\nok = 1\nmessages = []\n", `:3: data.chat_template_kwargs.messages: the trainer sets "messages" itself`},
		{"[data.chat_template_kwargs]\nwhen = 1979-05-27T07:32:00Z\n", `:2: data.chat_template_kwargs.when: a time.Time cannot be given to a template`},
		{"[data]\nchat_template = \"\"\n", `data.chat_template = "" (`},
		{"[data]\nchat_templat = \"x\"\n", `:2: unknown key "data.chat_templat"; did you mean "data.chat_template"?`},
		{"chat_template = \"x\"\n", `:1: unknown key "chat_template"; did you mean "data.chat_template"?`},
	} {
		if _, err := Load(writeTOML(t, tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}
