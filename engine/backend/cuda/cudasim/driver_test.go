package main

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

func TestDeviceQueries(t *testing.T) {
	a := stand(t)
	var v int32
	a.ok(t, "cuDriverGetVersion", a.cuDriverGetVersion(&v))
	if v/1000 != 12 {
		t.Errorf("driver version %d, want CUDA 12.x", v)
	}
	a.ok(t, "cuDeviceGetCount", a.cuDeviceGetCount(&v))
	if v != 1 {
		t.Errorf("%d devices", v)
	}
	var d int32
	a.ok(t, "cuDeviceGet", a.cuDeviceGet(&d, 0))
	a.want(t, "cuDeviceGet(1)", a.cuDeviceGet(&d, 1), 101)
	name := make([]byte, 128)
	a.ok(t, "cuDeviceGetName", a.cuDeviceGetName(&name[0], int32(len(name)), 0))
	if !strings.Contains(string(name), "sm_90") {
		t.Errorf("name %q", name)
	}
	for _, c := range []struct{ attr, want int32 }{{75, 9}, {76, 0}, {10, 32}, {1, 1024}, {8, 49152}, {97, 232448}, {16, 132}} {
		a.ok(t, "cuDeviceGetAttribute", a.cuDeviceGetAttribute(&v, c.attr, 0))
		if v != c.want {
			t.Errorf("attribute %d = %d, want %d", c.attr, v, c.want)
		}
	}
	a.want(t, "cuDeviceGetAttribute(unknown)", a.cuDeviceGetAttribute(&v, 100000, 0), 1)
	var total uint64
	a.ok(t, "cuDeviceTotalMem", a.cuDeviceTotalMem(&total, 0))
	if total < 1<<30 {
		t.Errorf("total memory %d", total)
	}
	var s uintptr
	a.want(t, "cuGetErrorName(12345)", a.cuGetErrorName(12345, &s), 1)
	a.ok(t, "cuGetErrorName(700)", a.cuGetErrorName(700, &s))
	if gostr(s) != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Errorf("name of 700: %q", gostr(s))
	}
}

// TestNoContext: a thread with no current context gets CUDA_ERROR_INVALID_CONTEXT.
func TestNoContext(t *testing.T) {
	a := stand(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for {
			var c uintptr
			a.cuCtxGetCurrent(&c)
			if c == 0 {
				break
			}
			a.cuCtxPopCurrent(nil)
		}
		var p uint64
		a.want(t, "cuMemAlloc without a context", a.cuMemAlloc(&p, 256), 201)
		a.want(t, "cuCtxSynchronize without a context", a.cuCtxSynchronize(), 201)
		var s uintptr
		a.want(t, "cuStreamCreate without a context", a.cuStreamCreate(&s, 0), 201)
	}()
	<-done
}

func TestMemory(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	// Fresh memory is NaN bytes.
	p := alloc(t, a, 1000)
	got := download[uint32](t, a, p, 250)
	for i, v := range got {
		if v != 0xffffffff {
			t.Fatalf("fresh memory word %d = %#x, want 0xffffffff", i, v)
		}
	}
	if p%256 != 0 {
		t.Errorf("allocation %#x not 256-byte aligned", p)
	}
	x := make([]float32, 250)
	for i := range x {
		x[i] = float32(i) * 0.5
	}
	a.ok(t, "cuMemcpyHtoD", a.cuMemcpyHtoD(p, unsafe.Pointer(&x[0]), 1000))
	q := alloc(t, a, 1000)
	a.ok(t, "cuMemcpyDtoD", a.cuMemcpyDtoD(q, p, 1000))
	y := download[float32](t, a, q, 250)
	for i := range x {
		if y[i] != x[i] {
			t.Fatalf("copy: element %d = %v, want %v", i, y[i], x[i])
		}
	}
	a.ok(t, "cuMemsetD32", a.cuMemsetD32(q+8, math.Float32bits(7), 3))
	a.ok(t, "cuMemsetD16", a.cuMemsetD16(q+100, 0xabcd, 2))
	a.ok(t, "cuMemsetD8", a.cuMemsetD8(q+200, 0x11, 4))
	b := download[byte](t, a, q, 1000)
	w := download[float32](t, a, q, 250)
	if w[2] != 7 || w[3] != 7 || w[4] != 7 || w[5] != x[5] || w[1] != x[1] {
		t.Errorf("cuMemsetD32: %v", w[:6])
	}
	if b[100] != 0xcd || b[101] != 0xab || b[103] != 0xab || b[200] != 0x11 || b[203] != 0x11 || b[204] == 0x11 {
		t.Errorf("cuMemsetD16/D8: % x / % x", b[100:105], b[200:205])
	}
	// Bad arguments.
	a.want(t, "cuMemAlloc(0)", a.cuMemAlloc(&p, 0), 1)
	a.want(t, "cuMemAlloc(1 PiB)", a.cuMemAlloc(&p, 1<<50), 2)
	a.want(t, "cuMemcpyHtoD past the end", a.cuMemcpyHtoD(q+996, unsafe.Pointer(&x[0]), 8), 1)
	a.want(t, "cuMemsetD32 misaligned", a.cuMemsetD32(q+2, 0, 1), 1)
	a.want(t, "cuMemFree(interior)", a.cuMemFree(q+4), 1)
	var free, total uint64
	a.ok(t, "cuMemGetInfo", a.cuMemGetInfo(&free, &total))
	a.ok(t, "cuMemFree", a.cuMemFree(q))
	var free2 uint64
	a.ok(t, "cuMemGetInfo", a.cuMemGetInfo(&free2, &total))
	if free2 <= free {
		t.Errorf("free memory %d after a free, %d before", free2, free)
	}
	a.want(t, "cuMemFree twice", a.cuMemFree(q), 1)
}
