package cuda

import (
	"errors"
	"fmt"
	"go/format"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/internal/testref"
)

// NVIDIA's own libraries, as .ci/cuda-libs unpacks them from Debian's non-free component:
// NVRTC 11.8 and the 535 driver's libcuda.so.1 (which finds no device here).
func nvidiaDir(t *testing.T, env, sub string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		if c, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(c, "rlhfstation", "ci-nvidia", "root", "usr", "lib", "x86_64-linux-gnu", sub)
		}
	}
	if _, err := os.Stat(dir); dir == "" || err != nil {
		testref.Missing(t, "NVIDIA libraries not unpacked: run .ci/cuda-libs (or set %s)", env)
	}
	return dir
}

func realNVRTC(t *testing.T) *nvrtc {
	dir := nvidiaDir(t, "RLHFSTATION_TEST_NVRTC", "")
	builtins, _ := filepath.Glob(filepath.Join(dir, "libnvrtc-builtins.so.11.?"))
	if len(builtins) == 0 {
		t.Fatalf("no libnvrtc-builtins.so.11.* in %s", dir)
	}
	n, err := openNVRTC(filepath.Join(dir, "libnvrtc.so.11.2"), builtins[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKernelsCompileWithNVRTC compiles every kernel with NVIDIA's compiler for Ampere and
// Hopper and prints ptxas' registers and spills per kernel; a spill fails the test. The
// sm_90 registers and static shared memory must be kernel_resources.go's (the cost model's
// occupancy): with RLHFSTATION_UPDATE_RESOURCES=1 the test writes that file instead.
func TestKernelsCompileWithNVRTC(t *testing.T) {
	n := realNVRTC(t)
	t.Logf("NVRTC %d.%d (%s)", n.major, n.minor, n.path)
	archs := []string{"sm_80", "sm_90"}
	results := make([]*compiled, len(archs))
	errs := make([]error, len(archs))
	var wg sync.WaitGroup
	for i, arch := range archs { // NVRTC compiles separate programs concurrently
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = n.compile(kernelSource(), "rlhfstation_kernels.cu", arch)
		}()
	}
	wg.Wait()
	for i, arch := range archs {
		c, err := results[i], errs[i]
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if len(c.Image) < 4 || string(c.Image[1:4]) != "ELF" {
			t.Fatalf("%s: the CUBIN is not an ELF image", arch)
		}
		reports := parseReport(c.Log)
		byName := map[string]KernelReport{}
		for _, r := range reports {
			byName[r.Name] = r
		}
		for _, name := range kernelNames {
			r, ok := byName[name]
			if !ok {
				t.Errorf("%s: ptxas reported nothing for kernel %s", arch, name)
				continue
			}
			t.Logf("%s %-24s %3d registers, %5d B shared, %d B stack, spills %d B stores / %d B loads",
				arch, name, r.Registers, r.Shared, r.StackFrame, r.SpillStores, r.SpillLoads)
			if r.SpillStores > 0 || r.SpillLoads > 0 {
				t.Errorf("%s: kernel %s spills registers (%d B stores, %d B loads)", arch, name, r.SpillStores, r.SpillLoads)
			}
			// A block must fit one multiprocessor's 64K registers (allocated a warp at a time,
			// a thread's rounded up to a multiple of 8: sm_80's rule as sm_90's) and 48 KiB of
			// static shared memory, or the real GPU refuses the launch (the stand-in would not
			// notice).
			block := launchBlock(name)
			if r.Registers == 0 || sm90.blocksPerSM(r.Registers, 0, block) == 0 {
				t.Errorf("%s: kernel %s uses %d registers a thread: blocks of %d need %d, more than 65536 (add __launch_bounds__(%d))",
					arch, name, r.Registers, block, roundUp(r.Registers, 8)*block, block)
			}
			if r.Shared > 48<<10 {
				t.Errorf("%s: kernel %s holds %d bytes of static shared memory", arch, name, r.Shared)
			}
		}
		if len(reports) != len(kernelNames) {
			t.Errorf("%s: ptxas reported %d kernels, the launchers know %d", arch, len(reports), len(kernelNames))
		}
		if arch == "sm_90" {
			checkResources(t, byName)
		}
	}
	// An architecture this NVRTC does not know (Blackwell, say) falls back to its newest PTX.
	if arch, cubin := n.target(120); cubin || arch != "compute_90" {
		t.Errorf("target(sm_120) with NVRTC 11.8 = %s (cubin %v), want compute_90 PTX", arch, cubin)
	}
	if arch, cubin := n.target(86); !cubin || arch != "sm_86" {
		t.Errorf("target(sm_86) = %s, want sm_86", arch)
	}
}

// resourcesFile is the table of the kernels' sm_90 resources the cost model reads.
const resourcesFile = "kernel_resources.go"

// checkResources compares ptxas' sm_90 report with kernelResources (or, with
// RLHFSTATION_UPDATE_RESOURCES=1, writes the table from it): a kernel whose registers or
// static shared memory changed names the line to change.
func checkResources(t *testing.T, byName map[string]KernelReport) {
	t.Helper()
	want := map[string]kernelResource{}
	for _, name := range kernelNames {
		if r, ok := byName[name]; ok {
			want[name] = kernelResource{Regs: r.Registers, Shared: r.Shared}
		}
	}
	if os.Getenv("RLHFSTATION_UPDATE_RESOURCES") == "1" {
		src, err := resourcesSource(want)
		if err == nil {
			err = atomicfile.WriteFile(resourcesFile, src, 0o644)
		}
		if err != nil {
			t.Fatalf("writing %s: %v", resourcesFile, err)
		}
		t.Logf("wrote %s: %d kernels", resourcesFile, len(want))
		return
	}
	const hint = " (or run this test with RLHFSTATION_UPDATE_RESOURCES=1)"
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		if got, ok := kernelResources[name]; !ok || got != w {
			t.Errorf("%s: kernel %s has %d registers and %d B of static shared memory on sm_90; the line in %s must read %s%s",
				resourcesFile, name, w.Regs, w.Shared, resourcesFile, resourceLine(name, w), hint)
		}
	}
	for name := range kernelResources {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: kernel %s is no kernel of ours: delete its line%s", resourcesFile, name, hint)
		}
	}
}

