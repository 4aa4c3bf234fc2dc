package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"

	"rlhfstation/engine/backend/cuda/cudasim/standin"
)

// Tests that need a fresh process (nothing initialised, or one that must die) run the test
// binary again with CUDASIM_TEST_HELPER naming what to do.
func TestMain(m *testing.M) {
	if h := os.Getenv("CUDASIM_TEST_HELPER"); h != "" {
		os.Exit(helper(h, os.Getenv("CUDASIM_TEST_DIR")))
	}
	os.Exit(m.Run())
}

func helper(what, dir string) int {
	lib := func(name string, global bool) uintptr {
		mode := purego.RTLD_NOW | purego.RTLD_LOCAL
		if global {
			mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
		}
		h, err := purego.Dlopen(filepath.Join(dir, name), mode)
		if err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		return h
	}
	switch what {
	case "uninitialised":
		var alloc func(*uint64, uint64) int32
		var count func(*int32) int32
		cu := lib("libcuda.so.1", false)
		purego.RegisterLibFunc(&alloc, cu, "cuMemAlloc_v2")
		purego.RegisterLibFunc(&count, cu, "cuDeviceGetCount")
		var p uint64
		var n int32
		fmt.Println(alloc(&p, 64), count(&n))
	case "no-builtins":
		var create func(*uintptr, *byte, *byte, int32, unsafe.Pointer, unsafe.Pointer) int32
		var compile func(uintptr, int32, unsafe.Pointer) int32
		rt := lib("libnvrtc.so.12", true)
		purego.RegisterLibFunc(&create, rt, "nvrtcCreateProgram")
		purego.RegisterLibFunc(&compile, rt, "nvrtcCompileProgram")
		var prog uintptr
		create(&prog, cstr(tinyKernel), cstr("tiny.cu"), 0, nil, nil)
		fmt.Println(compile(prog, 0, nil))
	case "deref":
		var initf func(uint32) int32
		var ctx func(*uintptr, uint32, int32) int32
		var alloc func(*uint64, uint64) int32
		cu := lib("libcuda.so.1", false)
		purego.RegisterLibFunc(&initf, cu, "cuInit")
		purego.RegisterLibFunc(&ctx, cu, "cuCtxCreate_v2")
		purego.RegisterLibFunc(&alloc, cu, "cuMemAlloc_v2")
		var c uintptr
		var p uint64
		if initf(0) != 0 || ctx(&c, 0, 0) != 0 || alloc(&p, 64) != 0 {
			return 3
		}
		fmt.Println("reading device memory from the host")
		v := *(*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(p))) // must fault
		fmt.Println("read", v)
	default:
		return 3
	}
	return 0
}

func runHelper(t *testing.T, what string, env ...string) (string, error) {
	t.Helper()
	a := stand(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, "CUDASIM_TEST_HELPER="+what, "CUDASIM_TEST_DIR="+a.dir)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestBeforeInit(t *testing.T) {
	out, err := runHelper(t, "uninitialised")
	if err != nil || strings.TrimSpace(out) != "3 3" {
		t.Fatalf("calls before cuInit: %q (%v), want CUDA_ERROR_NOT_INITIALIZED (3)", out, err)
	}
}

// TestNVRTCNeedsBuiltins: as NVIDIA's, the stand-in's NVRTC cannot compile unless its
// builtins library was loaded first (or is on the loader's path).
func TestNVRTCNeedsBuiltins(t *testing.T) {
	out, err := runHelper(t, "no-builtins", "LD_LIBRARY_PATH=")
	if err != nil || strings.TrimSpace(out) != "7" {
		t.Fatalf("compiling without libnvrtc-builtins: %q (%v), want NVRTC_ERROR_BUILTIN_OPERATION_FAILURE (7)", out, err)
	}
}

// TestDevicePointerFaultsOnHost: device addresses are not host memory in the user's
// process; reading one there crashes instead of returning something plausible.
func TestDevicePointerFaultsOnHost(t *testing.T) {
	out, err := runHelper(t, "deref")
	if err == nil || strings.Contains(out, "read ") || !strings.Contains(out, "fault") {
		t.Fatalf("dereferencing a device pointer on the host: %v\n%s", err, out)
	}
}

// TestCommand: the builder's command line.
func TestCommand(t *testing.T) {
	a := stand(t)
	var out, errb bytes.Buffer
	if code := run([]string{"-o", a.dir, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		Dir   string
		Built bool
		Files []string
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	if res.Dir != a.dir || res.Built || len(res.Files) != len(standin.Files) {
		t.Errorf("result %+v: an up-to-date folder is not rebuilt", res)
	}
	for _, f := range res.Files {
		if _, err := os.Stat(filepath.Join(a.dir, f)); err != nil {
			t.Error(err)
		}
	}
	if code := run(nil, &out, &errb); code != 2 {
		t.Errorf("no -o: exit %d, want 2", code)
	}
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
}
