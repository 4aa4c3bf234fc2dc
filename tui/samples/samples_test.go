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
