package cli

// The --chat flags of tokenize, score, generate and eval: a text rendered as one user message
// with the model's chat template, as a run renders conversational prompts.

import (
	"bytes"
	"encoding/json"
	"flag"

	"rlhfstation/engine"
)

type chatFlags struct {
	on       *bool
	template *string
	kwargs   *string
}

func addChatFlags(fs *flag.FlagSet) chatFlags {
	return chatFlags{
		on: fs.Bool("chat", false, "render the text as one user message with the model's chat template and the generation prompt, "+
			"and encode it without adding special tokens again: a prompt as a run sees a conversational one"),
		template: fs.String("chat-template", "", "the chat template `FILE` (.jinja, or a .json with a chat_template) in place of the model's"),
		kwargs:   fs.String("chat-template-kwargs", "", "extra template variables, a JSON `object` such as '{\"enable_thinking\": false}'"),
	}
}

// check refuses template settings without --chat where only --chat uses them.
func (f chatFlags) check(cmd string) error {
	if !*f.on && (*f.template != "" || *f.kwargs != "") {
		return usagef("%s: --chat-template and --chat-template-kwargs go with --chat", cmd)
	}
	return nil
}

// load resolves the template for the model folder dir: --chat-template, else the model's.
func (f chatFlags) load(dir string) (engine.Chat, error) {
	setting := *f.template
	if setting == "" {
		setting = "auto"
	}
	c, err := engine.ChatTemplate(dir, setting, "give one with --chat-template FILE")
	if err != nil {
		return c, err
	}
	if *f.kwargs != "" {
		dec := json.NewDecoder(bytes.NewReader([]byte(*f.kwargs)))
		dec.UseNumber()
		if err := dec.Decode(&c.Kwargs); err != nil || dec.More() {
			return c, usagef("--chat-template-kwargs: want one JSON object, such as '{\"enable_thinking\": false}'")
		}
	}
	return c, nil
}

// prompt renders text with --chat, or returns it as it is; rendered says which.
func (f chatFlags) prompt(dir, text string) (prompt string, rendered bool, err error) {
	if !*f.on {
		return text, false, nil
	}
	c, err := f.load(dir)
	if err != nil {
		return "", false, err
	}
	s, err := c.UserPrompt(text)
	return s, err == nil, err
}
