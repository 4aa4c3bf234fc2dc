package check

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"rlhfstation/internal/testmodel"
)

// TestPublishedLayoutsFullSize: each published layout at its full size, as bf16 shards of
// the exact tensor names and shapes (headers real, data sparse), passes check with the
// published parameter count.
func TestPublishedLayoutsFullSize(t *testing.T) {
	want := map[string]int64{"SmolLM2-135M-Instruct": 134515008, "Qwen2.5-0.5B-Instruct": 494032768,
		"Qwen2.5-0.5B-Instruct-transformers5": 494032768, "gemma-3-270m-it": 268098176, "Llama-3.2-1B-Instruct": 1235814400}
	for name, cfg := range testmodel.PublishedLayouts() {
		src, dir := t.TempDir(), t.TempDir()
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(filepath.Join(src, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		sparseFolder(t, src, dir, 2)
		r, err := Folder(dir, 0)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if w := r.Weights; w.Params != want[name] || w.Bytes != 2*w.Params || !w.TiedHead || len(w.Unused) != 0 {
			t.Errorf("%s: weights %+v, want %d parameters", name, w, want[name])
		}
	}
}