func resourceLine(name string, r kernelResource) string {
	return fmt.Sprintf("%q: {Regs: %d, Shared: %d},", name, r.Regs, r.Shared)
}

// resourcesSource is kernel_resources.go holding table, gofmt'ed.
func resourcesSource(table map[string]kernelResource) ([]byte, error) {
	var b strings.Builder
	b.WriteString("// Code generated by TestKernelsCompileWithNVRTC with RLHFSTATION_UPDATE_RESOURCES=1; DO NOT EDIT.\n\n")
	b.WriteString("package cuda\n\n")
	b.WriteString("// kernelResources is each kernel's registers a thread and static shared memory (bytes) as\n")
	b.WriteString("// ptxas (NVRTC 11.8) compiles it for sm_90, the H100's and H200's architecture: the cost\n")
	b.WriteString("// model's occupancy (occupancy.go). TestKernelsCompileWithNVRTC fails when a kernel differs.\n")
	b.WriteString("var kernelResources = map[string]kernelResource{\n")
	for _, name := range slices.Sorted(maps.Keys(table)) {
		b.WriteString("\t" + resourceLine(name, table[name]) + "\n")
	}
	b.WriteString("}\n")
	return format.Source([]byte(b.String()))
}

// launchBlock is the largest block ops.go launches a kernel with (256 unless listed).
func launchBlock(kernel string) int {
	switch kernel {
	case "logprob_forward", "logprob_backward":
		return 512
	case "gemm_nt_few":
		return 512
	case "sample_rows", "sum_f32", "rope_forward", "attn_expand_kv", "attn_reduce_kv",
		"rmsnorm_forward", "rmsnorm_forward_f32", "rmsnorm_forward_bf16", "q4_linears_tc_bf16", "q4_linears_tc_f32":
		return 1024 // fixed at 1024, or as large as a head (up to 1024)
	}
	return threads
}

// TestCompileErrorNamesTheLine: a kernel that does not compile gives NVRTC's log, which
// names the file and line.
func TestCompileErrorNamesTheLine(t *testing.T) {
	n := realNVRTC(t)
	_, err := n.compile("#line 1 \"broken.cu\"\nextern \"C\" __global__ void k(float* y) {\n y[0] = undefined_thing;\n}\n", "broken.cu", "sm_80")
	if err == nil || !strings.Contains(err.Error(), "broken.cu(2)") || !strings.Contains(err.Error(), "undefined_thing") {
		t.Fatalf("compile error = %v, want NVRTC's message naming broken.cu(2)", err)
	}
}

// TestRealDriverWithoutDevice loads NVIDIA's libcuda.so.1 on this machine, which has no
// GPU: cuInit returns 100 and the probe says so in the words the user sees.
func TestRealDriverWithoutDevice(t *testing.T) {
	dir := nvidiaDir(t, "RLHFSTATION_TEST_LIBCUDA", "nvidia/current")
	_, info, err := probe(func(v int) libEnv {
		e := osLibEnv(v)
		e.getenv = func(k string) string {
			if k == LibsEnv {
				return dir
			}
			return ""
		}
		return e
	})
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("probe with the real driver and no GPU: %v, want an UnavailableError", err)
	}
	t.Logf("driver version %d; probe: %v", info.DriverVersion, err)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != cudaErrorNoDevice || ce.Name != "CUDA_ERROR_NO_DEVICE" {
		t.Fatalf("underlying error %v, want cuInit's CUDA_ERROR_NO_DEVICE (100) named by the driver", err)
	}
	if !strings.Contains(err.Error(), "cuInit returned 100 (CUDA_ERROR_NO_DEVICE)") || !strings.Contains(err.Error(), "no CUDA device") {
		t.Fatalf("message %q does not say cuInit returned 100 and no device", err)
	}
	if info.DriverVersion < 12000 {
		t.Fatalf("cuDriverGetVersion = %d, want the 535 driver's 12.x", info.DriverVersion)
	}
}
