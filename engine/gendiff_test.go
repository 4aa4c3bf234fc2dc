package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/config"
)

// TestGenDefaultsNote: a run names the sampling settings in which its GRPO configuration
// differs from the checkpoint's generation_config.json, and says nothing when they agree.
func TestGenDefaultsNote(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20}`), 0o644)
	c := config.Default()
	note, err := genDefaultsNote(dir, c)
	if err != nil || !strings.Contains(note, "temperature 1 (checkpoint 0.7)") || !strings.Contains(note, "top_p 1 (checkpoint 0.8)") ||
		!strings.Contains(note, "top_k 0 (checkpoint 20)") {
		t.Errorf("note %q, %v", note, err)
	}
	c.Temperature, c.TopP, c.TopK = 0.7, 0.8, 20
	if note, err := genDefaultsNote(dir, c); note != "" || err != nil {
		t.Errorf("agreeing settings: %q, %v", note, err)
	}
	if note, err := genDefaultsNote(t.TempDir(), c); note != "" || err != nil {
		t.Errorf("no generation_config.json: %q, %v", note, err)
	}
}
