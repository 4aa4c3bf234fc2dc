package testmodel

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "rlhfstation/engine/backend/cpu" // the reference backend pretrains the model
	"rlhfstation/engine/model"
	"rlhfstation/engine/pretrain"
	"rlhfstation/safetensors"
)

// ToolPrompt is the question the ToolCaller model answers, and ToolTranscript the episode it
// learned, in rlhfstation's plain template (engine/env.PlainTemplate): the assistant's turns
// each end at the EOS token, written here as "\x00".
const (
	ToolPrompt     = "What is (2+3)*4?"
	ToolTranscript = ToolPrompt + "\n" +
		`<tool_call>{"name": "calc", "arguments": {"expression": "2+3"}}</tool_call>` + "\x00" +
		"<tool_response>5</tool_response>\n" +
		`<tool_call>{"name": "calc", "arguments": {"expression": "5*4"}}</tool_call>` + "\x00" +
		"<tool_response>20</tool_response>\n" +
		"The answer is 20."
)

var (
	toolOnce sync.Once
	toolDir  string
	toolErr  error
)

// ToolCaller returns the folder of a small llama pretrained (here, once per test binary, in a
// few seconds) on ToolTranscript alone, so that given ToolPrompt it calls the tool calc
// twice, as the transcript does, and then answers: a model whose tool calls come from the
// model, for the tests of environments. Main removes it.
func ToolCaller(t testing.TB) string {
	t.Helper()
	toolOnce.Do(func() {
		toolDir, toolErr = os.MkdirTemp("", "rlhfstation-toolcaller-")
		if toolErr != nil {
			return
		}
		// The corpus: the transcript's parts, one document each (the EOS token joins them),
		// repeated, as JSONL text fields.
		parts := strings.Split(ToolTranscript, "\x00")
		var b strings.Builder
		for range 60 {
			for _, p := range parts {
				js, _ := json.Marshal(map[string]string{"text": p})
				b.Write(append(js, '\n'))
			}
		}
		corpus := filepath.Join(toolDir, "corpus.jsonl")
		if toolErr = os.WriteFile(corpus, []byte(b.String()), 0o644); toolErr != nil {
			return
		}
		o := pretrain.Defaults()
		o.Config = model.Config{ModelType: "llama", Vocab: 320, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2,
			Hidden: 128, MaxPos: 128, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true}
		o.Corpus, o.Steps, o.Batch, o.LR, o.Warmup, o.EvalEvery, o.EvalTokens = corpus, 150, 4, 4e-3, 15, 0, 512
		var tr *pretrain.Trainer
		if tr, toolErr = pretrain.New(o); toolErr != nil {
			return
		}
		var res *pretrain.Result
		if res, toolErr = tr.Run(context.Background(), nil); toolErr != nil {
			return
		}
		toolErr = tr.Save(filepath.Join(toolDir, "model"), safetensors.F32, res)
	})
	if toolErr != nil {
		t.Fatal(toolErr)
	}
	return filepath.Join(toolDir, "model")
}
