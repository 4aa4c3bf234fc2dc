package cuda

import (
	"fmt"
	"unsafe"
)

// driver is the slice of the CUDA driver API the backend calls, by the _v2 names the
// current headers map the plain names to.
type driver struct {
	lib
	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString                         uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute                 uintptr
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease                uintptr
	cuCtxSetCurrent, cuCtxSynchronize                                                    uintptr
	cuMemAlloc, cuMemFree, cuMemGetInfo                                                  uintptr
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                              uintptr
	cuMemsetD8Async, cuMemsetD32Async                                                    uintptr
	cuMemHostAlloc, cuMemFreeHost                                                        uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction                                uintptr
	cuFuncGetAttribute, cuFuncSetAttribute, cuLaunchKernel                               uintptr
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize                                 uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime, cuEventDestroy uintptr
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate, cuGraphLaunch          uintptr
	cuGraphExecDestroy, cuGraphDestroy                                                   uintptr
}

// The few symbols needed to say why a device cannot be used; the rest bind after cuInit.
func (d *driver) probeSymbols() []symbol {
	return []symbol{{"cuInit", &d.cuInit}, {"cuDriverGetVersion", &d.cuDriverGetVersion},
		{"cuGetErrorName", &d.cuGetErrorName}, {"cuGetErrorString", &d.cuGetErrorString},
		{"cuDeviceGetCount", &d.cuDeviceGetCount}, {"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName}, {"cuDeviceGetAttribute", &d.cuDeviceGetAttribute},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem}}
}

func (d *driver) symbols() []symbol {
	return []symbol{
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain}, {"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent}, {"cuCtxSynchronize", &d.cuCtxSynchronize},
		{"cuMemAlloc_v2", &d.cuMemAlloc}, {"cuMemFree_v2", &d.cuMemFree}, {"cuMemGetInfo_v2", &d.cuMemGetInfo},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync}, {"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync},
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync},
		{"cuMemsetD8Async", &d.cuMemsetD8Async}, {"cuMemsetD32Async", &d.cuMemsetD32Async},
		{"cuMemHostAlloc", &d.cuMemHostAlloc}, {"cuMemFreeHost", &d.cuMemFreeHost},
		{"cuModuleLoadData", &d.cuModuleLoadData}, {"cuModuleUnload", &d.cuModuleUnload},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuFuncGetAttribute", &d.cuFuncGetAttribute}, {"cuFuncSetAttribute", &d.cuFuncSetAttribute},
		{"cuLaunchKernel", &d.cuLaunchKernel},
		{"cuStreamCreate", &d.cuStreamCreate}, {"cuStreamDestroy_v2", &d.cuStreamDestroy},
		{"cuStreamSynchronize", &d.cuStreamSynchronize},
		{"cuEventCreate", &d.cuEventCreate}, {"cuEventRecord", &d.cuEventRecord},
		{"cuEventSynchronize", &d.cuEventSynchronize}, {"cuEventElapsedTime", &d.cuEventElapsedTime},
		{"cuEventDestroy_v2", &d.cuEventDestroy},
		{"cuStreamBeginCapture_v2", &d.cuStreamBeginCapture}, {"cuStreamEndCapture", &d.cuStreamEndCapture},
		{"cuGraphInstantiateWithFlags", &d.cuGraphInstantiate}, {"cuGraphLaunch", &d.cuGraphLaunch},
		{"cuGraphExecDestroy", &d.cuGraphExecDestroy}, {"cuGraphDestroy", &d.cuGraphDestroy},
	}
}

// Driver API constants (cuda.h).
const (
	cudaErrorNoDevice       = 100
	attrMultiprocessorCount = 16
	attrComputeCapMajor     = 75
	attrComputeCapMinor     = 76
	streamNonBlocking       = 1
	eventDefault            = 0
	captureModeRelaxed      = 2
)

// Error is a failed driver, NVRTC or cuBLAS call.
type Error struct {
	Call string // the function
	Code int
	Name string // CUDA_ERROR_…, NVRTC_ERROR_…, CUBLAS_STATUS_…
	Msg  string // the library's description, when it has one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
	if e.Msg != "" && e.Msg != e.Name {
		s += ": " + e.Msg
	}
	return s
}

// check turns a CUresult into an error naming the call.
func (d *driver) check(what string, r int) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: what, Code: r, Name: fmt.Sprintf("CUresult %d", r)}
	if d.cuGetErrorName != 0 {
		var name, msg uintptr
		if call(d.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&name))) == 0 {
			e.Name = gostring(name)
		}
		if call(d.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&msg))) == 0 {
			e.Msg = gostring(msg)
		}
	}
	return e
}

func (d *driver) attribute(attr int, dev int32) (int, error) {
	var v int32
	if err := d.check("cuDeviceGetAttribute", call(d.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev))); err != nil {
		return 0, err
	}
	return int(v), nil
}
