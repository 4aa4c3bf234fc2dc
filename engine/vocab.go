package engine

import (
	"fmt"

	"rlhfstation/engine/data"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// Published checkpoints pair tokenizers and embeddings of different sizes. Gemma 3's
// tokenizer holds one token more than its 262,144 embedding rows (<image_soft_token>, which
// text never produces); Qwen2.5's and Phi-3's embeddings have rows that no token uses. As in
// transformers, logits and sampling cover the embedding's rows, and a prompt that holds a
// token the embedding has no row for is refused, naming the token.

// usableVocab is the number of token ids both the tokenizer and the model know.
func usableVocab(m *model.Model, tok *tokenizer.Tokenizer) int {
	return min(tok.VocabSize(), m.Config.Vocab)
}

// CheckPromptIDs refuses prompt ids the model has no embedding row for, naming the token.
func CheckPromptIDs(m *model.Model, tok *tokenizer.Tokenizer, ids []int) error {
	for _, id := range ids {
		if id >= m.Config.Vocab || id < 0 {
			return fmt.Errorf("the prompt holds the token %q (id %d), which the model has no embedding for: its vocab_size is %d, while the tokenizer knows %d tokens; take it out of the prompt",
				tok.Token(id), id, m.Config.Vocab, tok.VocabSize())
		}
	}
	return nil
}

// checkPromptVocab refuses a run whose prompts hold tokens beyond the embedding, before the
// first step; only a tokenizer larger than the embedding can produce them.
func checkPromptVocab(m *model.Model, tok *tokenizer.Tokenizer, prompts []data.Example) error {
	if tok.VocabSize() <= m.Config.Vocab {
		return nil
	}
	for i, x := range prompts {
		if err := CheckPromptIDs(m, tok, EncodePrompt(m, tok, x.Prompt, Conversational(x))); err != nil {
			where := fmt.Sprintf("prompt %d", i+1)
			if x.Line > 0 {
				where += fmt.Sprintf(" (line %d)", x.Line)
			}
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}
