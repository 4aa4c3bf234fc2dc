package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

// checkDoc is the part of check --json the tests read.
type checkDoc struct {
	ModelType string `json:"model_type"`
	Sources   []struct {
		Name  string `json:"name"`
		Value any    `json:"value"`
		From  string `json:"from"`
	} `json:"sources"`
	Weights struct {
		Params    int64    `json:"parameters"`
		TotalSize int64    `json:"total_size"`
		Absent    []string `json:"absent"`
	} `json:"weights"`
	Tokenizer *struct {
		Tokens int `json:"tokens"`
	} `json:"tokenizer"`
	Template *struct {
		Example string `json:"example"`
	} `json:"chat_template"`
	Memory struct {
		Total int64 `json:"total_bytes"`
		Fits  []struct {
			Device string `json:"device"`
			Fits   bool   `json:"fits"`
			Advice string `json:"advice"`
		} `json:"devices"`
	} `json:"memory"`
	Warnings []string `json:"warnings"`
}

func runCheckJSON(t *testing.T, dir string) checkDoc {
	t.Helper()
	code, stdout, stderr := runCaptured(t, "check", "--model", dir, "--json")
	if code != 0 {
		t.Fatalf("check %s: exit %d: %s", dir, code, stderr)
	}
	var d checkDoc
	if err := json.Unmarshal([]byte(stdout), &d); err != nil {
		t.Fatalf("check --json is not one JSON document: %v\n%s", err, stdout)
	}
	return d
}

func (d checkDoc) source(name string) (any, string) {
	for _, s := range d.Sources {
		if s.Name == name {
			return s.Value, s.From
		}
	}
	return nil, ""
}

// TestCheckPublishedFolders: every published folder of ../shared/data/checkpoints passes
// check (metadata only: the absent shards are a warning), with the values and the files they
// come from, the layout's parameter count within 0.1% of the index's total_size at 2 bytes a
// parameter (bf16), a rendered template, and a default run's
// memory for each device.
func TestCheckPublishedFolders(t *testing.T) {
	root := testref.SharedData(t, "checkpoints")
	want := map[string]struct {
		modelType     string
		bytesPerParam float64 // 0: no index
		eos           string
		eosFrom       string
	}{
		"HuggingFaceTB__SmolLM3-3B":           {"smollm3", 2, "[128012]", "generation_config.json"},
		"Qwen__Qwen3-8B":                      {"qwen3", 0, "[151645 151643]", "generation_config.json"},
		"google__gemma-2b-it":                 {"gemma", 2, "[1]", "generation_config.json"},
		"meta-llama__Llama-3.2-1B-Instruct":   {"llama", 0, "[128001 128008 128009]", "generation_config.json"},
		"meta-llama__Llama-3.2-3B-Instruct":   {"llama", 2, "[128001 128008 128009]", "generation_config.json"},
		"microsoft__Phi-3-mini-128k-instruct": {"phi3", 2, "[32000 32001 32007]", "generation_config.json"},
		"mistralai__Mistral-7B-Instruct-v0.3": {"mistral", 2, "[2]", "generation_config.json"},
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		seen++
		w, ok := want[e.Name()]
		if !ok {
			t.Errorf("%s: a published folder this test does not know: add what check must say of it", e.Name())
			continue
		}
		t.Run(e.Name(), func(t *testing.T) {
			d := runCheckJSON(t, filepath.Join(root, e.Name()))
			if d.ModelType != w.modelType {
				t.Errorf("model_type %q, want %q", d.ModelType, w.modelType)
			}
			if v, from := d.source("eos_token_id"); strings.ReplaceAll(strings.Trim(jsonText(v), "[]"), ",", " ") != strings.Trim(w.eos, "[]") || !strings.HasPrefix(from, w.eosFrom) {
				t.Errorf("eos %v from %q, want %s from %s", v, from, w.eos, w.eosFrom)
			}
			if w.bytesPerParam > 0 {
				ratio := float64(d.Weights.TotalSize) / float64(d.Weights.Params) / w.bytesPerParam
				if ratio < 0.999 || ratio > 1.001 {
					t.Errorf("the layout's %d parameters against total_size %d: ratio %.4f of %g bytes each", d.Weights.Params, d.Weights.TotalSize, ratio, w.bytesPerParam)
				}
			}
			if len(d.Weights.Absent) == 0 || !strings.Contains(strings.Join(d.Warnings, "\n"), "weights absent") {
				t.Errorf("metadata only, yet no warning about the weights: %v", d.Warnings)
			}
			if d.Template == nil || !strings.Contains(d.Template.Example, "What is 7 times 8?") {
				t.Errorf("chat template rendering: %+v", d.Template)
			}
			if d.Memory.Total <= 0 || len(d.Memory.Fits) < 3 {
				t.Errorf("memory: %+v", d.Memory)
			}
			for _, f := range d.Memory.Fits {
				if !f.Fits && f.Advice == "" {
					t.Errorf("%s does not fit and check says nothing to lower", f.Device)
				}
			}
		})
	}
	if seen != len(want) {
		t.Errorf("%d folders, want %d", seen, len(want))
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCheckDoubleBOS: Mistral's template writes <s> and its tokenizer adds <s> too: check says
// a rendered prompt encoded with special tokens starts with two BOS.
func TestCheckDoubleBOS(t *testing.T) {
	src := filepath.Join(testref.SharedData(t, "checkpoints"), "mistralai__Mistral-7B-Instruct-v0.3")
	tokPath := testref.SharedData(t, "tokenizers/mistral/tokenizer.json")
	dir := t.TempDir()
	for _, name := range []string{"config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json"} {
		copyFile(t, filepath.Join(src, name), filepath.Join(dir, name))
	}
	copyFile(t, tokPath, filepath.Join(dir, "tokenizer.json"))
	d := runCheckJSON(t, dir)
	if d.Tokenizer == nil || d.Tokenizer.Tokens != 32000 {
		t.Fatalf("tokenizer: %+v", d.Tokenizer)
	}
	if !strings.Contains(strings.Join(d.Warnings, "\n"), "two BOS") {
		t.Errorf("no double-BOS warning: %v", d.Warnings)
	}
	code, stdout, _ := runCaptured(t, "check", "--model", dir)
	if code != 0 || !strings.Contains(stdout, "| <s>[INST] What is 7 times 8? [/INST]") || !strings.Contains(stdout, "gpu 80 GB") {
		t.Errorf("check's text: exit %d\n%s", code, stdout)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
