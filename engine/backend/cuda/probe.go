package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// MinCapability is the oldest architecture the kernels target: bf16 tensor cores and
// conversions arrived with Ampere (8.0).
const MinCapability = 80

// Info describes the device a backend would run on and the libraries it would use.
type Info struct {
	Name          string
	Major, Minor  int   // compute capability
	SMs           int   // multiprocessors
	TotalMem      int64 // bytes
	DriverVersion int   // cuDriverGetVersion: 1000·major + 10·minor
	Libs          Libs
}

// Capability is 10·major + minor (90 for an H100).
func (i Info) Capability() int { return 10*i.Major + i.Minor }

func (i Info) String() string {
	return fmt.Sprintf("%s (compute %d.%d, %d SMs, %.1f GiB; driver CUDA %d.%d)", i.Name, i.Major, i.Minor, i.SMs,
		float64(i.TotalMem)/(1<<30), i.DriverVersion/1000, i.DriverVersion%1000/10)
}

// UnavailableError says why CUDA cannot be used here, in words for the user.
type UnavailableError struct {
	Reason string // in full: what failed and where it looked
	Brief  string // in a few words, for a note beside a fallback to the CPU
	Err    error  // the underlying failure, when there is one
}

func (e *UnavailableError) Error() string { return e.Reason }
func (e *UnavailableError) Unwrap() error { return e.Err }

// loaded is the process's one driver: libcuda can be initialised once.
var loaded struct {
	once sync.Once
	drv  *driver
	info Info
	err  error
}

// Probe finds a usable device and the libraries, or says why there is none: no libcuda,
// cuInit failing (100: no device), no device, a capability below 8.0, NVRTC or cuBLAS not
// found (with the places searched). It initialises the driver once per process; later calls
// return the first answer.
func Probe() (Info, error) {
	loaded.once.Do(func() {
		loaded.drv, loaded.info, loaded.err = probe(osLibEnv)
	})
	return loaded.info, loaded.err
}

func probe(envOf func(driverVersion int) libEnv) (*driver, Info, error) {
	var info Info
	d, tried, err := openDriver(cudaCandidates(envOf(0)))
	if err != nil {
		return nil, info, &UnavailableError{Reason: fmt.Sprintf("no NVIDIA driver library: libcuda.so.1 not loadable (tried %s)",
			strings.Join(tried, ", ")), Brief: "no NVIDIA driver (libcuda.so.1 not found)", Err: err}
	}
	info.Libs.CUDA = d.path
	var v int32
	if err := d.check("cuDriverGetVersion", call(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v)))); err != nil {
		return nil, info, &UnavailableError{Reason: "the NVIDIA driver does not answer: " + err.Error(), Err: err}
	}
	info.DriverVersion = int(v)
	if err := d.check("cuInit", call(d.cuInit, 0)); err != nil {
		var ce *Error
		if errors.As(err, &ce) && ce.Code == cudaErrorNoDevice {
			return nil, info, &UnavailableError{Reason: fmt.Sprintf("cuInit returned 100 (CUDA_ERROR_NO_DEVICE): driver %s loaded (CUDA %d.%d) but no CUDA device is visible",
				d.path, v/1000, v%1000/10), Brief: "the NVIDIA driver sees no CUDA device (cuInit returned 100)", Err: err}
		}
		return nil, info, &UnavailableError{Reason: fmt.Sprintf("cuInit failed with driver %s: %v", d.path, err), Err: err}
	}
	var count int32
	if err := d.check("cuDeviceGetCount", call(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&count)))); err != nil {
		return nil, info, &UnavailableError{Reason: err.Error(), Err: err}
	}
	if count == 0 {
		return nil, info, &UnavailableError{Reason: "the NVIDIA driver sees no CUDA device", Brief: "the NVIDIA driver sees no CUDA device"}
	}
	var dev int32
	if err := d.check("cuDeviceGet", call(d.cuDeviceGet, uintptr(unsafe.Pointer(&dev)), 0)); err != nil {
		return nil, info, &UnavailableError{Reason: err.Error(), Err: err}
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", call(d.cuDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(dev))); err == nil {
		info.Name = strings.TrimRight(string(name[:clen(name)]), " ")
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrComputeCapMajor, &info.Major}, {attrComputeCapMinor, &info.Minor}, {attrMultiprocessorCount, &info.SMs}} {
		v, err := d.attribute(a.attr, dev)
		if err != nil {
			return nil, info, &UnavailableError{Reason: err.Error(), Err: err}
		}
		*a.dst = v
	}
	var total uint64
	if err := d.check("cuDeviceTotalMem", call(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(dev))); err == nil {
		info.TotalMem = int64(total)
	}
	if info.Capability() < MinCapability {
		msg := fmt.Sprintf("%s has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16)", info.Name, info.Major, info.Minor)
		return nil, info, &UnavailableError{Reason: msg, Brief: msg}
	}
	libs, err := findLibs(envOf(info.DriverVersion))
	if err != nil {
		var nf *NotFoundError
		brief := err.Error()
		if errors.As(err, &nf) {
			brief = nf.What + " not found"
		}
		return nil, info, &UnavailableError{Reason: err.Error() + " (install the CUDA toolkit or pip's nvidia-cuda-nvrtc and nvidia-cublas, or set " + LibsEnv + ")",
			Brief: info.Name + " found but " + brief, Err: err}
	}
	libs.CUDA = d.path
	info.Libs = libs
	if err := d.bind(d.symbols()); err != nil {
		return nil, info, &UnavailableError{Reason: "the NVIDIA driver is too old: " + err.Error(), Err: err}
	}
	return d, info, nil
}

// openDriver loads the first candidate that opens and binds the probe's symbols.
func openDriver(candidates []string) (*driver, []string, error) {
	var errs []error
	for _, c := range candidates {
		l, err := dlopen(c, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d := &driver{lib: l}
		if err := l.bind(d.probeSymbols()); err != nil {
			errs = append(errs, err)
			continue
		}
		return d, candidates, nil
	}
	return nil, candidates, errors.Join(errs...)
}

func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
