package cli

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/internal/testmodel"
	"rlhfstation/safetensors"
)

// bnbDir writes SmolLM2-135M-Instruct's published layout at a test's size (shrink) as a
// bitsandbytes 4-bit folder (testmodel.WriteBnb4bitFolder) with the test tokenizer.
func bnbDir(t *testing.T, skip []string) (string, []string) {
	t.Helper()
	src := filepath.Join(testmodel.Dir(t), "tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fourBit, err := testmodel.WriteBnb4bitFolder(dir, shrink(testmodel.PublishedLayouts()["SmolLM2-135M-Instruct"], tok.VocabSize()), skip, 3)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, src, filepath.Join(dir, "tokenizer.json"))
	return dir, fourBit
}

// TestQuantizeWritesBnb4bitLayout: `quantize` writes a folder key for key as bitsandbytes and
// transformers do (testmodel.WriteBnb4bitFolder's sources: bitsandbytes 0.50's
// QuantState.as_dict(packed=True) and Linear4bit._save_to_state_dict, transformers'
// quantization_config): the same tensor names, dtypes and shapes, the same safetensors
// metadata, the packed quant state JSON with the same keys in the same order and formatting
// (its nested_offset aside, which depends on the weights), and the same quantization_config.
func TestQuantizeWritesBnb4bitLayout(t *testing.T) {
	ref, _ := bnbDir(t, nil)
	src := publishedDir(t, testmodel.PublishedLayouts()["SmolLM2-135M-Instruct"])
	out := filepath.Join(t.TempDir(), "q")
	if code, _, errOut := runCaptured(t, "quantize", "--model", src, "--out", out); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errOut)
	}
	open := func(dir string) *safetensors.File {
		f, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFile))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	want, got := open(ref), open(out)
	if !slices.Equal(got.Names(), want.Names()) {
		t.Fatalf("tensors\n got %v\nwant %v", got.Names(), want.Names())
	}
	if !maps.Equal(got.Metadata, want.Metadata) {
		t.Errorf("safetensors metadata %v, want %v", got.Metadata, want.Metadata)
	}
	offset := regexp.MustCompile(`"nested_offset": [-0-9.e]+\}$`)
	states := 0
	for _, name := range want.Names() {
		w, _ := want.Info(name)
		g, _ := got.Info(name)
		state := strings.Contains(name, ".quant_state.bitsandbytes__") // [its JSON's length]
		if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) && !state {
			t.Errorf("%s: %s %v, want %s %v", name, g.DType, g.Shape, w.DType, w.Shape)
		}
		if !state {
			continue
		}
		gb, _ := got.Bytes(name)
		wb, _ := want.Bytes(name)
		if !slices.Equal(g.Shape, []int{len(gb)}) || !offset.Match(gb) ||
			offset.ReplaceAllString(string(gb), "") != offset.ReplaceAllString(string(wb), "") {
			t.Errorf("%s:\n got %s\nwant %s", name, gb, wb)
		}
		states++
	}
	if states != 2*7 {
		t.Errorf("%d quant states, want 14", states)
	}
	qc := func(dir string) any {
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		return c["quantization_config"]
	}
	if g, w := qc(out), qc(ref); !reflect.DeepEqual(g, w) {
		t.Errorf("quantization_config\n got %v\nwant %v", g, w)
	}
}

// TestBnb4bitSkipModules: a 4-bit folder whose llm_int8_skip_modules names modules the text
// model lacks (unsloth's list: lm_head, multi_modal_projector, merger, modality_projection,
// vision_tower, mlp.gate) and one it has (model.layers.1.mlp, as unsloth's dynamic 4-bit folders
// skip whole blocks' modules) loads as a run loads it: the skipped linears stay 16-bit with
// the file's values (not quantized at load, as [quant] would otherwise ask), the others use
// the file's 4-bit codes; check counts them, and --batch runs on it.
func TestBnb4bitSkipModules(t *testing.T) {
	skip := []string{"lm_head", "multi_modal_projector", "merger", "modality_projection", "vision_tower", "mlp.gate", "model.layers.1.mlp"}
	dir, fourBit := bnbDir(t, skip)
	if len(fourBit) != 2*7-3 {
		t.Fatalf("%d linears 4-bit, want 11", len(fourBit))
	}
	sameCodes(t, dir, fourBit)
	m, _, err := engine.LoadModelQuantized(dir, config.Default().Quant)
	if err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	dense := 0
	for _, l := range m.Linears() {
		d, ok := l.W.(*model.Dense)
		if !ok {
			continue
		}
		if !strings.HasPrefix(l.Name, "model.layers.1.mlp.") {
			t.Errorf("%s: dense, but not a skipped module", l.Name)
		}
		file, _, err := set.Float32(l.Name + ".weight")
		if err != nil || !slices.Equal(file, d.W) {
			t.Errorf("%s: the 16-bit values differ from the file's (%v)", l.Name, err)
		}
		dense++
	}
	if dense != 3 {
		t.Errorf("%d dense linears, want the 3 of model.layers.1.mlp", dense)
	}
	code, out, errOut := runCaptured(t, "check", "--model", dir)
	if code != 0 || !strings.Contains(out, "11 linears 4-bit") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, errOut = runCaptured(t, "--batch", "--model", dir, "--data", data, "--out", t.TempDir(), "--steps", "2", "--batch-size", "1",
		"--num-generations", "2", "--max-completion-length", "4", "--run-name", "r", "--device", "cpu")
	if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
		t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestBnb4bitHead: a bitsandbytes folder of an untied model whose quantization_config lists
// skipped modules without lm_head (transformers then quantizes the head too) holds lm_head as
// packed codes and its quant state; it loads as the 4-bit head (the file's codes, never
// expanded), check says so, and generate and --batch run on it.
func TestBnb4bitHead(t *testing.T) {
	src := filepath.Join(testmodel.Dir(t), "tokenizer.json")
	tok, err := tokenizer.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := shrink(testmodel.PublishedLayouts()["SmolLM2-135M-Instruct"], tok.VocabSize())
	cfg["tie_word_embeddings"] = false
	fourBit, err := testmodel.WriteBnb4bitFolder(dir, cfg, []string{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, src, filepath.Join(dir, "tokenizer.json"))
	if !slices.Contains(fourBit, "lm_head.weight") || len(fourBit) != 2*7+1 {
		t.Fatalf("4-bit weights %v: want the 14 linears and lm_head", fourBit)
	}
	sameCodes(t, dir, fourBit)
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.HeadQ == nil || m.Head != nil || m.Embed == nil {
		t.Fatal("lm_head is not held as the folder's 4-bit weight")
	}
	code, out, errOut := runCaptured(t, "check", "--model", dir)
	if code != 0 || !strings.Contains(out, "14 linears 4-bit, lm_head 4-bit") {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCaptured(t, "generate", "--model", dir, "--max-new-tokens", "5", "--temperature", "0", "--device", "cpu", "Once upon a time")
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("generate: exit %d\n%s\n%s", code, out, errOut)
	}
	data := filepath.Join(t.TempDir(), "prompts.txt")
	if err := os.WriteFile(data, []byte("Once upon a time\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, errOut = runCaptured(t, "--batch", "--model", dir, "--data", data, "--out", t.TempDir(), "--steps", "2", "--batch-size", "1",
		"--num-generations", "2", "--max-completion-length", "4", "--run-name", "r", "--device", "cpu")
	if code != 0 || !strings.Contains(out, "run r completed after 2 steps") {
		t.Fatalf("--batch: exit %d\n%s\n%s", code, out, errOut)
	}
}
