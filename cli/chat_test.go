package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/events"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
)

// chatTemplate asks the built-in model the way its corpus writes problems: a question, then
// "Answer:", after the BOS.
const chatTemplate = "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}[{{ m.content }}]\n{% elif m.role == 'user' %}{{ m.content }}\n" +
	"{% else %}Answer: {{ m.content }}\n{% endif %}{% endfor %}{% if add_generation_prompt %}Answer:{% endif %}{% if style is defined %} ({{ style }}){% endif %}"

// chatModel is the built-in model's folder with chatTemplate and a BOS-adding tokenizer.
func chatModel(t *testing.T) (dir string, tok *tokenizer.Tokenizer) {
	t.Helper()
	src, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	dir = testmodel.WithChatTemplate(t, src, chatTemplate)
	tok, err = tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, tok
}

const question = "Question: Tom has 3 apples and gets 4 more. How many apples does he have?"

// The question as chatTemplate renders it with the generation prompt, written out by hand.
const rendered = "<|endoftext|>" + question + "\nAnswer:"

func TestTokenizeChat(t *testing.T) {
	dir, tok := chatModel(t)
	code, out, errOut := runCaptured(t, "tokenize", "--model", dir, "--chat", "--json", question)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Text *string `json:"text"`
		IDs  []int   `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Text == nil || *doc.Text != rendered {
		t.Fatalf("text %v, want %q", doc.Text, rendered)
	}
	// One BOS: the template's. Encoding the rendering with special tokens would add another.
	if want := tok.Encode(rendered, false).IDs; !reflect.DeepEqual(doc.IDs, want) || doc.IDs[0] != 0 || slices.Index(doc.IDs[1:], 0) >= 0 {
		t.Errorf("ids %v, want %v with one BOS (0)", doc.IDs, want)
	}
	if both := tok.Encode(rendered, true).IDs; both[0] != 0 || both[1] != 0 {
		t.Errorf("the test cannot fail: the tokenizer adds no BOS (%v)", both[:2])
	}

	// Without --json the rendering is printed above the tokens; kwargs reach the template.
	code, out, errOut = runCaptured(t, "tokenize", "--model", dir, "--chat", "--chat-template-kwargs", `{"style": "brief"}`, "hi")
	if code != 0 || !strings.HasPrefix(out, "rendered with the chat template:\n<|endoftext|>hi\nAnswer: (brief)\n\n") {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
	// Without --json and --chat nothing changes: no "text" key.
	if _, out, _ = runCaptured(t, "tokenize", "--model", dir, "--json", "hi"); strings.Contains(out, `"text"`) {
		t.Errorf("plain tokenize --json: %s", out)
	}
}

// Qwen3's own folder: its template's special tokens encode as single added tokens, and no BOS
// is added (its tokenizer has none).
func TestTokenizeChatQwen3(t *testing.T) {
	dir := testref.SharedData(t, "tokenizers/qwen3")
	code, out, errOut := runCaptured(t, "tokenize", "--model", dir, "--chat", "--chat-template-kwargs", `{"enable_thinking": false}`, "--json", "What is 7 + 5?")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Text   string   `json:"text"`
		IDs    []int    `json:"ids"`
		Tokens []string `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	// qwen3.json's enable_thinking=false case.
	if want := "<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; doc.Text != want {
		t.Errorf("text %q, want %q", doc.Text, want)
	}
	if len(doc.IDs) < 3 || doc.IDs[0] != 151644 || doc.Tokens[1] != "user" || slices.Index(doc.IDs, 151645) < 0 {
		t.Errorf("ids %v tokens %q: want <|im_start|> (151644) first and <|im_end|> (151645)", doc.IDs, doc.Tokens)
	}
}

