package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/events"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
)

// testTemplate writes its prompts the way the built-in corpus writes math problems (a question,
// then "Answer:"), after the BOS, so that the models made here read it as prose.
const testTemplate = "{{ bos_token }}{% if messages[0].role == 'assistant' %}{{ raise_exception('a conversation starts with the user, not ' + messages[0].role) }}{% endif %}" +
	"{% for m in messages %}{% if m.role == 'system' %}[{{ m.content }}]\n{% elif m.role == 'user' %}{{ m.content }}\n{% else %}Answer: {{ m.content }}\n{% endif %}{% endfor %}" +
	"{% if add_generation_prompt %}Answer:{% endif %}{% if style is defined %} ({{ style }}){% endif %}"

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// conversationalData is TRL's conversational format: prompt as a list of messages.
const conversationalData = `{"prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "Question: Tom has 3 apples and gets 4 more. How many apples does he have?"}], "answer": "7"}
{"prompt": [{"role": "user", "content": "Question: What is 6 + 5?"}], "answer": "11"}
`

// The first prompt of conversationalData as testTemplate renders it, written out by hand.
const firstRendered = "<|endoftext|>[Be exact.]\nQuestion: Tom has 3 apples and gets 4 more. How many apples does he have?\nAnswer:"

// A rendered prompt is encoded without adding special tokens again: one BOS, the one the
// template wrote. Encoding it as a plain prompt would give two.
func TestRenderedPromptHasOneBOS(t *testing.T) {
	dir := testmodel.WithChatTemplate(t, tinyModelDir(t), testTemplate)
	m, tok, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ChatTemplate(dir, "auto", "")
	if err != nil || c.Template == nil {
		t.Fatalf("template: %v %v", c.Template, err)
	}
	ex, err := data.ReadFormat(writeFile(t, t.TempDir(), "c.jsonl", conversationalData), data.PromptJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Render(ex); err != nil || n != 2 {
		t.Fatalf("rendered %d: %v", n, err)
	}
	if ex[0].Prompt != firstRendered {
		t.Fatalf("rendered %q\nwant %q", ex[0].Prompt, firstRendered)
	}
	bos, _ := tok.TokenID("<|endoftext|>")
	ids := EncodePrompt(m, tok, ex[0].Prompt, Conversational(ex[0]))
	if count(ids, bos) != 1 || ids[0] != bos {
		t.Errorf("rendered prompt encodes to %v: want one BOS (%d), at the front", ids[:4], bos)
	}
	if plain := tok.Encode(ex[0].Prompt, true).IDs; count(plain, bos) != 2 {
		t.Errorf("the test cannot fail: adding special tokens to the rendering gives %d BOS, want 2", count(plain, bos))
	}
	// A plain prompt still gets the tokenizer's BOS.
	if ids := EncodePrompt(m, tok, "Question: 1 + 1?", false); ids[0] != bos || count(ids, bos) != 1 {
		t.Errorf("plain prompt: %v", ids)
	}
}

func count(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func TestChatTemplateSetting(t *testing.T) {
	plain := tinyModelDir(t)
	withT := testmodel.WithChatTemplate(t, plain, testTemplate)
	file := writeFile(t, t.TempDir(), "other.jinja", "{{ bos_token }}OTHER {{ messages[-1].content }}")
	msgs := []data.Example{{Messages: []data.Message{{Role: "user", Content: "hi"}}, File: "d.jsonl", Line: 3}}
	for _, tc := range []struct {
		dir, setting, want, err string
	}{
		{withT, "auto", "<|endoftext|>hi\nAnswer:", ""},
		{withT, "", "<|endoftext|>hi\nAnswer:", ""},
		{withT, file, "<|endoftext|>OTHER hi", ""},
		{plain, file, "OTHER hi", ""}, // a model without a bos_token: the template's is undefined
		{withT, "none", "", `d.jsonl:3: conversational prompts need a chat template: chat_template is "none": HOW`},
		{plain, "auto", "", "d.jsonl:3: conversational prompts need a chat template: the model " + plain + " has no chat template (no chat_template.jinja, no chat_template in its tokenizer_config.json): HOW"},
	} {
		c, err := ChatTemplate(tc.dir, tc.setting, "HOW")
		if err != nil {
			t.Fatalf("%s %q: %v", tc.dir, tc.setting, err)
		}
		ex := slices.Clone(msgs)
		_, err = c.Render(ex)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || !errors.Is(err, ErrNoTemplate) {
				t.Errorf("%q: error %v\nwant %s", tc.setting, err, tc.err)
			}
			continue
		}
		if err != nil || ex[0].Prompt != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.setting, ex[0].Prompt, err, tc.want)
		}
	}
	if _, err := ChatTemplate(withT, filepath.Join(t.TempDir(), "missing.jinja"), ""); err == nil || !strings.Contains(err.Error(), "missing.jinja") {
		t.Errorf("missing file: %v", err)
	}
	// --chat's single user message.
	c, _ := ChatTemplate(withT, "auto", "")
	c.Kwargs = map[string]any{"style": "brief"}
	if s, err := c.UserPrompt("Question: 2 + 2?"); err != nil || s != "<|endoftext|>Question: 2 + 2?\nAnswer: (brief)" {
		t.Errorf("UserPrompt: %q %v", s, err)
	}
	// A prompt ending with an assistant message is continued, as TRL continues it.
	cont := []data.Example{{Messages: []data.Message{{Role: "user", Content: "Question: 1 + 1?"}, {Role: "assistant", Content: "It is"}}}}
	if _, err := c.Render(cont); err != nil || cont[0].Prompt != "<|endoftext|>Question: 1 + 1?\nAnswer: It is" {
		t.Errorf("continued: %q %v", cont[0].Prompt, err)
	}
	ex := []data.Example{{Prompt: "plain"}, {Messages: []data.Message{{Role: "system", Content: "s"}}}}
	AsUserMessages(ex)
	if len(ex[0].Messages) != 1 || ex[0].Messages[0] != (data.Message{Role: "user", Content: "plain"}) || ex[1].Messages[0].Role != "system" {
		t.Errorf("AsUserMessages: %+v", ex)
	}
}

