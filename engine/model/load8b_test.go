package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

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
	c := Config{ModelType: "llama", Vocab: 128256, Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128,
		Hidden: 14336, MaxPos: 131072, NormEps: 1e-5, RopeTheta: 500000, BOS: 128000, EOS: []int{128001, 128009},
		RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPos: 8192}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t0 := time.Now()
		writeRandomBF16(t, dir, &c, 4)
		t.Logf("wrote the 8B folder in %.0f s", time.Since(t0).Seconds())
	}
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v): the figure includes what ran before", err)
	}
	before := procStatus(t, "VmRSS")
	opt := quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}
	t0, cpu0 := time.Now(), cpuSeconds()
	m, err := LoadWith(dir, LoadOptions{Quantize: &opt})
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

// writeRandomBF16 writes config.json and shards of c's layout in bf16, streamed: values of
// magnitude 1/64 to 1/32 with random signs and mantissas, never the whole model in memory.
func writeRandomBF16(t *testing.T, dir string, c *Config, shards int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.MarshalIndent(c.hfJSON(), "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	layout := Layout(c)
	var total int64
	for _, ts := range layout {
		total += 2 * int64(numel(ts.Shape))
	}
	weightMap := map[string]string{}
	rng := rand.New(rand.NewPCG(8, 8))
	i := 0
	for s := 0; s < shards; s++ {
		file := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
		var off int64
		start := i
		for ; i < len(layout) && (off < total/int64(shards) || s == shards-1); i++ {
			n := 2 * int64(numel(layout[i].Shape))
			header[layout[i].Name] = map[string]any{"dtype": "BF16", "shape": layout[i].Shape, "data_offsets": []int64{off, off + n}}
			weightMap[layout[i].Name] = file
			off += n
		}
		h, _ := json.Marshal(header)
		for len(h)%8 != 0 {
			h = append(h, ' ')
		}
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<22)
		binary.Write(w, binary.LittleEndian, uint64(len(h)))
		w.Write(h)
		var buf [8]byte
		for _, ts := range layout[start:i] {
			n := numel(ts.Shape)
			norm := strings.HasSuffix(ts.Name, "norm.weight")
			for j := 0; j < n; j += 4 {
				r := rng.Uint64()
				for k := 0; k < 4 && j+k < n; k++ {
					v := uint16(r>>(16*k)) & 0x807f // sign and mantissa
					v |= (127 - 6) << 7             // times 2^-6
					if norm {
						v = 0x3f80 // 1.0
					}
					binary.LittleEndian.PutUint16(buf[2*k:], v)
				}
				w.Write(buf[:2*min(4, n-j)])
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
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
