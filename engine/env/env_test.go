package env

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/chat"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testref"
)

func TestParseFormats(t *testing.T) {
	cases := []struct {
		f       Format
		text    string
		content string
		calls   []Call
	}{
		{Hermes, "Let me compute.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"2*3\"}}\n</tool_call>\n<tool_call>{\"name\": \"calc\", \"arguments\": \"{\\\"expression\\\": \\\"4+1\\\"}\"}</tool_call>",
			"Let me compute.", []Call{{"calc", map[string]any{"expression": "2*3"}}, {"calc", map[string]any{"expression": "4+1"}}}},
		{Hermes, "#### 6", "#### 6", nil},
		{LlamaJSON, `<|python_tag|>{"name": "calc", "parameters": {"expression": "7-2"}}; {"name": "now", "parameters": {}}`,
			"", []Call{{"calc", map[string]any{"expression": "7-2"}}, {"now", map[string]any{}}}},
		{LlamaJSON, "The answer is 5.", "The answer is 5.", nil},
		{Mistral, `[TOOL_CALLS][{"name": "calc", "arguments": {"expression": "1+1"}}]`, "", []Call{{"calc", map[string]any{"expression": "1+1"}}}},
		{Mistral, `ok[TOOL_CALLS]calc[ARGS]{"expression": "9/3"}[TOOL_CALLS]calc[ARGS]{"expression": "1"}`, "ok",
			[]Call{{"calc", map[string]any{"expression": "9/3"}}, {"calc", map[string]any{"expression": "1"}}}},
	}
	for _, c := range cases {
		content, calls, err := Parse(c.f, c.text)
		if err != nil || content != c.content || !reflect.DeepEqual(calls, c.calls) {
			t.Errorf("%s %q: content %q calls %v err %v; want %q %v", c.f, c.text, content, calls, err, c.content, c.calls)
		}
	}
	for _, bad := range []struct {
		f    Format
		text string
	}{{Hermes, "<tool_call>{\"name\": calc}</tool_call>"}, {Hermes, "<tool_call>{\"name\": \"calc\""},
		{LlamaJSON, `{"parameters": {}}`}, {Mistral, "[TOOL_CALLS][{]"}, {Mistral, "[TOOL_CALLS]calc{}"}} {
		if _, _, err := Parse(bad.f, bad.text); err == nil {
			t.Errorf("%s %q: want an error", bad.f, bad.text)
		}
	}
	if DetectFormat("{{ '<tool_call>' }}") != Hermes || DetectFormat("[TOOL_CALLS]") != Mistral || DetectFormat("<|python_tag|>") != LlamaJSON || DetectFormat("plain") != "" {
		t.Error("DetectFormat")
	}
}

