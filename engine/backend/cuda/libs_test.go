package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/memory"
	"rlhfstation/engine/model"
)

// fakeEnv is a file system of the given files and an environment.
func fakeEnv(env map[string]string, files []string, driver int) libEnv {
	return libEnv{
		getenv: func(k string) string { return env[k] },
		exists: func(p string) bool { return slices.Contains(files, p) },
		glob: func(pat string) []string {
			var out []string
			seen := map[string]bool{}
			for _, f := range files {
				for d := f; d != "/" && d != "."; d = filepath.Dir(d) {
					if ok, _ := filepath.Match(pat, d); ok && !seen[d] {
						seen[d] = true
						out = append(out, d)
					}
				}
			}
			return out
		},
		driverVersion: driver,
	}
}

func TestFindLibsNewestFirst(t *testing.T) {
	files := []string{
		"/usr/local/cuda-11.8/lib64/libnvrtc.so.11.2", "/usr/local/cuda-11.8/lib64/libnvrtc-builtins.so.11.8",
		"/usr/local/cuda-12.4/lib64/libnvrtc.so.12", "/usr/local/cuda-12.4/lib64/libnvrtc-builtins.so.12.4",
		"/usr/local/cuda-12.4/lib64/libnvrtc-builtins.so.12.4.127",
		"/usr/local/cuda-12.4/lib64/libcublas.so.12", "/usr/local/cuda-12.4/lib64/libcublasLt.so.12",
		"/usr/local/cuda-12.10/lib64/libnvrtc.so.12", "/usr/local/cuda-12.10/lib64/libnvrtc-builtins.so.12.10",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
	}
	l, err := findLibs(fakeEnv(map[string]string{"VIRTUAL_ENV": "/venv"}, files, 12040))
	if err != nil {
		t.Fatal(err)
	}
	// CUDA 13's NVRTC is passed over on a 12.4 driver; 12.10 sorts after 12.4.
	if l.NVRTC != "/usr/local/cuda-12.10/lib64/libnvrtc.so.12" || l.NVRTCBuiltins != "/usr/local/cuda-12.10/lib64/libnvrtc-builtins.so.12.10" {
		t.Errorf("NVRTC %s, builtins %s", l.NVRTC, l.NVRTCBuiltins)
	}
	if l.CUBLAS != "/usr/local/cuda-12.4/lib64/libcublas.so.12" || l.CUBLASLt != "/usr/local/cuda-12.4/lib64/libcublasLt.so.12" {
		t.Errorf("cuBLAS %s, Lt %s", l.CUBLAS, l.CUBLASLt)
	}
	// A CUDA 13 driver takes the wheel's NVRTC 13.
	l, _ = findLibs(fakeEnv(map[string]string{"VIRTUAL_ENV": "/venv"}, files, 13000))
	if l.NVRTC != "/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13" {
		t.Errorf("with a CUDA 13 driver NVRTC = %s", l.NVRTC)
	}
}

func TestFindLibsWheelsAndOverride(t *testing.T) {
	site := "/home/u/.local/lib/python3.11/site-packages"
	files := []string{site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12", site + "/nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.1",
		site + "/nvidia/cublas/lib/libcublas.so.12", site + "/nvidia/cublas/lib/libcublasLt.so.12",
		"/opt/sim/libnvrtc.so.12", "/opt/sim/libcublas.so.12", "/opt/sim/libcublasLt.so.12"}
	l, err := findLibs(fakeEnv(map[string]string{"HOME": "/home/u"}, files, 12020))
	if err != nil {
		t.Fatal(err)
	}
	if l.NVRTC != site+"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" || l.CUBLAS != site+"/nvidia/cublas/lib/libcublas.so.12" {
		t.Errorf("wheels: %+v", l)
	}
	l, err = findLibs(fakeEnv(map[string]string{"HOME": "/home/u", LibsEnv: "/opt/sim"}, files, 12020))
	if err != nil || l.NVRTC != "/opt/sim/libnvrtc.so.12" || l.NVRTCBuiltins != "" || l.CUBLAS != "/opt/sim/libcublas.so.12" {
		t.Errorf("override: %+v, %v", l, err)
	}
	if c := cudaCandidates(fakeEnv(map[string]string{LibsEnv: "/opt/sim"}, nil, 0)); len(c) != 1 || c[0] != "/opt/sim/libcuda.so.1" {
		t.Errorf("override libcuda candidates %v", c)
	}
}

