package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"rlhfstation/internal/atomicfile"
)

// kernelID indexes the kernels (launchers.go lists them).
type kernelID int

// devptr is a device address of elements of type T: launchers take the kernels' pointer
// parameters by element type, so a float32 buffer cannot go where bf16 is read.
type devptr[T any] uintptr

// bf16 marks bfloat16 device memory (raw 16-bit words).
type bf16 uint16

// dims is a launch configuration.
type dims struct {
	grid   [3]uint32
	block  [3]uint32
	shared uint32 // dynamic shared memory, bytes
}

// grid1 is a one-dimensional launch of blocks of threads.
func grid1(blocks, threads int) dims {
	return dims{grid: [3]uint32{uint32(blocks), 1, 1}, block: [3]uint32{uint32(threads), 1, 1}}
}

// launch starts kernel id with the arguments already in o.args. A launch over an empty
// grid does nothing (a zero-sized op), as the GPU would refuse it.
func (o *owner) launch(id kernelID, d dims) error {
	if d.grid[0] == 0 || d.grid[1] == 0 || d.grid[2] == 0 {
		o.hint, o.attnHint = 0, attnVolume{}
		return nil
	}
	if o.shapesOnly {
		o.recordKernel(id, d)
		return nil
	}
	dr := o.d.drv
	r := call(dr.cuLaunchKernel, o.fns[id], uintptr(d.grid[0]), uintptr(d.grid[1]), uintptr(d.grid[2]),
		uintptr(d.block[0]), uintptr(d.block[1]), uintptr(d.block[2]), uintptr(d.shared), o.stream,
		uintptr(unsafe.Pointer(&o.args.ptrs[0])), 0)
	o.recordKernel(id, d)
	if r != 0 {
		return dr.check(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v, shared %d)", kernelNames[id], d.grid, d.block, d.shared), r)
	}
	return nil
}

// moduleKey identifies a compiled module: the kernels' text, the target, and the compiler
// (its version and the library file, so a changed NVRTC or stand-in recompiles).
func moduleKey(n *nvrtc, arch string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d.%d\x00%s\x00", sourceHash(), arch, n.major, n.minor, n.path)
	if fi, err := os.Stat(n.path); err == nil {
		fmt.Fprintf(h, "%d\x00%d\x00", fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// cacheDir is where compiled modules are kept: the user cache folder.
func cacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "rlhfstation", "cuda"), nil
}

// loadKernels loads the kernels' module from the cache, or compiles it with NVRTC for the
// device's exact architecture (PTX for the newest NVRTC knows when it does not know the
// device's) and caches it; then resolves every kernel.
func (o *owner) loadKernels() error {
	n := o.d.rtc
	arch, _ := n.target(o.d.Info.Capability())
	key := moduleKey(n, arch)
	var path string
	if dir, err := cacheDir(); err == nil {
		path = filepath.Join(dir, key+".bin")
	}
	dr := o.d.drv
	load := func(image []byte) error {
		var mod uintptr
		if err := dr.check("cuModuleLoadData", call(dr.cuModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&image[0])))); err != nil {
			return err
		}
		o.module = mod
		return nil
	}
	loaded := false
	if path != "" {
		if image, err := os.ReadFile(path); err == nil && len(image) > 0 {
			loaded = load(image) == nil // a stale or damaged entry is compiled again
		}
	}
	if !loaded {
		c, err := n.compile(kernelSource(), "rlhfstation_kernels.cu", arch)
		if err != nil {
			return fmt.Errorf("cuda: compiling the kernels for %s with NVRTC %d.%d (%s): %w", arch, n.major, n.minor, n.path, err)
		}
		if err := load(c.Image); err != nil {
			return fmt.Errorf("cuda: loading the kernels compiled for %s: %w", arch, err)
		}
		if path != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				_ = atomicfile.WriteFile(path, c.Image, 0o644) // a cache: failing to write costs a compile next time
			}
		}
	}
	o.fns = make([]uintptr, numKernels)
	var errs []error
	for id, name := range kernelNames {
		cname := cstring(name)
		if err := dr.check("cuModuleGetFunction("+name+")", call(dr.cuModuleGetFunction, uintptr(unsafe.Pointer(&o.fns[id])), o.module, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
