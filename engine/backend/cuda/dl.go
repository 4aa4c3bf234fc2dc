package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// lib is a shared library opened with dlopen.
type lib struct {
	handle uintptr
	path   string
}

func dlopen(path string, global bool) (lib, error) {
	mode := purego.RTLD_NOW | purego.RTLD_LOCAL
	if global {
		mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
	}
	h, err := purego.Dlopen(path, mode)
	if err != nil {
		return lib{}, fmt.Errorf("dlopen %s: %w", path, err)
	}
	return lib{handle: h, path: path}, nil
}

// symbol is one C function to resolve into *addr.
type symbol struct {
	name string
	addr *uintptr
}

// bind resolves every symbol, or says which are missing (an old or foreign library).
func (l lib) bind(syms []symbol) error {
	var missing []string
	for _, s := range syms {
		p, err := purego.Dlsym(l.handle, s.name)
		if err != nil || p == 0 {
			missing = append(missing, s.name)
			continue
		}
		*s.addr = p
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %v", l.path, missing)
	}
	return nil
}

// call runs a C function that returns an int status code (CUresult, nvrtcResult,
// cublasStatus_t are all C enums). Pointer arguments must be written
// uintptr(unsafe.Pointer(p)) in the call expression itself: go:uintptrescapes then keeps
// what they point to on the heap and alive until the call returns.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int {
	r, _, _ := purego.SyscallN(fn, args...)
	return int(int32(r))
}

// callPtr runs a C function that returns a pointer.
//
//go:uintptrescapes
func callPtr(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// cstring returns a NUL-terminated copy of s; keep the slice alive across the call.
func cstring(s string) []byte { return append([]byte(s), 0) }

// gostring reads a NUL-terminated C string.
func gostring(p uintptr) string {
	if p == 0 {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+uintptr(n))) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n))
}
