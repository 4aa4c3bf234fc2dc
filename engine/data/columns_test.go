package data

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestConversational(t *testing.T) {
	// TRL's conversational prompt-only format, and an SFT-style messages column whose final
	// assistant turn is the reference completion.
	p := write(t, "chat.jsonl", `{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "answer": "4"}
{"prompt": [{"role": "user", "content": "Hi"}], "level": 2}
`)
	d, err := Load(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Messages: []Message{{"system", "Be brief."}, {"user", "2+2?"}}, Answer: "4", Text: "4", File: p, Line: 1},
		{Messages: []Message{{"user", "Hi"}}, Extra: map[string]any{"level": json.Number("2")}, File: p, Line: 2},
	}
	if !reflect.DeepEqual(d.Examples, want) {
		t.Errorf("got %+v\nwant %+v", d.Examples, want)
	}
	if !d.Conversational || d.PromptKey != "prompt" || d.AnswerKey != "answer" || d.Format != PromptJSONL {
		t.Errorf("dataset %+v", d)
	}
	if got := d.Describe(); !strings.Contains(got, `2 entries, JSONL; prompt from "prompt" (messages), answer from "answer"`) {
		t.Errorf("Describe() = %q", got)
	}

	m := write(t, "sft.jsonl", `{"messages": [{"role": "user", "content": "Sum 1 and 2."}, {"role": "assistant", "content": "1+2=3\n#### 3"}]}
{"messages": [{"role": "user", "content": "Go on."}]}
`)
	d, err = Load(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want = []Example{
		{Messages: []Message{{"user", "Sum 1 and 2."}}, Answer: "3", Text: "1+2=3\n#### 3", File: m, Line: 1},
		{Messages: []Message{{"user", "Go on."}}, File: m, Line: 2},
	}
	if !reflect.DeepEqual(d.Examples, want) || d.PromptKey != "messages" {
		t.Errorf("messages: got %+v\nwant %+v", d.Examples, want)
	}
}

func TestConversationalErrors(t *testing.T) {
	cases := []struct{ name, content, want string }{
		{"role.jsonl", `{"prompt": [{"role": "user", "content": "a"}]}` + "\n" + `{"prompt": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}`,
			`role.jsonl:2: field "prompt", message 2: unknown role "bot" (want system, user, assistant or tool)`},
		{"norole.jsonl", `{"prompt": [{"content": "a"}]}`, `norole.jsonl:1: field "prompt", message 1 has no string "role"`},
		{"content.jsonl", `{"prompt": [{"role": "user", "content": 3}]}`, `content.jsonl:1: field "prompt", message 1 (user): "content" is a number, not a string`},
		{"empty.jsonl", `{"prompt": []}`, `empty.jsonl:1: field "prompt" is an empty list of messages`},
		{"only.jsonl", `{"messages": [{"role": "assistant", "content": "x"}]}`, `only.jsonl:1: field "messages" holds no message before the final assistant turn`},
		{"bad.json", "[\n {\"prompt\": \"a\"},\n {\"prompt\": [{\"role\": \"robot\", \"content\": \"b\"}]}\n]", `bad.json:3: field "prompt", message 1: unknown role "robot"`},
	}
	for _, c := range cases {
		_, err := Load(write(t, c.name, c.content), Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestJSONArray(t *testing.T) {
	p := write(t, "d.json", "\xef\xbb\xbf[\n  {\"problem\": \"Find x.\", \"solution\": \"x = 2\", \"id\": 12345678901234567890},\n\n  {\"problem\": \"Find y.\",\n   \"solution\": 7}\n]\n")
	d, err := Load(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Prompt: "Find x.", Answer: "x = 2", Text: "x = 2", Extra: map[string]any{"id": json.Number("12345678901234567890")}, File: p, Line: 2},
		{Prompt: "Find y.", Answer: "7", Text: "7", File: p, Line: 4},
	}
	if !reflect.DeepEqual(d.Examples, want) || d.Container != JSON || d.PromptKey != "problem" || d.AnswerKey != "solution" {
		t.Errorf("got %+v %+v\nwant %+v", d, d.Examples, want)
	}
	for _, c := range []struct{ name, content, want string }{
		{"n.json", "[{\"prompt\": \"a\"},\n 3]", "n.json:2: entry 2 is a number, not a JSON object"},
		{"open.json", "[{\"prompt\": \"a\"},\n", "open.json:2: bad JSON"},
		{"tail.json", "[{\"prompt\": \"a\"}]\n{}", "tail.json:2: text after the JSON array"},
		{"e.json", "[]", "e.json: empty file (no entries in it)"},
		{"comma.json", "[{\"prompt\": \"a\"},,{\"prompt\": \"b\"}]", "comma.json:1: bad JSON in entry 2"},
	} {
		_, err := Load(write(t, c.name, c.content), Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestKeys(t *testing.T) {
	// verl's layout as JSON: dotted answer key into a nested column, the nested column kept
	// for command rewards.
	p := write(t, "verl.jsonl", `{"data_source": "gsm8k", "prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"index": 0}}
`)
	d, err := Load(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := d.Examples[0]
	if d.AnswerKey != "reward_model.ground_truth" || x.Answer != "2" || x.Extra["data_source"] != "gsm8k" || x.Extra["reward_model"] == nil {
		t.Errorf("verl: %+v %+v", d, x)
	}
	if !reflect.DeepEqual(d.Columns, []string{"data_source", "extra_info.index", "prompt", "reward_model.ground_truth", "reward_model.style"}) {
		t.Errorf("columns %v", d.Columns)
	}
	// OpenRLHF-style keys named in the options.
	q := write(t, "o.jsonl", `{"input": "Say a.", "question": "ignored", "label": 3, "ref": {"final": "x"}}`+"\n")
	d, err = Load(q, Options{PromptKey: "input", AnswerKey: "ref.final"})
	if err != nil {
		t.Fatal(err)
	}
	if x := d.Examples[0]; x.Prompt != "Say a." || x.Answer != "x" || x.Extra["question"] != "ignored" || x.Extra["input"] != nil {
		t.Errorf("named keys: %+v", x)
	}
	// A column whose name holds a dot is found before a nested path.
	r := write(t, "dot.jsonl", `{"q.text": "flat", "q": {"text": "nested"}}`+"\n")
	if d, err = Load(r, Options{PromptKey: "q.text"}); err != nil || d.Examples[0].Prompt != "flat" {
		t.Errorf("dotted name: %v %+v", err, d)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{PromptKey: "query"}, `o.jsonl: no column "query" ([data] prompt_key); the file's columns: input, label, question, ref.final`},
		{Options{AnswerKey: "ref.missing"}, `o.jsonl: no column "ref.missing" ([data] answer_key); the file's columns: input, label, question, ref.final`},
	} {
		if _, err := Load(q, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.o, err, c.want)
		}
	}
}
