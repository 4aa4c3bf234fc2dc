package model_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/model"
	"rlhfstation/internal/testmodel"
	"rlhfstation/quant"
)

// TestLoad8B measures what loading an 8B folder costs a run: Llama-3.1-8B's layout in bf16
// (random weights, written once to $RLHFSTATION_8B_DIR when that folder has no config.json),
// quantized to NF4 with double quantization tensor by tensor as it is read. It logs the peak
// resident memory of the load (VmHWM, reset first) and its seconds, the README's figures. It
// needs 16 GB of disk and about 8 GB of memory, so it runs only when asked:
//
//	RLHFSTATION_8B_DIR=/tmp/llama8b go test ./engine/model -run TestLoad8B -v -timeout 30m
func TestLoad8B(t *testing.T) {
	dir := os.Getenv("RLHFSTATION_8B_DIR")
	if dir == "" {
		t.Skip("set RLHFSTATION_8B_DIR to a folder to write (once) and load an 8B-shaped checkpoint")
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t0 := time.Now()
		// Llama-3.1-8B-Instruct's config.json as published, in four shards as it is
		cfg := map[string]any{"architectures": []any{"LlamaForCausalLM"}, "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 128000, "eos_token_id": []any{128001, 128008, 128009}, "hidden_act": "silu", "hidden_size": 4096,
			"initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
			"model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
			"pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": map[string]any{"factor": 8.0, "low_freq_factor": 1.0,
				"high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
			"rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.42.3",
			"use_cache": true, "vocab_size": 128256}
		if err := testmodel.WriteRandomFolder(dir, cfg, 5<<30, 8); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote the 8B folder in %.0f s", time.Since(t0).Seconds())
	}
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): the figure includes what ran before", err)
	}
	before := procStatus(t, "VmRSS")
	opt := quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}
	t0, cpu0 := time.Now(), cpuSeconds()
	m, err := model.LoadWith(dir, model.LoadOptions{Quantize: &opt})
	if err != nil {
		t.Fatal(err)
	}
	secs, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	var size int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
	}
	t.Logf("8B folder (%.2f B parameters, %.1f GB of bf16 files) loaded as NF4 + double quant in %.1f s (%.1f s of CPU); peak RSS %.2f GB (%.2f GB before the load), resident weights %.2f GB",
		float64(m.NumParams())/1e9, float64(size)/1e9, secs, cpu, float64(procStatus(t, "VmHWM"))/1e9, float64(before)/1e9, float64(m.ResidentBytes())/1e9)
}

// procStatus reads a kB field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, field+": %d kB", &kb); err == nil {
			return kb * 1024
		}
	}
	return 0
}

// cpuSeconds is the process's user and system CPU time so far: on a busy machine the wall time
// counts other processes' share.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
