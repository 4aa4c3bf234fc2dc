package testmodel

import (
	"os"
	"strings"
	"testing"

	"path/filepath"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// The ToolCaller model, given the prompt, writes the transcript's first assistant turn.
func TestToolCallerCallsTheTool(t *testing.T) {
	dir := ToolCaller(t)
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode(ToolPrompt+"\n", false).IDs
	gen, err := m.Generate([][]int{prompt}, model.GenerateOptions{MaxNewTokens: 60, Temperature: 0.01, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Decode(gen.Tokens[0], false)
	want := strings.Split(strings.TrimPrefix(ToolTranscript, ToolPrompt+"\n"), "\x00")[0]
	t.Logf("%q; the transcript is %d tokens", got, len(tok.Encode(ToolTranscript, false).IDs))
	if !strings.HasPrefix(got, want) {
		t.Fatalf("generated %q, want %q", got, want)
	}
}
