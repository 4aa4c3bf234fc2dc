package samples

import (
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/tui/context"
	"rlhfstation/tui/styles"
)

// A prompt rendered by a chat template is shown as the model saw it: its special tokens and
// line breaks, one turn a line.
func TestShowsRenderedPrompt(t *testing.T) {
	ctx := context.New(styles.New(true, true))
	prompt := "<|im_start|>system\nBe exact.<|im_end|>\n<|im_start|>user\nWhat is 7 + 5?<|im_end|>\n<|im_start|>assistant\n"
	ctx.Run.Apply(events.Event{Type: events.Samples, Step: 1, Samples: []events.Sample{{Prompt: prompt, Completion: "12"}}})
	m := New(ctx)
	m.SetSize(80, 20)
	m.Sync()
	v := m.View()
	var shown []string // the pane's lines without its frame
	for _, l := range strings.Split(v, "\n") {
		shown = append(shown, strings.TrimSpace(strings.Trim(strings.TrimSpace(l), "│")))
	}
	for _, line := range strings.Split(strings.TrimSuffix(prompt, "\n"), "\n") {
		if !slices.Contains(shown, line) {
			t.Errorf("the pane does not show the prompt's line %q as a line:\n%s", line, v)
		}
	}
}

// A multi-turn episode is shown turn by turn: the model's turns and tool calls in the text's
// style, the prompt's and the environment's (masked from the loss) dimmed.
func TestShowsTurns(t *testing.T) {
	st := styles.New(true, false)
	ctx := context.New(st)
	ep := events.Sample{Prompt: "What is (2+3)*4?\n", Completion: "…", Reward: 1, Turns: []events.Turn{
		{Role: "user", Content: "What is (2+3)*4?", Masked: true},
		{Role: "assistant", Calls: []events.ToolCall{{Name: "calc", Arguments: map[string]any{"expression": "2+3"}}}},
		{Role: "tool", Content: "5", Masked: true},
		{Role: "assistant", Content: "The answer is 20."},
	}}
	ctx.Run.Apply(events.Event{Type: events.Samples, Step: 3, Samples: []events.Sample{ep}})
	m := New(ctx)
	m.SetSize(80, 30)
	m.Sync()
	v := m.View()
	for _, want := range []string{
		st.Muted.Render("user"), st.Muted.Render("What is (2+3)*4?"),
		st.Title.Render("tool call"), st.Text.Render(`calc {"expression":"2+3"}`),
		st.Muted.Render("tool result"), st.Muted.Render("5"),
		st.Title.Render("assistant"), st.Text.Render("The answer is 20."),
	} {
		if !strings.Contains(v, want) {
			t.Errorf("the pane lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "completion") {
		t.Errorf("an episode is shown as its turns, not as one completion:\n%s", v)
	}
}
