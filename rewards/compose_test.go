package rewards

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/internal/stats"
)

type fixed struct {
	name   string
	values []float64
}

func (f fixed) Name() string { return f.name }
func (f fixed) Score(s []Sample) ([]float64, map[string]float64, error) {
	return f.values, map[string]float64{f.name + "/extra": 7}, nil
}

func TestCompose(t *testing.T) {
	nan := math.NaN()
	funcs := []Weighted{
		{fixed{"a", []float64{1, 0, nan, 0.5}}, 2},
		{fixed{"b", []float64{nan, 1, nan, 0.25}}, 0.5},
	}
	res, err := Compose(funcs, make([]Sample, 4))
	if err != nil {
		t.Fatal(err)
	}
	// r = 2·a + 0.5·b, skipping NaN; a sample no function applies to gets 0.
	want := []float64{2, 0.5, 0, 1.125}
	for i := range want {
		near(t, "total", res.Total[i], want[i])
	}
	// a: 1, 0, 0.5 → mean 0.5, sample std 0.5; b: 1, 0.25 → mean 0.625, std 0.53033.
	near(t, "rewards/a/mean", res.Metrics["rewards/a/mean"], 0.5)
	near(t, "rewards/a/std", res.Metrics["rewards/a/std"], 0.5)
	near(t, "rewards/b/mean", res.Metrics["rewards/b/mean"], 0.625)
	near(t, "rewards/b/std", res.Metrics["rewards/b/std"], math.Sqrt(2*0.375*0.375))
	if res.Metrics["a/extra"] != 7 || len(res.ByFunc["b"]) != 4 {
		t.Errorf("metrics %v", res.Metrics)
	}
	if _, err := Compose([]Weighted{funcs[0], funcs[0]}, make([]Sample, 4)); err == nil {
		t.Error("a function used twice: no error")
	}
	if _, err := Compose(funcs, make([]Sample, 3)); err == nil {
		t.Error("wrong value count: no error")
	}
	m, s := stats.NaNMeanStd([]float64{nan, nan})
	if !math.IsNaN(m) || !math.IsNaN(s) {
		t.Error("all NaN: want NaN mean and std")
	}
}

func TestComposePresetFunctions(t *testing.T) {
	samples := []Sample{
		{Completion: "so 5\n#### 5", Answer: "#### 5", Spans: []Span{{0, 2}, {2, 4}, {4, 11}}, NLL: []float64{1, 1, 1}},
		{Completion: "#### 6", Answer: "5", Spans: []Span{{0, 6}}, NLL: []float64{1}},
		{Completion: "maybe 5", Spans: []Span{{0, 7}}, NLL: []float64{1}},
	}
	res, err := Compose([]Weighted{
		{Correctness{Flexible}, 1},
		{Format{}, 0.5},
	}, samples)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1.5, 0.5, 0} // the third has no answer: correctness not applicable
	for i := range want {
		near(t, "total", res.Total[i], want[i])
	}
	if !math.IsNaN(res.ByFunc["correctness"][2]) {
		t.Error("correctness without an answer should be NaN")
	}
	near(t, "rewards/correctness/mean", res.Metrics["rewards/correctness/mean"], 0.5)
	near(t, "rewards/format/mean", res.Metrics["rewards/format/mean"], 2.0/3)
}

