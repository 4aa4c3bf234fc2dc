package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenDefaults: generation_config.json's sampling values become generate's defaults, keys
// it lacks take transformers' (top_k 50), flags given win, do_sample false is greedy.
func TestGenDefaults(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (float64, float64, int, string) {
		fs := flag.NewFlagSet("generate", flag.ContinueOnError)
		temp, topP, topK := fs.Float64("temperature", 1, ""), fs.Float64("top-p", 1, ""), fs.Int("top-k", 0, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		if err := applyGenDefaults(fs, dir, &stderr, temp, topP, topK); err != nil {
			t.Fatal(err)
		}
		return *temp, *topP, *topK, stderr.String()
	}
	write("{\r\n  \"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, \"eos_token_id\": [1, 2]\r\n}")
	if tp, p, k, msg := run(); tp != 0.6 || p != 0.9 || k != 50 || !strings.Contains(msg, "generation_config.json") {
		t.Errorf("defaults: temperature %g top_p %g top_k %d (%q); want 0.6, 0.9, 50", tp, p, k, msg)
	}
	if tp, p, k, _ := run("--temperature", "1.2", "--top-k", "0"); tp != 1.2 || p != 0.9 || k != 0 {
		t.Errorf("flags: temperature %g top_p %g top_k %d; want 1.2, 0.9, 0", tp, p, k)
	}
	write(`{"do_sample": false, "temperature": 0.6}`)
	if tp, _, _, _ := run(); tp != 0 {
		t.Errorf("do_sample false: temperature %g, want 0 (greedy)", tp)
	}
	write(`{"temperature": "hot"}`)
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	temp := fs.Float64("temperature", 1, "")
	if err := applyGenDefaults(fs, dir, &bytes.Buffer{}, temp, nil, nil); err == nil || !strings.Contains(err.Error(), "temperature") {
		t.Errorf("a string temperature: %v", err)
	}
}
