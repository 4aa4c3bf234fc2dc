package check

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/model"
	"rlhfstation/internal/testref"
)

// sparseFolder lays out dir as the published folder src (its metadata files) with shards of
// the exact tensor names and shapes in bf16, whose headers are real and whose data are holes:
// check reads headers only, so a sparse 16 GB folder is as good as a written one.
func sparseFolder(b testing.TB, src, dir string, shards int) {
	b.Helper()
	for _, name := range []string{"config.json", "generation_config.json", "tokenizer_config.json", "chat_template.jinja"} {
		if raw, err := os.ReadFile(filepath.Join(src, name)); err == nil {
			if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	c, err := model.LoadConfig(dir)
	if err != nil {
		b.Fatal(err)
	}
	layout := model.Layout(c)
	weightMap, total := map[string]string{}, int64(0)
	per := (len(layout) + shards - 1) / shards
	for s := 0; s < shards; s++ {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
		var off int64
		for _, ts := range layout[s*per : min((s+1)*per, len(layout))] {
			n := int64(2)
			for _, d := range ts.Shape {
				n *= int64(d)
			}
			header[ts.Name] = map[string]any{"dtype": "BF16", "shape": ts.Shape, "data_offsets": []int64{off, off + n}}
			off += n
			weightMap[ts.Name] = file
		}
		h, _ := json.Marshal(header)
		for len(h)%8 != 0 {
			h = append(h, ' ')
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			b.Fatal(err)
		}
		binary.Write(f, binary.LittleEndian, uint64(len(h)))
		f.Write(h)
		if err := f.Truncate(8 + int64(len(h)) + off); err != nil {
			b.Fatal(err)
		}
		f.Close()
		total += off
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCheck8B: check on an 8B folder (Qwen3-8B's published metadata, its real
// tokenizer.json, five bf16 shards of the exact layout) reads headers only; it prints the
// seconds per check, which must stay under 1. The anchor is reading the tokenizer alone.
func BenchmarkCheck8B(b *testing.B) {
	src := filepath.Join(testref.SharedData(b, "checkpoints"), "Qwen__Qwen3-8B")
	tok := testref.SharedData(b, "tokenizers/qwen3/tokenizer.json")
	dir := b.TempDir()
	sparseFolder(b, src, dir, 5)
	raw, err := os.ReadFile(tok)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var r *Report
	cpu0, start := cpuSeconds(), time.Now()
	for i := 0; i < b.N; i++ {
		if r, err = Folder(dir, 64<<30); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start).Seconds() / float64(b.N)
	cpu := (cpuSeconds() - cpu0) / float64(b.N)
	if r.Weights.Params < 8e9 || r.Weights.TotalSize != r.Weights.Bytes || r.Weights.Count != 399 {
		b.Fatalf("weights: %+v", r.Weights)
	}
	b.ReportMetric(per, "s/check")
	b.ReportMetric(cpu, "cpu-s/check")
	b.Logf("check on an 8B folder (%d parameters, %.1f GB of bf16 shards): %.3f s wall, %.3f s of CPU (target < 1 s; the wall time counts other processes' share of a busy machine)",
		r.Weights.Params, float64(r.Weights.Bytes)/1e9, per, cpu)
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// TestCheckSparseFolder: Llama-3.2-3B's published metadata with shards of its exact layout
// (headers real, data sparse) passes check: every tensor found with its shape, the headers'
// bytes equal to the index's total_size, the head tied (no lm_head.weight).
func TestCheckSparseFolder(t *testing.T) {
	src := filepath.Join(testref.SharedData(t, "checkpoints"), "meta-llama__Llama-3.2-3B-Instruct")
	dir := t.TempDir()
	sparseFolder(t, src, dir, 2)
	r, err := Folder(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := r.Weights
	if len(w.Absent) != 0 || w.Bytes != w.TotalSize || w.Bytes != 2*w.Params || !w.TiedHead || w.Count != 254 || len(w.Unused) != 0 {
		t.Fatalf("weights %+v", w)
	}
	if w.Params != 3212749824 { // the published index: total_size 6425499648 bytes of bf16
		t.Errorf("%d parameters, want 3212749824", w.Params)
	}
}