func TestComputeBaselines(t *testing.T) {
	b, err := ComputeBaselines([]Levels{{1, 2, 4}, {4, 8, 16}, {0, 0, 0}, {math.NaN(), 1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if b.Samples != 2 {
		t.Errorf("samples %d, want 2 (no-word samples left out)", b.Samples)
	}
	// Geometric means: √(1·4) = 2, √(2·8) = 4, √(4·16) = 8.
	near(t, "B_word", b.Levels.Word, 2)
	near(t, "B_phrase", b.Levels.Phrase, 4)
	near(t, "B_sentence", b.Levels.Sentence, 8)
	near(t, "std word", b.Std.Word, math.Sqrt(4.5))
	// Percentiles by linear interpolation between 1 and 4.
	near(t, "p5", b.Percentiles.Word.P5, 1.15)
	near(t, "p50", b.Percentiles.Word.P50, 2.5)
	near(t, "p95", b.Percentiles.Sentence.P95, 4+0.95*12)

	one, _ := ComputeBaselines([]Levels{{3, 3, 3}})
	if one.Std.Word != 0 || one.Percentiles.Word.P95 != 3 {
		t.Errorf("one sample: %+v", one)
	}
	if _, err := ComputeBaselines([]Levels{{0, 0, 0}}); err == nil {
		t.Error("no usable sample: no error")
	}
}

func TestBaselinesFile(t *testing.T) {
	dir := t.TempDir()
	b, _ := ComputeBaselines([]Levels{{10, 12, 14}, {20, 22, 24}})
	b.ModelHash, b.TokenizerHash, b.Source = "sha256:aaaa", "sha256:bbbb", "data.txt"
	path := filepath.Join(dir, "baselines.json")
	if err := b.Save(path); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	got, err := LoadBaselines(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Levels != b.Levels || got.Percentiles != b.Percentiles || got.ModelHash != "sha256:aaaa" || got.Samples != 2 {
		t.Errorf("round trip: %+v, want %+v", got, b)
	}
	var raw map[string]any
	data, _ := os.ReadFile(path)
	json.Unmarshal(data, &raw)
	for _, k := range []string{"baselines", "samples", "std", "percentiles", "model_hash", "tokenizer_hash", "created", "source"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("baselines.json lacks %q", k)
		}
	}

	if w, err := got.Check("sha256:aaaa", "sha256:bbbb", false); err != nil || w != "" {
		t.Errorf("matching hashes: %q %v", w, err)
	}
	_, err = got.Check("sha256:cccc", "sha256:bbbb", false)
	if !errors.Is(err, ErrBaselinesMismatch) || !strings.Contains(err.Error(), "model") || !strings.Contains(err.Error(), "--accept-baselines") {
		t.Errorf("model mismatch: %v", err)
	}
	_, err = got.Check("sha256:aaaa", "sha256:dddd", false)
	if err == nil || !strings.Contains(err.Error(), "tokenizer") {
		t.Errorf("tokenizer mismatch: %v", err)
	}
	if w, err := got.Check("sha256:cccc", "sha256:bbbb", true); err != nil || !strings.Contains(w, "--accept-baselines") {
		t.Errorf("accepted mismatch: %q %v", w, err)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\n  \"format\": \"rlhfstation-baselines/1\",\n  \"samples\": x\n}"), 0o644)
	if _, err := LoadBaselines(bad); err == nil || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("bad JSON: %v", err)
	}
	os.WriteFile(bad, []byte(`{"format": "rlhfstation-baselines/1", "baselines": {"word": 0, "phrase": 1, "sentence": 1}, "samples": 1}`), 0o644)
	if _, err := LoadBaselines(bad); err == nil || !strings.Contains(err.Error(), "word") {
		t.Errorf("zero baseline: %v", err)
	}
}

func TestContentHash(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("ab"), 0o644)
	os.WriteFile(b, []byte("c"), 0o644)
	h1, err := ContentHash(a, b)
	if err != nil || !strings.HasPrefix(h1, "sha256:") || len(h1) != 7+64 {
		t.Fatalf("%q %v", h1, err)
	}
	os.WriteFile(a, []byte("a"), 0o644)
	os.WriteFile(b, []byte("bc"), 0o644)
	h2, _ := ContentHash(a, b)
	if h1 == h2 {
		t.Error("different splits of the same bytes hash the same")
	}
	if _, err := ContentHash(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
}

func TestSplitChunks(t *testing.T) {
	// "aa bb cc dd" as tokens "a","a"," b","b"," c","c"," d","d".
	text, spans := tok(t, []string{"a", "a", " b", "b", " c", "c", " d", "d"}, make([]float64, 8))
	got := SplitChunks(text, spans, 3)
	want := []Chunk{{0, 2}, {2, 4}, {4, 6}, {6, 8}}
	if len(got) != len(want) {
		t.Fatalf("chunks %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chunks %v, want %v", got, want)
		}
	}
	// One long word: cut at the limit.
	text, spans = tok(t, []string{"x", "y", "z", "w", "v"}, make([]float64, 5))
	if got := SplitChunks(text, spans, 2); len(got) != 3 || got[2] != (Chunk{4, 5}) {
		t.Errorf("long word chunks %v", got)
	}
	if got := SplitChunks("", nil, 256); len(got) != 0 {
		t.Errorf("empty: %v", got)
	}
}

func TestFolderHashes(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"config.json": "{}", "model-00002.safetensors": "b", "model-00001.safetensors": "a", "tokenizer.json": "tok"} {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
	}
	m, tk, err := FolderHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ContentHash(filepath.Join(dir, "config.json"), filepath.Join(dir, "model-00001.safetensors"), filepath.Join(dir, "model-00002.safetensors"))
	// sha256("tok")
	if m != want || tk != "sha256:1a7674eb4ee78df7e1ac439a93c3fa8e3c945784d4dec9fd8e3011738b2f1d62" {
		t.Errorf("hashes %s %s", m, tk)
	}
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if _, _, err := FolderHashes(dir); err == nil {
		t.Error("no tokenizer.json: no error")
	}
}
