package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: any run config file loads into a configuration that validates, or is refused
// with an error naming the file; nothing panics.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("preset = \"math\"\nmax_steps = 20\n[lora]\nr = 8\ntarget_modules = [\"q_proj\", \"v_proj\"]\n"))
	f.Add([]byte("learning_rate = 5e-4\nloss_type = \"grpo\"\n[monitor]\nkl_max = 0.5\n"))
	f.Add([]byte("num_generations = \"8\"\n"))
	f.Add([]byte("[quant]\ntype = \"fp4\"\nblock_size = 128\n"))
	f.Add(Default().Encode())
	f.Add([]byte("[[rewards]]\nkind = \"command\"\nname = \"short\"\ncommand = [\"python3\", \"r.py\"]\nweight = 0.5\ntimeout = 1.5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "run.toml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted a configuration Validate refuses: %v", err)
		}
		// What a run folder's config.toml holds loads back to the same configuration.
		if err := os.WriteFile(path, c.Encode(), 0o644); err != nil { // as Write, without its fsyncs
			t.Fatal(err)
		}
		c2, err := Load(path)
		if err != nil {
			t.Fatalf("own config.toml refused: %v\n%s", err, c.Encode())
		}
		if c2.Hash() != c.Hash() {
			t.Fatalf("round trip changed the configuration:\n%s\n---\n%s", c.Encode(), c2.Encode())
		}
	})
}
