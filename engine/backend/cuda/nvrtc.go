package cuda

import (
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// nvrtc is NVIDIA's runtime compiler, loaded with its builtins library preloaded by full
// path (otherwise compiling fails with "failed to open libnvrtc-builtins").
type nvrtc struct {
	lib
	builtins                                          lib
	nvrtcVersion, nvrtcGetErrorString                 uintptr
	nvrtcCreateProgram, nvrtcDestroyProgram           uintptr
	nvrtcCompileProgram                               uintptr
	nvrtcGetProgramLogSize, nvrtcGetProgramLog        uintptr
	nvrtcGetCUBINSize, nvrtcGetCUBIN                  uintptr
	nvrtcGetPTXSize, nvrtcGetPTX                      uintptr
	nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs uintptr
	major, minor                                      int
}

func openNVRTC(path, builtins string) (*nvrtc, error) {
	n := &nvrtc{}
	if builtins != "" {
		b, err := dlopen(builtins, true)
		if err != nil {
			return nil, err
		}
		n.builtins = b
	}
	l, err := dlopen(path, true)
	if err != nil {
		return nil, err
	}
	n.lib = l
	if err := l.bind([]symbol{{"nvrtcVersion", &n.nvrtcVersion}, {"nvrtcGetErrorString", &n.nvrtcGetErrorString},
		{"nvrtcCreateProgram", &n.nvrtcCreateProgram}, {"nvrtcDestroyProgram", &n.nvrtcDestroyProgram},
		{"nvrtcCompileProgram", &n.nvrtcCompileProgram},
		{"nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize}, {"nvrtcGetProgramLog", &n.nvrtcGetProgramLog},
		{"nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize}, {"nvrtcGetCUBIN", &n.nvrtcGetCUBIN},
		{"nvrtcGetPTXSize", &n.nvrtcGetPTXSize}, {"nvrtcGetPTX", &n.nvrtcGetPTX}}); err != nil {
		return nil, err
	}
	// Optional (NVRTC 11.2+): without them every architecture is attempted as asked.
	_ = l.bind([]symbol{{"nvrtcGetNumSupportedArchs", &n.nvrtcGetNumSupportedArchs}})
	_ = l.bind([]symbol{{"nvrtcGetSupportedArchs", &n.nvrtcGetSupportedArchs}})
	var maj, mnr int32
	if err := n.check("nvrtcVersion", call(n.nvrtcVersion, uintptr(unsafe.Pointer(&maj)), uintptr(unsafe.Pointer(&mnr)))); err != nil {
		return nil, err
	}
	n.major, n.minor = int(maj), int(mnr)
	return n, nil
}

func (n *nvrtc) check(what string, r int) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: what, Code: r, Name: fmt.Sprintf("nvrtcResult %d", r)}
	if n.nvrtcGetErrorString != 0 {
		if s := gostring(callPtr(n.nvrtcGetErrorString, uintptr(r))); s != "" {
			e.Name = s
		}
	}
	return e
}

// supportedArchs lists the sm_XY numbers (XY = 10·major+minor) this NVRTC can compile to,
// nil when it cannot say.
func (n *nvrtc) supportedArchs() []int {
	if n.nvrtcGetNumSupportedArchs == 0 || n.nvrtcGetSupportedArchs == 0 {
		return nil
	}
	var k int32
	if call(n.nvrtcGetNumSupportedArchs, uintptr(unsafe.Pointer(&k))) != 0 || k <= 0 || k > 1024 {
		return nil
	}
	a := make([]int32, k)
	if call(n.nvrtcGetSupportedArchs, uintptr(unsafe.Pointer(&a[0]))) != 0 {
		return nil
	}
	out := make([]int, k)
	for i, v := range a {
		out[i] = int(v)
	}
	slices.Sort(out)
	return out
}

// target picks what to compile for a device of capability sm: its own CUBIN when this NVRTC
// knows the architecture, else PTX for the newest architecture it knows below it, which the
// driver then compiles (it may, being newer than NVRTC).
func (n *nvrtc) target(sm int) (arch string, cubin bool) {
	archs := n.supportedArchs()
	if archs == nil || slices.Contains(archs, sm) {
		return fmt.Sprintf("sm_%d", sm), true
	}
	best := 0
	for _, a := range archs {
		if a <= sm {
			best = a
		}
	}
	if best == 0 {
		return fmt.Sprintf("sm_%d", sm), true
	}
	return fmt.Sprintf("compute_%d", best), false
}

// compiled is the result of one NVRTC compilation.
type compiled struct {
	Image []byte // CUBIN, or NUL-terminated PTX
	CUBIN bool
	Log   string // compiler and ptxas messages (--ptxas-options=-v: registers, spills per kernel)
}

// compile compiles one translation unit for arch (sm_XY gives a CUBIN, compute_XY PTX).
func (n *nvrtc) compile(src, name, arch string, extra ...string) (*compiled, error) {
	csrc, cname := cstring(src), cstring(name)
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", call(n.nvrtcCreateProgram, uintptr(unsafe.Pointer(&prog)),
		uintptr(unsafe.Pointer(&csrc[0])), uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)); err != nil {
		return nil, err
	}
	defer call(n.nvrtcDestroyProgram, uintptr(unsafe.Pointer(&prog)))
	opts := append([]string{"--gpu-architecture=" + arch, "--std=c++17", "--ptxas-options=-v"}, extra...)
	copts := make([][]byte, len(opts))
	ptrs := make([]uintptr, len(opts))
	for i, o := range opts {
		copts[i] = cstring(o)
		ptrs[i] = uintptr(unsafe.Pointer(&copts[i][0]))
	}
	r := call(n.nvrtcCompileProgram, prog, uintptr(len(ptrs)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts)
	var size uint64
	log := ""
	if call(n.nvrtcGetProgramLogSize, prog, uintptr(unsafe.Pointer(&size))) == 0 && size > 1 {
		b := make([]byte, size)
		if call(n.nvrtcGetProgramLog, prog, uintptr(unsafe.Pointer(&b[0]))) == 0 {
			log = strings.TrimRight(string(b[:size-1]), "\x00\n")
		}
	}
	if err := n.check("nvrtcCompileProgram", r); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	c := &compiled{Log: log, CUBIN: strings.HasPrefix(arch, "sm_")}
	sizeFn, getFn, what := n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "nvrtcGetCUBIN"
	if !c.CUBIN {
		sizeFn, getFn, what = n.nvrtcGetPTXSize, n.nvrtcGetPTX, "nvrtcGetPTX"
	}
	if err := n.check(what+"Size", call(sizeFn, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, fmt.Errorf("%s: empty image for %s", what, arch)
	}
	c.Image = make([]byte, size)
	if err := n.check(what, call(getFn, prog, uintptr(unsafe.Pointer(&c.Image[0])))); err != nil {
		return nil, err
	}
	return c, nil
}

// KernelReport is ptxas' verdict on one kernel.
type KernelReport struct {
	Name        string
	Registers   int
	SpillStores int // bytes
	SpillLoads  int // bytes
	StackFrame  int // bytes
	Shared      int // static shared memory, bytes
}

var (
	reFunction  = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	reFrame     = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	reRegisters = regexp.MustCompile(`Used (\d+) registers`)
	reShared    = regexp.MustCompile(`(\d+) bytes smem`)
)

// parseReport reads ptxas' -v output (one "Compiling entry function" paragraph per kernel).
func parseReport(log string) []KernelReport {
	var out []KernelReport
	var cur *KernelReport
	for _, line := range strings.Split(log, "\n") {
		if m := reFunction.FindStringSubmatch(line); m != nil {
			out = append(out, KernelReport{Name: m[1]})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		if m := reFrame.FindStringSubmatch(line); m != nil {
			cur.StackFrame, _ = strconv.Atoi(m[1])
			cur.SpillStores, _ = strconv.Atoi(m[2])
			cur.SpillLoads, _ = strconv.Atoi(m[3])
		}
		if m := reRegisters.FindStringSubmatch(line); m != nil {
			cur.Registers, _ = strconv.Atoi(m[1])
			if s := reShared.FindStringSubmatch(line); s != nil {
				cur.Shared, _ = strconv.Atoi(s[1])
			}
		}
	}
	return out
}
