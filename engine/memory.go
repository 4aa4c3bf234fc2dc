package engine

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/memory"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

// checkMemory refuses a run whose estimate (engine/memory) exceeds the memory available,
// naming the settings that would make it fit. The prompts are known by then: the estimate
// takes the longest of them in tokens, capped by max_prompt_length, instead of assuming
// every prompt is max_prompt_length long.
func checkMemory(dir string, c *config.Config, prompts []data.Example) error {
	m, err := memory.ReadModel(dir)
	if err != nil {
		return err
	}
	avail, ok := availableMemory()
	if !ok {
		return nil
	}
	return memory.Check(m, c, longestPrompt(dir, prompts, c.MaxPromptLength), avail)
}

// longestPrompt is the most tokens a prompt of the first few thousand takes (capped at limit),
// 0 when they cannot be counted.
func longestPrompt(dir string, prompts []data.Example, limit int) int {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return 0
	}
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

// availableMemory reads MemAvailable from /proc/meminfo.
func availableMemory() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

// Estimate is the memory estimate's parts (engine/memory), under the name `check` uses.
type Estimate = memory.Estimate

// EstimateMemory is the estimate of a run of c on a model of config mc from config.json alone
// (bf16 weight files assumed, prompts of max_prompt_length): what `rlhfstation check` reports.
func EstimateMemory(mc *model.Config, c *config.Config, quantizedFolder bool) Estimate {
	return memory.For(memory.Model{Config: mc, DTypeBytes: 2, BF16: true, Quantized: quantizedFolder}, c, 0)
}