// chatRun starts a run on the data file with [data] settings, returning its events or the
// error New gave.
func chatRun(t *testing.T, modelDir, dataFile string, set func(*config.Config)) ([]events.Event, *Engine, error) {
	t.Helper()
	c := tinyConfig(t, "math", 1)
	c.Data.Path = dataFile
	c.PerDeviceTrainBatchSize = 2
	c.NumGenerations = 2
	c.MaxCompletionLength = 6
	if set != nil {
		set(c)
	}
	e, err := New(c, Options{ModelDir: modelDir, ModelName: "tiny"})
	if err != nil {
		return nil, nil, err
	}
	var evs []events.Event
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	for ev := range e.Events() {
		evs = append(evs, ev)
	}
	return evs, e, <-done
}

func logs(evs []events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == events.Log {
			b.WriteString(ev.Message + "\n")
		}
	}
	return b.String()
}

// TestRunRendersConversationalPrompts: a run on conversational data renders each prompt with
// the model's template; the rendering is what the policy is given (one BOS), what the first
// logged sample shows, and what the run's first lines say.
func TestRunRendersConversationalPrompts(t *testing.T) {
	dir := testmodel.WithChatTemplate(t, tinyModelDir(t), testTemplate)
	file := writeFile(t, t.TempDir(), "conv.jsonl", conversationalData)
	evs, e, err := chatRun(t, dir, file, func(c *config.Config) { c.Data.ChatTemplateKwargs = map[string]any{"style": "brief"} })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{firstRendered + " (brief)": true, "<|endoftext|>Question: What is 6 + 5?\nAnswer: (brief)": true}
	var first *events.Sample
	for _, ev := range evs {
		if ev.Type == events.Samples && len(ev.Samples) > 0 {
			first = &ev.Samples[0]
			break
		}
	}
	if first == nil || !want[first.Prompt] {
		t.Fatalf("first logged sample: %+v; want a prompt among %v", first, want)
	}
	l := logs(evs)
	for _, s := range []string{"chat template: " + dir + "/tokenizer_config.json: chat_template rendered 2 conversational prompts",
		"chat_template_kwargs map[style:brief]", `(` + file + `:1) as the model sees it: "<|endoftext|>[Be exact.]\nQuestion:`} {
		if !strings.Contains(l, s) {
			t.Errorf("the run's log lacks %q:\n%s", s, l)
		}
	}
	bos, _ := e.tok.TokenID("<|endoftext|>")
	for _, x := range e.prompts {
		if ids := e.encodePrompt(x); ids[0] != bos || count(ids, bos) != 1 {
			t.Errorf("%s: prompt ids %v: want one BOS in front", x.Where(), ids[:3])
		}
	}
	// The run folder's events say the same.
	saved, err := events.ReadFile(filepath.Join(e.runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range saved {
		if ev.Type == events.Samples {
			if !want[ev.Samples[0].Prompt] {
				t.Errorf("events.jsonl sample prompt %q", ev.Samples[0].Prompt)
			}
			break
		}
	}
}

// Plain-text prompts stay as written on a model with a template (as TRL leaves them), and
// the run says so.
func TestRunLeavesPlainPrompts(t *testing.T) {
	dir := testmodel.WithChatTemplate(t, tinyModelDir(t), testTemplate)
	file := writeFile(t, t.TempDir(), "plain.jsonl", `{"prompt": "Question: What is 2 + 2?\nAnswer:", "answer": "4"}`+"\n")
	evs, e, err := chatRun(t, dir, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.prompts[0].Prompt != "Question: What is 2 + 2?\nAnswer:" {
		t.Errorf("prompt %q", e.prompts[0].Prompt)
	}
	if l := logs(evs); !strings.Contains(l, "not applied: the prompts are plain text, used as they are") {
		t.Errorf("log:\n%s", l)
	}
}

// Bad input is refused at start, naming the data file and line (or the template file).
func TestRunChatErrors(t *testing.T) {
	tiny := tinyModelDir(t)
	withT := testmodel.WithChatTemplate(t, tiny, testTemplate)
	tmp := t.TempDir()
	conv := writeFile(t, tmp, "conv.jsonl", conversationalData)
	badOrder := writeFile(t, tmp, "order.jsonl", `{"prompt": [{"role": "user", "content": "a"}]}`+"\n"+`{"prompt": [{"role": "assistant", "content": "b"}]}`+"\n")
	broken := writeFile(t, tmp, "broken.jinja", "{% for m in messages %}\n{{ m.content }\n{% endfor %}")
	for _, tc := range []struct {
		name, model, data string
		set               func(*config.Config)
		want              []string
	}{
		{"no template", tiny, conv, nil, []string{conv + ":1: conversational prompts need a chat template", "has no chat template", `set [data] chat_template = "FILE"`}},
		{"none", withT, conv, func(c *config.Config) { c.Data.ChatTemplate = "none" }, []string{conv + ":1:", `chat_template is "none"`}},
		{"raises", withT, badOrder, nil, []string{badOrder + ":2:", "raised an exception: a conversation starts with the user, not assistant"}},
		{"parse", withT, conv, func(c *config.Config) { c.Data.ChatTemplate = broken }, []string{"data.chat_template (default)", broken, "does not parse", "line 2"}},
		{"kwargs", withT, conv, func(c *config.Config) { c.Data.ChatTemplateKwargs = map[string]any{"messages": 1} }, []string{conv + ":1:", `"messages" is set by the trainer`}},
	} {
		_, _, err := chatRun(t, tc.model, tc.data, tc.set)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
	}
}

// Baselines of conversational data condition each reference answer on the rendered prompt,
// encoded as a run encodes it (no second BOS, no separator).
func TestBaselineSamplesOfRenderedPrompts(t *testing.T) {
	dir := testmodel.WithChatTemplate(t, tinyModelDir(t), testTemplate)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	x := data.Example{Prompt: firstRendered, Messages: []data.Message{{Role: "user", Content: "q"}}, Text: " 7"}
	got := BaselineSamples(tok, 0, 256, []data.Example{x}, data.PromptJSONL, "\n", 64, 0)
	if len(got) != 1 || !slices.Equal(got[0].Context, tok.Encode(firstRendered, false).IDs) {
		t.Fatalf("context %v, want the rendered prompt's ids %v", got[0].Context, tok.Encode(firstRendered, false).IDs)
	}
	// Without a reference answer the last message's words are the reference, not the markup.
	x.Text = ""
	got = BaselineSamples(tok, 0, 256, []data.Example{x}, data.PromptJSONL, "\n", 64, 0)
	if len(got) != 1 || got[0].Text != "q" {
		t.Errorf("reference %+v", got)
	}
}
