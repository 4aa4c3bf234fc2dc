package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPresetsCommand(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	var out, errOut bytes.Buffer
	if err := listPresets(&out, &errOut, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"story            built-in  0.1/0.3/0.6 ×1 step", "code", "technical",
		"math             built-in  0.2/0.3/0.5 ×1 step, reasoning  ntl ×1 (final_answer, wasserstein, tau 1), correctness ×1 (flexible)    Math word problems: perplexity of the reasoning (not the final #### line)",
		"math-aggressive  built-in  0.2/0.3/0.5 ×1 step, reasoning  ntl ×1 (final_answer, wasserstein, tau 0.5), correctness ×1 (flexible)",
		"math-forgiving   built-in  0.2/0.3/0.5 ×1 step, reasoning  ntl ×1 (final_answer, wasserstein, tau 2), correctness ×1 (flexible)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	dir := filepath.Join(cfg, "rlhfstation", "presets")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "story.toml"), []byte("description = \"mine\"\n[ppl]\nword = 1\n[format]\nweight = 0.5\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.toml"), []byte("[ppl]\nword = 1\nwurd = 2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "sched.toml"), []byte("extends = \"math\"\n[ntl]\nmode = \"hybrid\"\ntemperature_schedule = \"linear\"\ntau_end = 0.25\n"), 0o644)
	out.Reset()
	errOut.Reset()
	err := listPresets(&out, &errOut, true)
	if err == nil || !strings.Contains(errOut.String()+err.Error(), "1 preset file(s) failed") {
		t.Errorf("broken user preset: err %v", err)
	}
	var doc struct {
		Presets []struct {
			Name, Source, Error string
			Overrides           bool           `json:"overrides_built_in"`
			Rewards             map[string]any `json:"rewards"`
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, out.String())
	}
	if len(doc.Presets) != 9 || doc.Presets[0].Source != filepath.Join(dir, "story.toml") || !doc.Presets[0].Overrides || doc.Presets[0].Rewards["format"] == nil {
		t.Errorf("presets %+v", doc.Presets)
	}
	if p := doc.Presets[7]; p.Name != "bad" || !strings.Contains(p.Error, "bad.toml:3: unknown key \"ppl.wurd\"") {
		t.Errorf("bad preset entry %+v", p)
	}
	if p := doc.Presets[8]; p.Name != "sched" || p.Rewards["ntl"].(map[string]any)["temperature_schedule"] != "linear" || p.Rewards["ntl"].(map[string]any)["tau_end"] != 0.25 {
		t.Errorf("sched preset entry %+v", p)
	}
	out.Reset()
	listPresets(&out, &errOut, false)
	if want := "ntl ×1 (hybrid 0.2, wasserstein, tau 1→0.25 linear)"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
}
