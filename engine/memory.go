package engine

import (
	"path/filepath"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/memory"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// checkMemory refuses a run whose estimate (engine/memory) exceeds the memory available,
// naming the settings that would make it fit. The prompts are known by then: the estimate takes the longest of them in
// tokens, capped by max_prompt_length, instead of assuming every prompt is max_prompt_length
// long.
func checkMemory(dir string, c *config.Config, prompts []data.Example) error {
	m, promptTokens, err := estimateInputs(dir, prompts, c.MaxPromptLength)
	if err != nil {
		return err
	}
	avail, ok := memory.Available()
	if !ok {
		return nil
	}
	return memory.Check(m, c, promptTokens, avail)
}

// estimateInputs is what the estimate needs of a model folder and the prompts: the model, with
// what its tokenizer holds, and the longest prompt in its tokens (0 without a tokenizer).
func estimateInputs(dir string, prompts []data.Example, limit int) (memory.Model, int, error) {
	m, err := memory.ReadModel(dir)
	if err != nil {
		return m, 0, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return m, 0, nil
	}
	m.Tokenizer = tok.Footprint()
	return m, longestPromptOf(tok, prompts, limit), nil
}

// longestPrompt is longestPromptOf with the folder's tokenizer, 0 when it cannot be read.
func longestPrompt(dir string, prompts []data.Example, limit int) int {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return 0
	}
	return longestPromptOf(tok, prompts, limit)
}

// longestPromptOf is the most tokens a prompt of the first few thousand takes (capped at
// limit), 0 when they cannot be counted.
func longestPromptOf(tok *tokenizer.Tokenizer, prompts []data.Example, limit int) int {
	most := 0
	for i, x := range prompts {
		if i == 4096 || most >= limit {
			break
		}
		if x.Prompt == "" { // a conversation not rendered yet: counted as max_prompt_length
			return 0
		}
		most = max(most, len(tok.Encode(x.Prompt, true).IDs)+1)
	}
	return most
}

// Estimate is the memory estimate's parts (engine/memory), under the name `check` uses.
type Estimate = memory.Estimate

// EstimateMemory is the estimate of a run of c on a model of config mc from config.json alone
// (bf16 weight files assumed, prompts of max_prompt_length): what `rlhfstation check` reports.
func EstimateMemory(mc *model.Config, c *config.Config, quantizedFolder bool) Estimate {
	return memory.For(memory.Model{Config: mc, DTypeBytes: 2, BF16: true, Quantized: quantizedFolder}, c, 0)
}
