package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"rlhfstation/engine/backend/cuda/cudasim/standin"
)

// api is a small purego client of the stand-in's libraries, calling them as a backend
// would: by their C names, with no cgo.
type api struct {
	dir string

	cuInit                      func(uint32) int32
	cuDriverGetVersion          func(*int32) int32
	cuGetErrorName              func(int32, *uintptr) int32
	cuGetErrorString            func(int32, *uintptr) int32
	cuDeviceGetCount            func(*int32) int32
	cuDeviceGet                 func(*int32, int32) int32
	cuDeviceGetName             func(*byte, int32, int32) int32
	cuDeviceGetAttribute        func(*int32, int32, int32) int32
	cuDeviceTotalMem            func(*uint64, int32) int32
	cuDevicePrimaryCtxRetain    func(*uintptr, int32) int32
	cuDevicePrimaryCtxRelease   func(int32) int32
	cuCtxCreate                 func(*uintptr, uint32, int32) int32
	cuCtxDestroy                func(uintptr) int32
	cuCtxSetCurrent             func(uintptr) int32
	cuCtxGetCurrent             func(*uintptr) int32
	cuCtxPushCurrent            func(uintptr) int32
	cuCtxPopCurrent             func(*uintptr) int32
	cuCtxSynchronize            func() int32
	cuMemAlloc                  func(*uint64, uint64) int32
	cuMemFree                   func(uint64) int32
	cuMemGetInfo                func(*uint64, *uint64) int32
	cuMemHostAlloc              func(*uintptr, uint64, uint32) int32
	cuMemFreeHost               func(uintptr) int32
	cuMemcpyHtoD                func(uint64, unsafe.Pointer, uint64) int32
	cuMemcpyDtoH                func(unsafe.Pointer, uint64, uint64) int32
	cuMemcpyDtoD                func(uint64, uint64, uint64) int32
	cuMemcpyHtoDAsync           func(uint64, uintptr, uint64, uintptr) int32
	cuMemcpyDtoHAsync           func(uintptr, uint64, uint64, uintptr) int32
	cuMemcpyDtoDAsync           func(uint64, uint64, uint64, uintptr) int32
	cuMemsetD8                  func(uint64, uint8, uint64) int32
	cuMemsetD16                 func(uint64, uint16, uint64) int32
	cuMemsetD32                 func(uint64, uint32, uint64) int32
	cuMemsetD32Async            func(uint64, uint32, uint64, uintptr) int32
	cuModuleLoadData            func(*uintptr, unsafe.Pointer) int32
	cuModuleUnload              func(uintptr) int32
	cuModuleGetFunction         func(*uintptr, uintptr, *byte) int32
	cuFuncGetAttribute          func(*int32, int32, uintptr) int32
	cuFuncSetAttribute          func(uintptr, int32, int32) int32
	cuLaunchKernel              func(uintptr, uint32, uint32, uint32, uint32, uint32, uint32, uint32, uintptr, unsafe.Pointer, unsafe.Pointer) int32
	cuStreamCreate              func(*uintptr, uint32) int32
	cuStreamDestroy             func(uintptr) int32
	cuStreamSynchronize         func(uintptr) int32
	cuStreamQuery               func(uintptr) int32
	cuStreamWaitEventF          func(uintptr, uintptr, uint32) int32
	cuEventCreate               func(*uintptr, uint32) int32
	cuEventRecord               func(uintptr, uintptr) int32
	cuEventSynchronize          func(uintptr) int32
	cuEventQuery                func(uintptr) int32
	cuEventElapsedTime          func(*float32, uintptr, uintptr) int32
	cuEventDestroy              func(uintptr) int32
	cuStreamBeginCapture        func(uintptr, int32) int32
	cuStreamEndCapture          func(uintptr, *uintptr) int32
	cuGraphInstantiateWithFlags func(*uintptr, uintptr, uint64) int32
	cuGraphLaunch               func(uintptr, uintptr) int32
	cuGraphExecDestroy          func(uintptr) int32
	cuGraphDestroy              func(uintptr) int32
	nvrtcVersion                func(*int32, *int32) int32
	nvrtcGetErrorString         func(int32) string
	nvrtcCreateProgram          func(*uintptr, *byte, *byte, int32, unsafe.Pointer, unsafe.Pointer) int32
	nvrtcDestroyProgram         func(*uintptr) int32
	nvrtcCompileProgram         func(uintptr, int32, unsafe.Pointer) int32
	nvrtcGetProgramLogSize      func(uintptr, *uint64) int32
	nvrtcGetProgramLog          func(uintptr, *byte) int32
	nvrtcGetCUBINSize           func(uintptr, *uint64) int32
	nvrtcGetCUBIN               func(uintptr, *byte) int32
	nvrtcGetPTXSize             func(uintptr, *uint64) int32
	nvrtcGetPTX                 func(uintptr, *byte) int32
	cublasCreate                func(*uintptr) int32
	cublasDestroy               func(uintptr) int32
	cublasSetStream             func(uintptr, uintptr) int32
	cublasSetMathMode           func(uintptr, int32) int32
	cublasSetWorkspace          func(uintptr, uint64, uint64) int32
	cublasGemmEx                func(h uintptr, ta, tb, m, n, k int32, alpha *float32, a uint64, at, lda int32, b uint64, bt, ldb int32, beta *float32, c uint64, ct, ldc, compute, algo int32) int32
	cublasGemmStridedBatchedEx  func(h uintptr, ta, tb, m, n, k int32, alpha *float32, a uint64, at, lda int32, sa int64, b uint64, bt, ldb int32, sb int64, beta *float32, c uint64, ct, ldc int32, sc int64, batch, compute, algo int32) int32
	cublasSgemm                 func(h uintptr, ta, tb, m, n, k int32, alpha *float32, a uint64, lda int32, b uint64, ldb int32, beta *float32, c uint64, ldc int32) int32
}

