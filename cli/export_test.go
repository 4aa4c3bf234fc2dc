package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// export of the built-in math run, by RUN_DIR's config.toml and by --config: the files, the
// mapping table on stdout (or --json), the versions named.
func TestExportCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "math.toml")
	os.WriteFile(cfg, []byte("preset = \"math\"\n"), 0o644)
	out := filepath.Join(dir, "verl")
	code, stdout, stderr := runCaptured(t, "export", "--to", "verl", "--config", cfg, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"| num_generations | actor_rollout_ref.rollout.n | 8 |", "## No equivalent in verl", "targets verl 0.7.0", "rlhfstation serve-reward --preset math"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	for _, f := range []string{"train.parquet", "reward.py", "launch.sh", "mapping.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	// A run folder: its config.toml, its newest checkpoint as the adapter.
	run := filepath.Join(dir, "runs", "20260101-000000-math")
	os.MkdirAll(filepath.Join(run, "checkpoints", "step-000050"), 0o755)
	os.MkdirAll(filepath.Join(run, "checkpoints", "step-000100"), 0o755)
	os.WriteFile(filepath.Join(run, "config.toml"), []byte("preset = \"math\"\nmax_steps = 100\n"), 0o644)
	code, stdout, stderr = runCaptured(t, "export", "--to", "openrlhf", run, "--out", filepath.Join(dir, "o"), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc struct {
		Engine, Version string
		Files           []string
		Unmapped        []struct{ Ours, Value, Note string } `json:"unmapped"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if doc.Engine != "openrlhf" || doc.Version != "OpenRLHF 0.11.0" || strings.Join(doc.Files, ",") != "train.jsonl,launch.sh,mapping.md" {
		t.Errorf("%+v", doc)
	}
	found := false
	for _, u := range doc.Unmapped {
		if u.Ours == "init_adapter" && strings.HasSuffix(u.Value, "step-000100") && strings.Contains(u.Note, "rlhfstation merge") {
			found = true
		}
	}
	if !found {
		t.Errorf("the checkpoint to start from is not listed with its reason: %+v", doc.Unmapped)
	}

	for _, bad := range [][]string{
		{"export", "--out", out, "--config", cfg},                      // no --to
		{"export", "--to", "deepspeed", "--out", out, "--config", cfg}, // unknown engine
		{"export", "--to", "trl", "--config", cfg},                     // no --out
		{"export", "--to", "trl", "--out", out, dir},                   // not a run folder
	} {
		if code, _, stderr := runCaptured(t, bad...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, %q", bad, code, stderr)
		}
	}
	if code, _, _ := runCaptured(t, "export", "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}