func TestFindLibsSaysWhereItLooked(t *testing.T) {
	_, err := findLibs(fakeEnv(map[string]string{"CUDA_HOME": "/opt/cuda"}, []string{"/usr/local/cuda/lib64/libnvrtc.so.13"}, 12020))
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.What != "NVRTC" {
		t.Fatalf("err = %v, want NVRTC not found", err)
	}
	msg := err.Error()
	for _, want := range []string{"libnvrtc.so.12", "/opt/cuda/lib64", "/opt/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/lib64",
		"/usr/lib/x86_64-linux-gnu", "skipped as newer than the driver: /usr/local/cuda/lib64/libnvrtc.so.13"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	_, err = findLibs(fakeEnv(nil, []string{"/usr/local/cuda/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libcublas.so.12"}, 0))
	if err == nil || !strings.Contains(err.Error(), "libcublasLt.so.12") {
		t.Errorf("cuBLAS without its Lt: %v", err)
	}
}

func TestParseReport(t *testing.T) {
	log := `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, 4128 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 380 bytes cmem[0]`
	got := parseReport(log)
	want := []KernelReport{{Name: "a", Registers: 40, SpillStores: 4, SpillLoads: 12, StackFrame: 8, Shared: 4128}, {Name: "b", Registers: 10}}
	if !slices.Equal(got, want) {
		t.Fatalf("parseReport = %+v, want %+v", got, want)
	}
}

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int }{{0, 512}, {1, 512}, {513, 1024}, {1 << 20, 1 << 20}, {(1 << 20) + 1, 1<<20 + 1<<18},
		{3 << 20, 3 << 20}, {(3 << 20) + 5, 3<<20 + 1<<19}} {
		if got := sizeClass(c.n); got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// TestEstimateQwen05: the Qwen2.5-0.5B shape of the benchmark (1 prompt × 8 completions of
// 96 tokens, NF4, LoRA r 16 on every linear) needs about 1.5 GiB; 64 completions of 4096
// tokens do not fit a 24 GiB card. The model's buffers are its passes' (model.FootprintOf).
func TestEstimateQwen05(t *testing.T) {
	mc, err := model.ParseConfig([]byte(fmt.Sprintf(memory.Qwen05Config, 24)))
	if err != nil {
		t.Fatal(err)
	}
	shape := func(seqs, seqLen, completion int) RunShape {
		s := RunShape{Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, QDim: 896, KVDim: 128, Hidden: 4864, TiedHead: true,
			LinearParams: 24 * (896*(896+2*128+896) + 3*896*4864), LargestLinear: 896 * 4864, Quantized: true, LoRAParams: 8798208,
			Seqs: seqs, SeqLen: seqLen, Completion: completion}
		f := model.FootprintOf(mc, seqs, seqLen, completion, (&Backend{}).Precision())
		s.Tape, s.Grads, s.Passes, s.KVCache = f.Tape, f.Grads, f.Scratch, f.KVCache
		return s
	}
	e := EstimateMemory(shape(8, 96, 64))
	t.Logf("qwen0.5b, 8×96: %s = %d MiB", e, e.Total()>>20)
	if e.Total() < 1<<30 || e.Total() > 5<<29 {
		t.Errorf("estimate %d MiB, want between 1 and 2.5 GiB", e.Total()>>20)
	}
	if e := EstimateMemory(shape(64, 4096, 2048)); e.Total() < 24<<30 {
		t.Errorf("64 × 4096 tokens estimated at %d MiB, below 24 GiB", e.Total()>>20)
	}
}