func TestChatFlagErrors(t *testing.T) {
	dir, _ := chatModel(t)
	plain, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(other, []byte("<{{ messages[0].content }}>"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tokenize", "--model", dir, "--chat", "--special", "x"}, 2, "--chat encodes without adding special tokens"},
		{[]string{"tokenize", "--model", dir, "--chat-template", other, "x"}, 2, "go with --chat"},
		{[]string{"tokenize", "--model", plain, "--chat", "x"}, 1, "has no chat template (no chat_template.jinja, no chat_template in its tokenizer_config.json): give one with --chat-template FILE"},
		{[]string{"tokenize", "--model", dir, "--chat", "--chat-template-kwargs", "[1]", "x"}, 2, "--chat-template-kwargs: want one JSON object"},
		{[]string{"tokenize", "--model", dir, "--chat", "--chat-template-kwargs", `{"messages": []}`, "x"}, 1, `"messages" is set by the trainer`},
		{[]string{"score", "--model", dir, "--chat", "x"}, 2, "--chat renders the --prompt"},
		{[]string{"generate", "--model", dir, "--chat-template", other, "x"}, 2, "go with --chat"},
	} {
		code, _, errOut := runCaptured(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, %s; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	// --chat-template in place of the model's, on a model without one.
	code, out, errOut := runCaptured(t, "tokenize", "--model", plain, "--chat", "--chat-template", other, "--json", "x")
	if code != 0 || !strings.Contains(out, `"text":"<x>"`) {
		t.Errorf("exit %d: %s%s", code, out, errOut)
	}
}

func TestGenerateAndScoreChat(t *testing.T) {
	dir, tok := chatModel(t)
	code, out, errOut := runCaptured(t, "generate", "--model", dir, "--chat", "--json", "--temperature", "0", "--max-new-tokens", "4", question)
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, errOut)
	}
	var g struct {
		Prompt    string `json:"prompt"`
		PromptIDs []int  `json:"prompt_ids"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	if g.Prompt != rendered || !reflect.DeepEqual(g.PromptIDs, tok.Encode(rendered, false).IDs) {
		t.Errorf("generate: prompt %q ids %v", g.Prompt, g.PromptIDs)
	}

	code, out, errOut = runCaptured(t, "score", "--model", dir, "--chat", "--prompt", question, "--json", " 7")
	if code != 0 {
		t.Fatalf("score: exit %d: %s", code, errOut)
	}
	var s struct {
		Prompt *string `json:"prompt"`
		Texts  []struct {
			Context []int `json:"context"`
		} `json:"texts"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Prompt == nil || *s.Prompt != rendered || len(s.Texts) != 1 || !reflect.DeepEqual(s.Texts[0].Context, tok.Encode(rendered, false).IDs) {
		t.Errorf("score: %s", out)
	}
}

func TestEvalChat(t *testing.T) {
	dir, _ := chatModel(t)
	plain, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	plainData := filepath.Join(tmp, "plain.jsonl")
	convData := filepath.Join(tmp, "conv.jsonl")
	os.WriteFile(plainData, []byte(`{"prompt": "`+question+`", "answer": "7"}`+"\n"), 0o644)
	os.WriteFile(convData, []byte(`{"prompt": [{"role": "user", "content": "`+question+`"}], "answer": "7"}`+"\n"), 0o644)
	args := []string{"eval", "--model", dir, "--prompts", "1", "--samples", "1", "--max-new-tokens", "2", "--quant", "none", "--json"}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--data", plainData, "--chat"}, "eval: 1 prompts rendered with the chat template of " + dir},
		{[]string{"--data", convData}, "eval: 1 prompts rendered with the chat template of " + dir},
		{[]string{"--data", plainData}, ""},
	} {
		code, _, errOut := runCaptured(t, append(slices.Clone(args), tc.extra...)...)
		if code != 0 || tc.want != "" && !strings.Contains(errOut, tc.want) || tc.want == "" && strings.Contains(errOut, "rendered") {
			t.Errorf("%q: exit %d: %s", tc.extra, code, errOut)
		}
	}
	code, _, errOut := runCaptured(t, "eval", "--model", plain, "--data", convData, "--prompts", "1")
	if code != 1 || !strings.Contains(errOut, convData+":1: conversational prompts need a chat template") {
		t.Errorf("conversational data on a model without a template: exit %d: %s", code, errOut)
	}
}

// A --batch run on conversational data: the run's first lines show the first prompt as the
// template rendered it, and the first logged sample's prompt is that rendering.
func TestBatchOnConversationalData(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir, _ := chatModel(t)
	tmp := t.TempDir()
	file := filepath.Join(tmp, "conv.jsonl")
	os.WriteFile(file, []byte(`{"prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "`+question+`"}], "answer": "7"}`+"\n"), 0o644)
	cfg := filepath.Join(tmp, "run.toml")
	os.WriteFile(cfg, []byte("[data.chat_template_kwargs]\nstyle = \"brief\"\n"), 0o644)
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--model", dir, "--data", file, "--config", cfg, "--out", out, "--run-name", "r",
		"--steps", "1", "--batch-size", "1", "--num-generations", "2", "--max-completion-length", "4", "--preset", "math")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	want := "<|endoftext|>[Be exact.]\n" + question + "\nAnswer: (brief)"
	// The set-up lines go to stderr as the run starts (and into events.jsonl as log events).
	if !strings.Contains(stderr, "chat template: "+dir+"/tokenizer_config.json: chat_template rendered 1 conversational prompts") ||
		!strings.Contains(stderr, "as the model sees it: "+strconv.Quote(want)) {
		t.Errorf("the run's first lines do not show the rendering:\n%s", stderr)
	}
	evs, err := events.ReadFile(filepath.Join(out, "r", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == events.Samples {
			if ev.Samples[0].Prompt != want {
				t.Errorf("first logged sample's prompt %q, want %q", ev.Samples[0].Prompt, want)
			}
			return
		}
	}
	t.Errorf("no samples logged")
}

// Gemma-3's own folder: its template writes <bos> and its tokenizer adds one too; --chat
// encodes the rendering with one (id 2).
func TestTokenizeChatGemma3(t *testing.T) {
	dir := testref.SharedData(t, "tokenizers/gemma3")
	code, out, errOut := runCaptured(t, "tokenize", "--model", dir, "--chat", "--json", "What is 7 + 5?")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	// gemma3.json's first case.
	if want := "<bos><start_of_turn>user\nWhat is 7 + 5?<end_of_turn>\n<start_of_turn>model\n"; doc.Text != want {
		t.Errorf("text %q, want %q", doc.Text, want)
	}
	bos := func(ids []int) int {
		n := 0
		for _, id := range ids {
			if id == 2 {
				n++
			}
		}
		return n
	}
	if len(doc.IDs) == 0 || doc.IDs[0] != 2 || bos(doc.IDs) != 1 {
		t.Errorf("ids %v: want one <bos> (2), first", doc.IDs)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bos(tok.Encode(doc.Text, true).IDs); n != 2 {
		t.Errorf("the test cannot fail: encoding the rendering with special tokens gives %d <bos>, want 2", n)
	}
}

// The must-show of issue 15: a --batch run on a conversational Parquet file in verl's layout
// (written by an npm writer, not parquet-go), whose first logged sample shows the prompt as the
// template rendered it.
func TestBatchOnConversationalParquet(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	file := filepath.Join(testref.ParquetFixtures(t), "verl.parquet")
	dir, _ := chatModel(t)
	cfg := filepath.Join(t.TempDir(), "run.toml")
	os.WriteFile(cfg, []byte("[data]\nprompt_key = \"prompt\"\nanswer_key = \"reward_model.ground_truth\"\n"), 0o644)
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--model", dir, "--data", file, "--config", cfg, "--out", out, "--run-name", "r",
		"--steps", "1", "--batch-size", "1", "--num-generations", "2", "--max-completion-length", "4", "--preset", "math")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	// verl.parquet's prompts as chatTemplate renders them, written out by hand.
	rendered := []string{
		"<|endoftext|>[Think step by step.]\nNatalia sold 48 clips. How many?\nAnswer:",
		"<|endoftext|>Ünïcödé: 7×6 = ?\nAnswer:",
		"<|endoftext|>What is 1,000 + 1?\nAnswer:",
		"<|endoftext|>[]\nSay \"yes\"\nthen stop.\nAnswer:",
		"<|endoftext|>Last one?\nAnswer:",
	}
	for _, want := range []string{"rendered 5 conversational prompts",
		"the first prompt (" + file + " row 1) as the model sees it: " + strconv.Quote(rendered[0])} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the run's first lines lack %q:\n%s", want, stderr)
		}
	}
	evs, err := events.ReadFile(filepath.Join(out, "r", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == events.Samples {
			if p := ev.Samples[0].Prompt; !slices.Contains(rendered, p) {
				t.Errorf("first logged sample's prompt %q is none of the renderings", p)
			} else {
				t.Logf("first logged sample's prompt: %q", p)
			}
			return
		}
	}
	t.Errorf("no samples logged")
}