var (
	sharedAPI  *api
	sharedErr  error
	sharedOnce sync.Once
)

// stand returns the client of the stand-in built once for the test binary (skipping the
// test where no C++ compiler is found), initialised with cuInit.
func stand(t testing.TB) *api {
	t.Helper()
	sharedOnce.Do(func() {
		os.Setenv("CUDASIM_QUIET", "1") // failures are asserted on, not printed
		dir, err := standin.Ensure()
		if err != nil {
			sharedErr = err
			return
		}
		sharedAPI, sharedErr = open(dir)
		if sharedErr == nil {
			if r := sharedAPI.cuInit(0); r != 0 {
				sharedErr = fmt.Errorf("cuInit: %d", r)
			}
		}
	})
	if sharedErr != nil {
		if _, err := exec.LookPath("g++"); err != nil && os.Getenv("CUDASIM_CXX") == "" {
			t.Skipf("no C++ compiler to build the stand-in: %v", sharedErr)
		}
		t.Fatal(sharedErr)
	}
	return sharedAPI
}

func open(dir string) (*api, error) {
	a := &api{dir: dir}
	libs := map[string]uintptr{}
	// The backend's order: libcuda, then NVRTC's builtins and NVRTC, then cublasLt and cuBLAS.
	for _, l := range []struct {
		name   string
		global bool
	}{{"libcuda.so.1", false}, {"libnvrtc-builtins.so.12.8", true}, {"libnvrtc.so.12", true}, {"libcublasLt.so.12", true}, {"libcublas.so.12", false}} {
		mode := purego.RTLD_NOW | purego.RTLD_LOCAL
		if l.global {
			mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
		}
		h, err := purego.Dlopen(filepath.Join(dir, l.name), mode)
		if err != nil {
			return nil, err
		}
		libs[l.name] = h
	}
	var missing []string
	bind := func(lib string, fp any, name string) {
		if p, err := purego.Dlsym(libs[lib], name); err != nil || p == 0 {
			missing = append(missing, name)
			return
		}
		purego.RegisterLibFunc(fp, libs[lib], name)
	}
	cu := "libcuda.so.1"
	bind(cu, &a.cuInit, "cuInit")
	bind(cu, &a.cuDriverGetVersion, "cuDriverGetVersion")
	bind(cu, &a.cuGetErrorName, "cuGetErrorName")
	bind(cu, &a.cuGetErrorString, "cuGetErrorString")
	bind(cu, &a.cuDeviceGetCount, "cuDeviceGetCount")
	bind(cu, &a.cuDeviceGet, "cuDeviceGet")
	bind(cu, &a.cuDeviceGetName, "cuDeviceGetName")
	bind(cu, &a.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	bind(cu, &a.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	bind(cu, &a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	bind(cu, &a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	bind(cu, &a.cuCtxCreate, "cuCtxCreate_v2")
	bind(cu, &a.cuCtxDestroy, "cuCtxDestroy_v2")
	bind(cu, &a.cuCtxSetCurrent, "cuCtxSetCurrent")
	bind(cu, &a.cuCtxGetCurrent, "cuCtxGetCurrent")
	bind(cu, &a.cuCtxPushCurrent, "cuCtxPushCurrent_v2")
	bind(cu, &a.cuCtxPopCurrent, "cuCtxPopCurrent_v2")
	bind(cu, &a.cuCtxSynchronize, "cuCtxSynchronize")
	bind(cu, &a.cuMemAlloc, "cuMemAlloc_v2")
	bind(cu, &a.cuMemFree, "cuMemFree_v2")
	bind(cu, &a.cuMemGetInfo, "cuMemGetInfo_v2")
	bind(cu, &a.cuMemHostAlloc, "cuMemHostAlloc")
	bind(cu, &a.cuMemFreeHost, "cuMemFreeHost")
	bind(cu, &a.cuMemcpyHtoD, "cuMemcpyHtoD_v2")
	bind(cu, &a.cuMemcpyDtoH, "cuMemcpyDtoH_v2")
	bind(cu, &a.cuMemcpyDtoD, "cuMemcpyDtoD_v2")
	bind(cu, &a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	bind(cu, &a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	bind(cu, &a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	bind(cu, &a.cuMemsetD8, "cuMemsetD8_v2")
	bind(cu, &a.cuMemsetD16, "cuMemsetD16_v2")
	bind(cu, &a.cuMemsetD32, "cuMemsetD32_v2")
	bind(cu, &a.cuMemsetD32Async, "cuMemsetD32Async")
	bind(cu, &a.cuModuleLoadData, "cuModuleLoadData")
	bind(cu, &a.cuModuleUnload, "cuModuleUnload")
	bind(cu, &a.cuModuleGetFunction, "cuModuleGetFunction")
	bind(cu, &a.cuFuncGetAttribute, "cuFuncGetAttribute")
	bind(cu, &a.cuFuncSetAttribute, "cuFuncSetAttribute")
	bind(cu, &a.cuLaunchKernel, "cuLaunchKernel")
	bind(cu, &a.cuStreamCreate, "cuStreamCreate")
	bind(cu, &a.cuStreamDestroy, "cuStreamDestroy_v2")
	bind(cu, &a.cuStreamSynchronize, "cuStreamSynchronize")
	bind(cu, &a.cuStreamQuery, "cuStreamQuery")
	bind(cu, &a.cuStreamWaitEventF, "cuStreamWaitEvent")
	bind(cu, &a.cuEventCreate, "cuEventCreate")
	bind(cu, &a.cuEventRecord, "cuEventRecord")
	bind(cu, &a.cuEventSynchronize, "cuEventSynchronize")
	bind(cu, &a.cuEventQuery, "cuEventQuery")
	bind(cu, &a.cuEventElapsedTime, "cuEventElapsedTime")
	bind(cu, &a.cuEventDestroy, "cuEventDestroy_v2")
	bind(cu, &a.cuStreamBeginCapture, "cuStreamBeginCapture_v2")
	bind(cu, &a.cuStreamEndCapture, "cuStreamEndCapture")
	bind(cu, &a.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags")
	bind(cu, &a.cuGraphLaunch, "cuGraphLaunch")
	bind(cu, &a.cuGraphExecDestroy, "cuGraphExecDestroy")
	bind(cu, &a.cuGraphDestroy, "cuGraphDestroy")
	rt := "libnvrtc.so.12"
	bind(rt, &a.nvrtcVersion, "nvrtcVersion")
	bind(rt, &a.nvrtcGetErrorString, "nvrtcGetErrorString")
	bind(rt, &a.nvrtcCreateProgram, "nvrtcCreateProgram")
	bind(rt, &a.nvrtcDestroyProgram, "nvrtcDestroyProgram")
	bind(rt, &a.nvrtcCompileProgram, "nvrtcCompileProgram")
	bind(rt, &a.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize")
	bind(rt, &a.nvrtcGetProgramLog, "nvrtcGetProgramLog")
	bind(rt, &a.nvrtcGetCUBINSize, "nvrtcGetCUBINSize")
	bind(rt, &a.nvrtcGetCUBIN, "nvrtcGetCUBIN")
	bind(rt, &a.nvrtcGetPTXSize, "nvrtcGetPTXSize")
	bind(rt, &a.nvrtcGetPTX, "nvrtcGetPTX")
	bl := "libcublas.so.12"
	bind(bl, &a.cublasCreate, "cublasCreate_v2")
	bind(bl, &a.cublasDestroy, "cublasDestroy_v2")
	bind(bl, &a.cublasSetStream, "cublasSetStream_v2")
	bind(bl, &a.cublasSetMathMode, "cublasSetMathMode")
	bind(bl, &a.cublasSetWorkspace, "cublasSetWorkspace_v2")
	bind(bl, &a.cublasGemmEx, "cublasGemmEx")
	bind(bl, &a.cublasGemmStridedBatchedEx, "cublasGemmStridedBatchedEx")
	bind(bl, &a.cublasSgemm, "cublasSgemm_v2")
	if len(missing) > 0 {
		return nil, fmt.Errorf("stand-in in %s lacks %v", dir, missing)
	}
	return a, nil
}

func cstr(s string) *byte { b := append([]byte(s), 0); return &b[0] }

func gostr(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := uintptr(0); ; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i))
		if c == 0 {
			return string(b)
		}
		b = append(b, c)
	}
}

// errText is "NAME (code): description" for a CUresult.
func (a *api) errText(r int32) string {
	var n, s uintptr
	a.cuGetErrorName(r, &n)
	a.cuGetErrorString(r, &s)
	return fmt.Sprintf("%s (%d): %s", gostr(n), r, gostr(s))
}

// ok fails the test unless r is CUDA_SUCCESS.
func (a *api) ok(t testing.TB, what string, r int32) {
	t.Helper()
	if r != 0 {
		t.Fatalf("%s: %s", what, a.errText(r))
	}
}

// want fails the test unless r is code.
func (a *api) want(t testing.TB, what string, r, code int32) {
	t.Helper()
	if r != code {
		t.Fatalf("%s returned %s, want %d", what, a.errText(r), code)
	}
}

// newContext creates a context current on this OS thread (locked for the test) and
// destroys it when the test ends.
func (a *api) newContext(t testing.TB) uintptr {
	t.Helper()
	runtime.LockOSThread()
	var c uintptr
	a.ok(t, "cuCtxCreate", a.cuCtxCreate(&c, 0, 0))
	t.Cleanup(func() {
		a.cuCtxDestroy(c)
		runtime.UnlockOSThread()
	})
	return c
}

// compile compiles src with the stand-in's NVRTC for sm_90 (or the given options) and
// returns the image, or fails the test with the log.
func (a *api) compile(t testing.TB, src, name string, opts ...string) []byte {
	t.Helper()
	img, log, r := a.tryCompile(src, name, opts...)
	if r != 0 {
		t.Fatalf("nvrtcCompileProgram(%s): %s\n%s", name, a.nvrtcGetErrorString(r), log)
	}
	return img
}

func (a *api) tryCompile(src, name string, opts ...string) (img []byte, log string, r int32) {
	if len(opts) == 0 {
		opts = []string{"--gpu-architecture=sm_90", "--std=c++17"}
	}
	var prog uintptr
	if r := a.nvrtcCreateProgram(&prog, cstr(src), cstr(name), 0, nil, nil); r != 0 {
		return nil, "", r
	}
	defer a.nvrtcDestroyProgram(&prog)
	ptrs := make([]*byte, len(opts))
	for i, o := range opts {
		ptrs[i] = cstr(o)
	}
	var pin runtime.Pinner
	for _, p := range ptrs {
		pin.Pin(p)
	}
	r = a.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	pin.Unpin()
	var n uint64
	a.nvrtcGetProgramLogSize(prog, &n)
	lb := make([]byte, n+1)
	a.nvrtcGetProgramLog(prog, &lb[0])
	log = strings.TrimRight(string(lb), "\x00")
	if r != 0 {
		return nil, log, r
	}
	cubin := false
	for _, o := range opts {
		if strings.Contains(o, "sm_") {
			cubin = true
		}
	}
	if cubin {
		a.nvrtcGetCUBINSize(prog, &n)
		img = make([]byte, n)
		a.nvrtcGetCUBIN(prog, &img[0])
	} else {
		a.nvrtcGetPTXSize(prog, &n)
		img = make([]byte, n)
		a.nvrtcGetPTX(prog, &img[0])
	}
	return img, log, 0
}

type module struct {
	a *api
	h uintptr
}

func (a *api) load(t testing.TB, img []byte) module {
	t.Helper()
	var m uintptr
	a.ok(t, "cuModuleLoadData", a.cuModuleLoadData(&m, unsafe.Pointer(&img[0])))
	return module{a, m}
}

func (m module) fn(t testing.TB, name string) uintptr {
	t.Helper()
	var f uintptr
	m.a.ok(t, "cuModuleGetFunction("+name+")", m.a.cuModuleGetFunction(&f, m.h, cstr(name)))
	return f
}

// dims is a launch shape.
type dims struct {
	grid, block [3]uint32
	shared      uint32
}

func d1(blocks, threads uint32) dims {
	return dims{grid: [3]uint32{blocks, 1, 1}, block: [3]uint32{threads, 1, 1}}
}

// launch launches f with args (uint64 device pointers, int32, uint32, int64, float32,
// float64) on stream and returns cuLaunchKernel's result.
func (a *api) launch(f uintptr, d dims, stream uintptr, args ...any) int32 {
	vals := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args)+1)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&vals[0:1][0])
	for i, v := range args {
		p := unsafe.Pointer(&vals[i])
		switch x := v.(type) {
		case uint64:
			*(*uint64)(p) = x
		case int64:
			*(*int64)(p) = x
		case int32:
			*(*int32)(p) = x
		case uint32:
			*(*uint32)(p) = x
		case float32:
			*(*float32)(p) = x
		case float64:
			*(*float64)(p) = x
		default:
			panic(fmt.Sprintf("launch: argument %d of type %T", i, v))
		}
		ptrs[i] = p
	}
	pin.Pin(&ptrs[0])
	return a.cuLaunchKernel(f, d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2], d.shared, stream,
		unsafe.Pointer(&ptrs[0]), nil)
}

// Device memory helpers (synchronous copies on the legacy stream).

func alloc(t testing.TB, a *api, n int) uint64 {
	t.Helper()
	var p uint64
	a.ok(t, "cuMemAlloc", a.cuMemAlloc(&p, uint64(n)))
	return p
}

func upload[T any](t testing.TB, a *api, x []T) uint64 {
	t.Helper()
	var z T
	n := len(x) * int(unsafe.Sizeof(z))
	p := alloc(t, a, max(n, 1))
	if n > 0 {
		a.ok(t, "cuMemcpyHtoD", a.cuMemcpyHtoD(p, unsafe.Pointer(&x[0]), uint64(n)))
	}
	return p
}

func download[T any](t testing.TB, a *api, p uint64, n int) []T {
	t.Helper()
	x := make([]T, n)
	var z T
	if n > 0 {
		a.ok(t, "cuMemcpyDtoH", a.cuMemcpyDtoH(unsafe.Pointer(&x[0]), p, uint64(n*int(unsafe.Sizeof(z)))))
	}
	return x
}
