// Package standin builds the CPU stand-in of the CUDA driver (libcuda.so.1), NVRTC
// (libnvrtc.so.12) and cuBLAS (libcublas.so.12) from the C++ sources embedded here, with the
// system's C++ compiler, so that the CUDA backend runs unchanged with no GPU: only the folder
// it loads the libraries from differs (RLHFSTATION_CUDA_LIBS).
//
// Kernels compile from their own .cu source with g++ and run on the CPU, each CUDA thread a
// fiber, in a separate device process that owns the device memory (see csrc/driver.cc and
// csrc/device.cc). It is strict where a GPU is: launches are checked as the driver checks
// them, stream work runs only at synchronisation points, memory starts as NaN bytes and sits
// against guard pages, and divergent barriers or warp collectives fail the launch.
//
// Building needs only g++ (no Go toolchain), so a prebuilt test binary can build the stand-in
// on another machine.
package standin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

//go:embed csrc/*.cc csrc/*.h
var sources embed.FS

// Files are the files a build puts in its folder: the libraries under the names the CUDA
// backend looks for, and the device process they start.
var Files = []string{"libcuda.so.1", "libnvrtc.so.12", "libnvrtc-builtins.so.12.8", "libcublas.so.12", "libcublasLt.so.12", "cudasim-device"}

const stampFile = "cudasim.stamp"

// buildVersion changes when the commands below change in a way the sources do not show.
const buildVersion = "3"

// Options tune a build.
type Options struct {
	CXX string    // the C++ compiler; default $CUDASIM_CXX, else g++ on PATH
	Log io.Writer // progress lines; nil for none
}

// Result says what a build did.
type Result struct {
	Dir   string `json:"dir"`
	Built bool   `json:"built"` // false when the folder was already up to date
	Hash  string `json:"hash"`  // of the sources, the compiler and the CPU
	CXX   string `json:"cxx"`
}

// Build puts the stand-in's files into dir, compiling them only when dir does not already
// hold a build of the same sources with the same compiler on the same CPU.
func Build(dir string) error {
	_, err := BuildWith(dir, Options{})
	return err
}

// BuildWith is Build with options.
func BuildWith(dir string, o Options) (Result, error) {
	cxx, err := compiler(o.CXX)
	if err != nil {
		return Result{}, err
	}
	hash, err := Hash(cxx)
	if err != nil {
		return Result{}, err
	}
	res := Result{Dir: dir, Hash: hash, CXX: cxx}
	if upToDate(dir, hash) {
		return res, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("cudasim: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, ".cudasim.lock"))
	if err != nil {
		return res, err
	}
	defer unlock()
	if upToDate(dir, hash) { // built meanwhile by another process
		return res, nil
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "cudasim: building the CUDA stand-in into %s with %s\n", dir, cxx)
	}
	if err := build(dir, cxx, o.Log); err != nil {
		return res, err
	}
	if err := writeAtomic(filepath.Join(dir, stampFile), []byte(hash+"\n"), 0o644); err != nil {
		return res, err
	}
	res.Built = true
	return res, nil
}

var ensure struct {
	once sync.Once
	dir  string
	err  error
}

// Ensure builds the stand-in once into the user's cache folder
// (…/rlhfstation/cudasim/<hash>) and returns that folder; later calls in the process return
// the same answer. Concurrent test binaries share one build.
func Ensure() (string, error) {
	ensure.once.Do(func() {
		cxx, err := compiler("")
		if err != nil {
			ensure.err = err
			return
		}
		hash, err := Hash(cxx)
		if err != nil {
			ensure.err = err
			return
		}
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir := filepath.Join(base, "rlhfstation", "cudasim", hash[:16])
		_, ensure.err = BuildWith(dir, Options{CXX: cxx})
		ensure.dir = dir
	})
	return ensure.dir, ensure.err
}

func compiler(cxx string) (string, error) {
	if cxx == "" {
		cxx = os.Getenv("CUDASIM_CXX")
	}
	if cxx == "" {
		cxx = "g++"
	}
	p, err := exec.LookPath(cxx)
	if err != nil {
		return "", fmt.Errorf("cudasim: the stand-in needs a C++ compiler (%s not found; set CUDASIM_CXX): %w", cxx, err)
	}
	return p, nil
}

// Hash identifies a build: the embedded sources, this package's build commands, the
// compiler (its path and version) and the CPU's features (the device code is built for
// this CPU).
func Hash(cxx string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "build %s\x00%s\x00", buildVersion, cxx)
	out, err := exec.Command(cxx, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("cudasim: %s --version: %w", cxx, err)
	}
	h.Write(out)
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "flags") {
				h.Write([]byte(line))
				break
			}
		}
	}
	names, err := fs.Glob(sources, "csrc/*")
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func upToDate(dir, hash string) bool {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || strings.TrimSpace(string(b)) != hash {
		return false
	}
	for _, f := range Files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cudasim: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("cudasim: locking %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// writeAtomic writes a file through a temporary name and a rename, so a reader never sees
// half of it (a library being replaced keeps its old inode for processes that loaded it).
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("cudasim: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cudasim: %w", err)
	}
	return nil
}

