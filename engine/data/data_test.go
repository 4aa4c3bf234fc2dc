package data

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadFormats(t *testing.T) {
	cases := []struct {
		name, content string
		format        Format
		want          []Example
	}{
		{"p.jsonl", "{\"prompt\": \"Add 2 and 3.\", \"answer\": \"#### 5\"}\n\n{\"prompt\": \"Say hi.\", \"level\": \"easy\", \"tags\": [\"a\", 2]}\n{\"prompt\": \"Count\", \"answer\": 1200}\n", PromptJSONL,
			[]Example{{Prompt: "Add 2 and 3.", Answer: "5", Text: "#### 5", Line: 1}, {Prompt: "Say hi.", Extra: map[string]any{"level": "easy", "tags": []any{"a", json.Number("2")}}, Line: 3}, {Prompt: "Count", Answer: "1200", Text: "1200", Line: 4}}},
		{"g.jsonl", "{\"question\": \"How many?\", \"answer\": \"2+2=<<2+2=4>>4\\n#### 1,004\"}\n", GSM8K,
			[]Example{{Prompt: "How many?", Answer: "1004", Text: "2+2=<<2+2=4>>4\n#### 1,004", Line: 1}}},
		{"t.jsonl", "{\"text\": \"Once upon a time.\"}\n{\"text\": \"The end.\", \"id\": 3}\n", TextJSONL,
			[]Example{{Text: "Once upon a time.", Line: 1}, {Text: "The end.", Extra: map[string]any{"id": json.Number("3")}, Line: 2}}},
		{"p.txt", "\nWrite a poem.\r\n  \nTell a story.\n", Lines,
			[]Example{{Prompt: "Write a poem.", Text: "Write a poem.", Line: 2}, {Prompt: "Tell a story.", Text: "Tell a story.", Line: 4}}},
		{"brace.txt", "{not json} but a prompt\n", Lines,
			[]Example{{Prompt: "{not json} but a prompt", Text: "{not json} but a prompt", Line: 1}}},
	}
	for _, c := range cases {
		got, f, err := Read(write(t, c.name, c.content))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if f != c.format || len(got) != len(c.want) {
			t.Errorf("%s: format %s, %d examples %+v; want %s, %d", c.name, f, len(got), got, c.format, len(c.want))
			continue
		}
		for i := range got {
			if got[i].File != filepath.Join(filepath.Dir(got[i].File), c.name) {
				t.Errorf("%s example %d: file %q", c.name, i, got[i].File)
			}
			got[i].File = ""
			if !reflect.DeepEqual(got[i], c.want[i]) {
				t.Errorf("%s example %d = %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

func TestReadDocuments(t *testing.T) {
	p := write(t, "novel.txt", "Chapter 1.\nIt was dark.\n\n\nChapter 2.\r\nIt was light.\n   \nEnd.")
	docs, f, err := ReadDocuments(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{Prompt: "Chapter 1.\nIt was dark.", Text: "Chapter 1.\nIt was dark.", Line: 1},
		{Prompt: "Chapter 2.\nIt was light.", Text: "Chapter 2.\nIt was light.", Line: 5},
		{Prompt: "End.", Text: "End.", Line: 8},
	}
	if f != Documents || len(docs) != len(want) {
		t.Fatalf("format %s docs %+v", f, docs)
	}
	for i := range want {
		docs[i].File = ""
		if !reflect.DeepEqual(docs[i], want[i]) {
			t.Errorf("doc %d = %+v, want %+v", i, docs[i], want[i])
		}
	}
	// JSONL stays JSONL.
	if _, f, err := ReadDocuments(write(t, "t.jsonl", "{\"text\": \"a\"}\n")); err != nil || f != TextJSONL {
		t.Errorf("jsonl documents: %s %v", f, err)
	}
}

func TestReadErrors(t *testing.T) {
	cases := []struct{ name, content, want string }{
		{"bad.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": \"b\",}\n", "bad.jsonl:2: bad JSON"},
		{"first.jsonl", "{\"prompt\": \n", "first.jsonl:1: bad JSON"},
		{"missing.jsonl", "{\"prompt\": \"a\"}\n\n{\"answer\": \"b\"}\n", `missing.jsonl:3: missing field "prompt"`},
		{"gsm.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": \"q\"}\n", `gsm.jsonl:2: missing field "answer"`},
		{"gsm2.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": \"q\", \"answer\": \"no marker\"}\n", `gsm2.jsonl:2: GSM8K answer without`},
		{"type.jsonl", "{\"prompt\": [1, 2]}\n", `type.jsonl:1: field "prompt", message 1 is a number, not a {role, content} object`},
		{"number.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": 5}\n", `number.jsonl:2: field "prompt" is a number, not a string or a list of {role, content} messages`},
		{"object.jsonl", "{\"prompt\": {\"role\": \"user\"}}\n", `object.jsonl:1: field "prompt" is an object, not a string`},
		{"null.jsonl", "{\"prompt\": \"a\"}\n{\"prompt\": null}\n", `null.jsonl:2: field "prompt" is null`},
		{"answer.jsonl", "{\"prompt\": \"a\", \"answer\": [1]}\n", `answer.jsonl:1: field "answer" is a list, not a string or a number`},
		{"fields.jsonl", "{\"id\": \"x\", \"meta\": {\"a\": 1}}\n", `fields.jsonl: no prompt column: none of "prompt", "question", "problem", "input", "messages" (or "text" for reference texts); the file's columns: id, meta.a`},
		{"latin1.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \"caf\xe9\"}\n", "latin1.jsonl:2: not UTF-8 text (byte 0xe9 at offset"},
		{"latin1.txt", "one\ntwo\ncaf\xe9\n", "latin1.txt:3: not UTF-8 text"},
		{"array.jsonl", "{\"prompt\": \"a\"}\n[1]\n", "array.jsonl:2: bad JSON: a list, not a JSON object"},
		{"text.jsonl", "hello\n", "text.jsonl:1: a JSON file must hold one object a line or an array of objects"},
		{"spread.json", "{\n  \"prompt\": \"a\"\n}\n", "spread.json: one JSON object spread over lines"},
		{"empty.txt", "", "empty.txt: empty file"},
		{"blank.txt", "\n  \n\n", "blank.txt: empty file"},
	}
	for _, c := range cases {
		_, _, err := Read(write(t, c.name, c.content))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	_, _, err := Read(write(t, "e.txt", ""))
	if !errors.Is(err, ErrEmpty) {
		t.Errorf("empty file error %v does not wrap ErrEmpty", err)
	}
	if _, _, err := Read(filepath.Join(t.TempDir(), "nope.jsonl")); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Errorf("missing file: %v", err)
	}
}

func TestGSM8KSample(t *testing.T) {
	path := testref.SharedData(t, "gsm8k/train-sample.jsonl")
	ex, f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f != GSM8K || len(ex) != 300 {
		t.Fatalf("format %s, %d examples", f, len(ex))
	}
	for _, e := range ex {
		if _, err := strconv.ParseFloat(e.Answer, 64); err != nil || e.Prompt == "" || !strings.Contains(e.Text, "#### ") {
			t.Errorf("line %d: %+v", e.Line, e)
		}
	}
	if ex[0].Answer != "72" || ex[1].Answer != "10" {
		t.Errorf("first answers %q %q, want 72 10", ex[0].Answer, ex[1].Answer)
	}
}
