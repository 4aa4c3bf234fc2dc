package engine

// Conversational prompts and the model's chat template: which template applies, rendering
// prompts with it, and encoding a prompt the way the model sees it.

import (
	"errors"
	"fmt"

	"rlhfstation/engine/chat"
	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// Chat is how prompts meet a chat template (the [data] chat_template settings, or the --chat
// flags of the commands).
type Chat struct {
	Template *chat.Template // nil: none
	Kwargs   map[string]any // chat_template_kwargs: extra template variables
	// Why says why there is no template and how to give one, for the error a conversational
	// prompt meets without one.
	Why string
}

// ChatTemplate resolves a chat_template setting for the model folder dir: "none" gives no
// template; "auto" (or "") the folder's, if it has one; anything else is a template file (a
// .jinja file, or a .json file read like tokenizer_config.json) rendered with the folder's
// special tokens. how says how a user gives one ("[data] chat_template = ...").
func ChatTemplate(dir, setting, how string) (Chat, error) {
	if setting == "none" {
		return Chat{Why: fmt.Sprintf("chat_template is \"none\": %s", how)}, nil
	}
	f, err := chat.ReadFolder(dir)
	if err != nil {
		return Chat{}, err
	}
	if setting == "" || setting == "auto" {
		c := Chat{Template: f.Template}
		if f.Template == nil {
			c.Why = fmt.Sprintf("the model %s has no chat template (no %s, no chat_template in its %s): %s", dir, chat.TemplateFile, chat.ConfigFile, how)
		}
		return c, nil
	}
	t, err := chat.ReadFile(setting, f.Tokens)
	return Chat{Template: t}, err
}

// ErrNoTemplate is wrapped by the error of a conversational prompt met without a template.
var ErrNoTemplate = errors.New("conversational prompts need a chat template")

// Render renders the messages of every conversational example into its Prompt as TRL does
// (chat.Template.RenderPrompt: the generation prompt after a user message, an assistant
// message continued): what the policy sees, the samples show and the logs keep. Plain prompts are left as they are: a template applies
// to conversational data only, as in TRL. It returns how many it rendered; errors name the
// entry.
func (c Chat) Render(ex []data.Example) (int, error) {
	n := 0
	for i := range ex {
		x := &ex[i]
		if len(x.Messages) == 0 {
			continue
		}
		if c.Template == nil {
			return n, fmt.Errorf("%s: %w: %s", x.Where(), ErrNoTemplate, c.Why)
		}
		s, err := c.Template.RenderPrompt(x.Messages, c.Kwargs)
		if err != nil {
			return n, fmt.Errorf("%s: %w", x.Where(), err)
		}
		x.Prompt = s
		n++
	}
	return n, nil
}

// UserPrompt renders text as one user message with the generation prompt: the --chat flags.
func (c Chat) UserPrompt(text string) (string, error) {
	if c.Template == nil {
		return "", fmt.Errorf("%w: %s", ErrNoTemplate, c.Why)
	}
	return c.Template.RenderPrompt([]data.Message{{Role: "user", Content: text}}, c.Kwargs)
}

// Conversational reports whether x's prompt is a conversation: once Render ran, its Prompt
// is the template's rendering.
func Conversational(x data.Example) bool { return len(x.Messages) > 0 }

// AsUserMessages gives every plain-text prompt as one user message, for Render: what the
// --chat flags do.
func AsUserMessages(ex []data.Example) {
	for i := range ex {
		if x := &ex[i]; !Conversational(*x) && x.Prompt != "" {
			x.Messages = []data.Message{{Role: "user", Content: x.Prompt}}
		}
	}
}

// EncodePrompt tokenizes a prompt as the model sees it. A prompt rendered by a chat template
// holds the special tokens its template writes (Gemma's <bos>) and is encoded without adding
// them again: adding them would give two BOS. A plain prompt gets the tokenizer's special
// tokens (a BOS where its post-processor adds one), and the config's BOS when that gives
// nothing at all.
func EncodePrompt(m *model.Model, tok *tokenizer.Tokenizer, prompt string, rendered bool) []int {
	ids := tok.Encode(prompt, !rendered).IDs
	if len(ids) == 0 && m.Config.BOS >= 0 {
		ids = []int{m.Config.BOS}
	}
	return ids
}
