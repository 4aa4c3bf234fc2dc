package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzStateFiles: any adapter_config.json and trainer_state.json are read or refused with
// an error naming the file; nothing panics.
func FuzzStateFiles(f *testing.F) {
	f.Add([]byte(`{"peft_type":"LORA","r":16,"lora_alpha":32,"target_modules":["q_proj","v_proj"],"rank_pattern":{"q_proj":8}}`))
	f.Add([]byte(`{"r":8,"lora_alpha":16,"target_modules":"all-linear","use_rslora":true}`))
	f.Add([]byte(`{"global_step":20,"epoch":0.03,"log_history":[{"loss":0.1,"step":10}],"best_metric":null}`))
	f.Add([]byte(`{"r":"8"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		for _, name := range []string{AdapterConfigFile, TrainerStateFile} {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			var err error
			if name == AdapterConfigFile {
				var c AdapterConfig
				if c, err = ReadAdapterConfig(path); err == nil && (c.R <= 0 || c.Scale() != c.Scale()) {
					t.Fatalf("accepted r %d, scale %v", c.R, c.Scale())
				}
			} else {
				_, err = ReadTrainerState(path)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name %s: %v", name, err)
			}
		}
	})
}
