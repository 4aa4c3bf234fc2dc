package main

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"
)

const tinyKernel = `extern "C" __global__ void __launch_bounds__(128) twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.f;
}
`

// TestCompileErrors: what g++ refuses comes back in the program log with the program's
// name and line; what the stand-in cannot run is refused with a message saying so.
func TestCompileErrors(t *testing.T) {
	a := stand(t)
	cases := []struct {
		name, src string
		words     []string
	}{
		{"syntax", "extern \"C\" __global__ void k(float* x) {\n    x[0] = 1.f\n}\n", []string{"bad.cu:2", "error"}},
		{"unknown intrinsic", "extern \"C\" __global__ void k(unsigned* x) {\n  x[0] = __activemask();\n}\n", []string{"bad.cu:2", "__activemask"}},
		{"half type", "extern \"C\" __global__ void k(__half* x) {}\n", []string{"__half"}},
		{"not extern C", "__global__ void k(float* x) { x[0] = 1.f; }\n", []string{"must be declared extern \"C\"", "'k'"}},
		{"template kernel", "template <typename T> __global__ void k(T* x) { x[0] = 1; }\n", []string{"must be declared extern \"C\""}},
		{"device variable", "__device__ int counter;\nextern \"C\" __global__ void k(int* x) { x[0] = counter++; }\n",
			[]string{"'counter' is a global or static variable"}},
		{"inline ptx", "extern \"C\" __global__ void k(float* x) { asm(\"mov.b32 %0, 1;\" : \"=r\"(x[0])); }\n",
			[]string{"cudasim_unsupported_inline_ptx_asm"}},
		{"reference parameter", "extern \"C\" __global__ void k(float& x) { x = 1.f; }\n", []string{"cannot be a reference"}},
		{"declared only", "extern \"C\" __global__ void k(float* x);\n", []string{"declared but never defined"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, log, r := a.tryCompile(c.src, "bad.cu")
			if r != 6 {
				t.Fatalf("nvrtcCompileProgram returned %d (%s), want NVRTC_ERROR_COMPILATION; log:\n%s", r, a.nvrtcGetErrorString(r), log)
			}
			for _, w := range c.words {
				if !strings.Contains(log, w) {
					t.Errorf("log lacks %q:\n%s", w, log)
				}
			}
		})
	}
	_, log, r := a.tryCompile(tinyKernel, "opt.cu", "--gpu-architecture=sm_90", "--frobnicate")
	if r != 5 || !strings.Contains(log, "--frobnicate") {
		t.Errorf("unknown option: %d %q", r, log)
	}
	_, log, r = a.tryCompile(tinyKernel, "opt.cu", "--gpu-architecture=sm_91")
	if r != 5 || !strings.Contains(log, "sm_91") {
		t.Errorf("unknown architecture: %d %q", r, log)
	}
}

// TestImages: a CUBIN loads on its own architecture only, PTX on its own or a newer one;
// the stand-in refuses NVIDIA's binaries and its own images are self-contained (loadable
// after the program is gone, as a disk cache needs).
func TestImages(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	var v1, v2 int32
	a.ok(t, "nvrtcVersion", a.nvrtcVersion(&v1, &v2))
	if v1 != 12 {
		t.Errorf("NVRTC %d.%d", v1, v2)
	}
	cubin90 := a.compile(t, tinyKernel, "tiny.cu")
	m := a.load(t, cubin90)
	f := m.fn(t, "twice")
	var v int32
	a.ok(t, "cuFuncGetAttribute", a.cuFuncGetAttribute(&v, 0, f))
	if v != 128 {
		t.Errorf("max threads per block %d, want the launch bounds (128)", v)
	}
	var g uintptr
	a.want(t, "cuModuleGetFunction(missing)", a.cuModuleGetFunction(&g, m.h, cstr("thrice")), 500)
	a.ok(t, "cuModuleUnload", a.cuModuleUnload(m.h))
	a.want(t, "cuModuleGetFunction after unload", a.cuModuleGetFunction(&g, m.h, cstr("twice")), 400)

	var mod uintptr
	cubin80 := a.compile(t, tinyKernel, "tiny.cu", "--gpu-architecture=sm_80")
	a.want(t, "cuModuleLoadData(sm_80 CUBIN)", a.cuModuleLoadData(&mod, ptr(cubin80)), 209)
	ptx80 := a.compile(t, tinyKernel, "tiny.cu", "--gpu-architecture=compute_80")
	if !bytes.Contains(ptx80, []byte(".target sm_80")) {
		t.Errorf("PTX text: %q", ptx80[:min(200, len(ptx80))])
	}
	a.ok(t, "cuModuleLoadData(compute_80 PTX)", a.cuModuleLoadData(&mod, ptr(ptx80)))
	ptx100 := a.compile(t, tinyKernel, "tiny.cu", "--gpu-architecture=compute_100")
	a.want(t, "cuModuleLoadData(compute_100 PTX)", a.cuModuleLoadData(&mod, ptr(ptx100)), 218)
	realPTX := []byte(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\x00")
	a.want(t, "cuModuleLoadData(NVIDIA PTX)", a.cuModuleLoadData(&mod, ptr(realPTX)), 218)
	elf := append([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1}, make([]byte, 64)...)
	elf[18] = 190 // EM_CUDA
	a.want(t, "cuModuleLoadData(NVIDIA CUBIN)", a.cuModuleLoadData(&mod, ptr(elf)), 209)
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