// step is one compiler run producing out (a file name in the work folder).
type step struct {
	out  string
	args []string
	deps []string // outputs of other steps it needs
}

func build(dir, cxx string, log io.Writer) error {
	work, err := os.MkdirTemp("", "cudasim-build-")
	if err != nil {
		return fmt.Errorf("cudasim: %w", err)
	}
	defer os.RemoveAll(work)
	names, _ := fs.Glob(sources, "csrc/*")
	for _, n := range names {
		b, _ := sources.ReadFile(n)
		if err := os.WriteFile(filepath.Join(work, filepath.Base(n)), b, 0o644); err != nil {
			return fmt.Errorf("cudasim: %w", err)
		}
	}
	if err := writeEmbedded(work); err != nil {
		return err
	}
	lib := []string{"-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall"}
	steps := []step{
		{out: "libcuda.so.1", args: append(slices.Clone(lib), "-Wl,-soname,libcuda.so.1", "driver.cc")},
		{out: "libnvrtc.so.12", args: append(slices.Clone(lib), "-Wl,-soname,libnvrtc.so.12", "-DCUDASIM_DEFAULT_CXX=\""+cxx+"\"", "nvrtc.cc", "-ldl")},
		{out: "cudasim-device", args: []string{"-std=c++17", "-O2", "-march=native", "-Wall", "device.cc", "gemm.cc", "-ldl", "-lpthread"}},
		{out: "libnvrtc-builtins.so.12.8", args: append(slices.Clone(lib), "-Wl,-soname,libnvrtc-builtins.so.12.8", "builtins.cc")},
		{out: "libcublasLt.so.12", args: append(slices.Clone(lib), "-Wl,-soname,libcublasLt.so.12", "cublaslt.cc")},
		{out: "libcublas.so.12", args: append(slices.Clone(lib), "-Wl,-soname,libcublas.so.12", "-Wl,-rpath,$ORIGIN", "cublas.cc", "libcuda.so.1"),
			deps: []string{"libcuda.so.1"}},
	}
	if err := runSteps(work, cxx, steps, log); err != nil {
		return err
	}
	for _, f := range Files {
		b, err := os.ReadFile(filepath.Join(work, f))
		if err != nil {
			return fmt.Errorf("cudasim: %w", err)
		}
		if err := writeAtomic(filepath.Join(dir, f), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// runSteps runs the compiler steps, two at a time where they do not depend on each other.
func runSteps(work, cxx string, steps []step, log io.Writer) error {
	done := map[string]chan struct{}{}
	for _, s := range steps {
		done[s.out] = make(chan struct{})
	}
	sem := make(chan struct{}, 2)
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, s := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[s.out])
			for _, d := range s.deps {
				<-done[d]
			}
			for j, t := range steps {
				if slices.Contains(s.deps, t.out) && errs[j] != nil {
					errs[i] = errs[j]
					return
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append(slices.Clone(s.args), "-o", s.out)
			cmd := exec.Command(cxx, args...)
			cmd.Dir = work
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("cudasim: building %s: %s %s: %v\n%s", s.out, cxx, strings.Join(args, " "), err, out)
				return
			}
			if log != nil {
				fmt.Fprintf(log, "cudasim: built %s\n", s.out)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeEmbedded writes embedded.h: shim.h and kernel_abi.h as C++ strings, which
// libnvrtc.so.12 writes out for each compilation.
func writeEmbedded(work string) error {
	var b strings.Builder
	b.WriteString("#pragma once\n")
	for _, f := range []struct{ name, file string }{{"SHIM_H", "shim.h"}, {"KERNEL_ABI_H", "kernel_abi.h"}} {
		text, err := sources.ReadFile("csrc/" + f.file)
		if err != nil {
			return err
		}
		if strings.Contains(string(text), ")CUDASIM_EMBED\"") {
			return fmt.Errorf("cudasim: %s contains the embedding delimiter", f.file)
		}
		fmt.Fprintf(&b, "static const char %s[] = R\"CUDASIM_EMBED(%s)CUDASIM_EMBED\";\n", f.name, text)
	}
	return os.WriteFile(filepath.Join(work, "embedded.h"), []byte(b.String()), 0o644)
}