// episode plays a scripted conversation through Renderer. The model's turns are the text the
// full rendering of the whole conversation gives them (standing in for what a model
// generates); the episode's tokens are its prompt, each turn and each of Next's texts
// tokenized alone, one after the other. They must equal the tokens of the full rendering.
func episode(t *testing.T, tmpl *chat.Template, tok *tokenizer.Tokenizer, eot string, convo []map[string]any, tools []any) {
	t.Helper()
	r := &Renderer{Template: tmpl, EndOfTurn: eot}
	full, err := tmpl.RenderTools(convo, tools, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	full = full[:strings.LastIndex(full, eot)+len(eot)]
	var ids []int
	enc := func(s string) { ids = append(ids, tok.Encode(s, false).IDs...) }
	text, err := r.Prompt(convo[:1], tools)
	if err != nil {
		t.Fatal(err)
	}
	enc(text)
	for k := 1; k < len(convo); {
		if !strings.HasPrefix(full, text) {
			t.Fatalf("the episode's text is not a prefix of the full rendering:\n%q\n%q", text, full)
		}
		turn := full[len(text):]
		turn = turn[:strings.Index(turn, eot)+len(eot)]
		enc(turn)
		text += turn
		j := k + 1
		for j < len(convo) && convo[j]["role"] != "assistant" {
			j++
		}
		if j == k+1 {
			break
		}
		next, err := r.Next(convo[:k+1], convo[k+1:j], tools)
		if err != nil {
			t.Fatal(err)
		}
		enc(next)
		text += next
		k = j
	}
	if text != full {
		t.Fatalf("incremental text differs from the full rendering:\n%q\n%q", text, full)
	}
	if want := tok.Encode(full, false).IDs; !reflect.DeepEqual(ids, want) {
		t.Fatalf("incremental ids differ from the full rendering's:\n%v\n%v", ids, want)
	}
}

func toolConvo() ([]map[string]any, []any) {
	var tools []any
	json.Unmarshal([]byte(`[{"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.",
		"parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]`), &tools)
	call := func(expr string) map[string]any {
		return Message("", []Call{{"calc", map[string]any{"expression": expr}}}, func(int) string { return "call00001" })
	}
	return []map[string]any{
		{"role": "user", "content": "Tom has 3 boxes of 12 pens and gives away 5. How many are left?"},
		call("3*12"),
		{"role": "tool", "name": "calc", "content": "36"},
		call("36-5"),
		{"role": "tool", "name": "calc", "content": "31"},
		{"role": "assistant", "content": "He has 31 pens left.\n#### 31"},
	}, tools
}

// TestIncrementalMatchesFullQwen3: Qwen3's own template and tokenizer (../shared/data).
func TestIncrementalMatchesFullQwen3(t *testing.T) {
	dir := testref.SharedData(t, "tokenizers/qwen3")
	f, err := chat.ReadFolder(dir)
	if err != nil || f.Template == nil {
		t.Fatalf("qwen3 template: %v", err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if DetectFormat(f.Template.Text) != Hermes {
		t.Fatalf("Qwen3's template is not detected as hermes")
	}
	convo, tools := toolConvo()
	episode(t, f.Template, tok, "<|im_end|>", convo, tools)
	// The tools are in the prompt, as the template writes them.
	p, _ := (&Renderer{Template: f.Template}).Prompt(convo[:1], tools)
	if !strings.Contains(p, `"name": "calc"`) || !strings.Contains(p, "<tools>") {
		t.Fatalf("the tools are not in the prompt: %q", p)
	}
}

// TestIncrementalMatchesFullPlain: the plain template of models without one, with the built-in
// model's tokenizer.
func TestIncrementalMatchesFullPlain(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(testref.RepoRoot(), "engine", "builtin", "model", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Parse(PlainTemplate, "plain", chat.Tokens{Named: map[string]string{"eos_token": "<|endoftext|>"}})
	if err != nil {
		t.Fatal(err)
	}
	convo, tools := toolConvo()
	episode(t, tmpl, tok, "<|endoftext|>", convo, tools)
}

func standin(t *testing.T, timeout time.Duration) *Client {
	py := testref.Python3(t)
	c, err := New("standin", []string{py, filepath.Join("testdata", "standin_env.py")}, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientEpisodes(t *testing.T) {
	c := standin(t, 10*time.Second)
	var fails []Failure
	c.OnFailure = func(f Failure) { fails = append(fails, f) }
	reps, err := c.Do([]Request{
		{Op: "reset", ID: "a", Example: map[string]any{"prompt": "2*3?", "answer": "6"}},
		{Op: "reset", ID: "b", Example: map[string]any{"prompt": "bad", "fail": true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps["a"].Messages) != 1 || len(reps["a"].Tools) != 1 || reps["b"].Error == "" || len(fails) != 1 || fails[0].Kind != KindError {
		t.Fatalf("reset: %+v, failures %+v", reps, fails)
	}
	msg := Message("", []Call{{"calc", map[string]any{"expression": "2*3"}}}, func(int) string { return "x" })
	reps, err = c.Do([]Request{{Op: "step", ID: "a", Message: msg}})
	if err != nil || reps["a"].Done || reps["a"].Messages[0]["content"] != "6" || *reps["a"].Reward != 0.1 || reps["a"].Metrics["calls"] != 1 {
		t.Fatalf("step: %+v %v", reps, err)
	}
	reps, err = c.Do([]Request{{Op: "reward", ID: "r", IDs: []string{"a"}}})
	if err != nil || *reps["r"].Rewards["correct"][0] != 1 {
		t.Fatalf("reward: %+v %v", reps, err)
	}
}

// A crash fails the batch's episodes and is restarted; a second failing batch in a row stops.
func TestClientCrashRestartsOnce(t *testing.T) {
	c := standin(t, 10*time.Second)
	var fails []Failure
	c.OnFailure = func(f Failure) { fails = append(fails, f) }
	crash := []Request{{Op: "reset", ID: "c", Example: map[string]any{"prompt": "x", "crash": true}}}
	reps, err := c.Do(crash)
	if err != nil || reps["c"].Error == "" || len(fails) != 1 || fails[0].Kind != KindCrash {
		t.Fatalf("first crash: %+v %v %+v", reps, err, fails)
	}
	if !strings.Contains(strings.Join(fails[0].Stderr, "\n"), "crashing on purpose") {
		t.Errorf("the failure does not carry the process's stderr: %+v", fails[0])
	}
	// A good batch after the restart clears the count.
	if reps, err := c.Do([]Request{{Op: "reset", ID: "d", Example: map[string]any{"prompt": "1+1"}}}); err != nil || reps["d"].Error != "" {
		t.Fatalf("after restart: %+v %v", reps, err)
	}
	if _, err := c.Do(crash); err != nil {
		t.Fatalf("one crash after a good batch must not stop: %v", err)
	}
	_, err = c.Do(crash)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("two failing batches in a row: %v, want *Error", err)
	}
}

func TestClientTimeout(t *testing.T) {
	c := standin(t, 300*time.Millisecond)
	reps, err := c.Do([]Request{{Op: "reset", ID: "s", Example: map[string]any{"prompt": "x", "sleep": 2}}})
	if err != nil || !strings.Contains(reps["s"].Error, "missing after") {
		t.Fatalf("timeout: %+v %v", reps, err)
	}
}
