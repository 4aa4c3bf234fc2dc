package tokenizer

import (
	"runtime"
	"testing"

	"rlhfstation/internal/testref"
)

// liveHeap is the heap's live bytes after two collections (the second sweeps what the first freed).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// Footprint against what loading a tokenizer and decoding with it adds to the heap, for the
// published tokenizers (Gemma 3's 262k entries and a million merge slots, down to Mistral's 32k).
func TestFootprintMatchesHeap(t *testing.T) {
	for _, name := range []string{"gemma3", "qwen3", "gpt2", "mistral"} {
		path := testref.SharedData(t, "tokenizers/"+name+"/tokenizer.json")
		before := liveHeap()
		tok, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		tok.TokenBytes(0) // the id → bytes table
		held := liveHeap() - before
		ratio := float64(tok.Footprint()) / float64(held)
		t.Logf("%s: footprint %d bytes, the heap holds %d (%.3f×)", name, tok.Footprint(), held, ratio)
		if ratio < 0.9 || ratio > 1.1 {
			t.Errorf("%s: footprint %d bytes against %d on the heap (%.2f×), want within 10%%", name, tok.Footprint(), held, ratio)
		}
		runtime.KeepAlive(tok)
	}
}
