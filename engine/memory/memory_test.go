package memory

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/config"
)

func folder(t *testing.T, cfg string) Model {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const gib = 1 << 30

// Qwen2.5-0.5B at the defaults (4 prompts × 8 completions × 128 tokens, prompts of a
// hundred-odd tokens such as GSM8K's) fits a 24 GB machine, its garbage between collections
// held back by the memory limit (Collect); at max_prompt_length's 512 it does not, and the
// refusal names every key that would make it fit, with values that do.
func TestQwen05DefaultsFit24GB(t *testing.T) {
	m := folder(t, fmt.Sprintf(Qwen05Config, 24))
	c := config.Default()
	avail := int64(22 * gib) // MemAvailable of an idle 24 GB machine
	e := For(m, c, 160)
	t.Logf("qwen2.5-0.5b defaults, 160-token prompts: %.2f GiB, %.2f GiB with no garbage (%s)", float64(e.Total())/gib, float64(e.Least())/gib, e)
	if err := Check(m, c, 160, avail); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if w := float64(e.Weights) / gib; w < 0.4 || w > 0.48 {
		t.Errorf("resident weights %.2f GiB: want the bf16 embeddings (0.25 GiB) and 4-bit linears (0.18 GiB)", w)
	}
	if l := float64(e.Load) / gib; l < 0.4 || l > 0.5 {
		t.Errorf("loading %.2f GiB: want the bf16 embeddings (0.25 GiB), the 4-bit linears (0.18 GiB) and a chunk's bf16 pages", l)
	}
	err := Check(m, c, 0, avail)
	t.Logf("at max_prompt_length 512: %v", err)
	if err == nil {
		t.Fatal("512-token prompts fit?")
	}
	// max_completion_length alone cannot make 512-token prompts fit: it is not named.
	for _, key := range []string{"per_device_train_batch_size = ", "gradient_accumulation_steps = ", "num_generations = ",
		"max_prompt_length = "} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the refusal does not name %s", key)
		}
	}
	// Every value it names fits.
	for _, way := range []struct {
		key string
		set func(*config.Config, int)
	}{
		{"per_device_train_batch_size", func(c *config.Config, v int) { c.PerDeviceTrainBatchSize = v }},
		{"num_generations", func(c *config.Config, v int) { c.NumGenerations = v }},
		{"max_prompt_length", func(c *config.Config, v int) { c.MaxPromptLength = v }},
	} {
		var v int
		if _, err := fmt.Sscanf(err.Error()[strings.Index(err.Error(), way.key+" = "):], way.key+" = %d", &v); err != nil {
			t.Fatalf("%s: %v", way.key, err)
		}
		cc := *c
		way.set(&cc, v)
		if For(m, &cc, 0).Least() > Budget(avail) {
			t.Errorf("%s = %d does not fit", way.key, v)
		}
		way.set(&cc, v+1)
		if For(m, &cc, 0).Least() <= Budget(avail) {
			t.Errorf("%s = %d is not the largest that fits", way.key, v)
		}
	}
}

// A model too large to load names no run setting.
func TestModelAloneTooLarge(t *testing.T) {
	m := folder(t, fmt.Sprintf(Qwen05Config, 24))
	err := Check(m, config.Default(), 16, gib/4) // loading takes about 0.5 GiB
	if err == nil || !strings.Contains(err.Error(), "the model alone does not fit while loading") {
		t.Fatalf("%v", err)
	}
}

// [quant] head: Qwen2.5-0.5B's tied bf16 embedding and head (one tensor, 151,936 × 896) held
// as NF4 with double quantization instead: half a byte a value, an 8-bit absmax a block of 64,
// a float32 scale a 256 blocks (and the offset).
func TestQuantizedHead(t *testing.T) {
	m := folder(t, fmt.Sprintf(Qwen05Config, 24))
	c := config.Default()
	e0 := For(m, c, 160)
	c.Quant.Head = true
	e1 := For(m, c, 160)
	n := int64(151936 * 896)
	want := 2*n - (n/2 + n/64 + 4*n/(64*256) + 4)
	if d := e0.Weights - e1.Weights; d < want*99/100 || d > want*101/100 {
		t.Errorf("the 4-bit head saves %d bytes of weights, want %d", d, want)
	}
	if e1.Total() >= e0.Total() {
		t.Errorf("total %d with the 4-bit head, %d without", e1.Total(), e0.Total())
	}
}
