package main

import (
	"math"
	"testing"
	"unsafe"
)

func pinned(t testing.TB, a *api, n int) []float32 {
	t.Helper()
	var h uintptr
	a.ok(t, "cuMemHostAlloc", a.cuMemHostAlloc(&h, uint64(4*n), 0))
	t.Cleanup(func() { a.cuMemFreeHost(h) })
	return unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(nil), h)), n)
}

// TestMissingSync: work on a non-blocking stream runs only when that stream is
// synchronised; a synchronous copy (legacy stream) does not wait for it, as on a GPU.
func TestMissingSync(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "add_one")
	var s uintptr
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&s, 1)) // CU_STREAM_NON_BLOCKING
	defer a.cuStreamDestroy(s)
	const n = 1000
	p := upload(t, a, make([]float32, n))
	a.ok(t, "launch", a.launch(f, d1(4, 128), s, p, int64(n)))
	if got := download[float32](t, a, p, n); got[0] != 0 || got[n-1] != 0 {
		t.Fatalf("the kernel ran before its stream was synchronised: %v", got[0])
	}
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s))
	if got := download[float32](t, a, p, n); got[0] != 1 || got[n-1] != 1 {
		t.Fatalf("after the sync: %v %v", got[0], got[n-1])
	}

	// Pinned memory: an async download lands at the sync, an async upload reads at the sync.
	h := pinned(t, a, n)
	for i := range h {
		h[i] = -5
	}
	a.ok(t, "cuMemcpyDtoHAsync", a.cuMemcpyDtoHAsync(uintptr(unsafe.Pointer(&h[0])), p, 4*n, s))
	if h[0] != -5 {
		t.Fatalf("an async copy into pinned memory completed without a sync")
	}
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s))
	if h[0] != 1 || h[n-1] != 1 {
		t.Fatalf("pinned after the sync: %v", h[0])
	}
	for i := range h {
		h[i] = 7
	}
	a.ok(t, "cuMemcpyHtoDAsync", a.cuMemcpyHtoDAsync(p, uintptr(unsafe.Pointer(&h[0])), 4*n, s))
	h[3] = 9 // the staging buffer reused before the copy ran
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s))
	if got := download[float32](t, a, p, n); got[3] != 9 || got[4] != 7 {
		t.Fatalf("the upload from pinned memory read %v %v, want the bytes at the sync (9 7)", got[3], got[4])
	}

	// Pageable memory: the upload's bytes are taken at the call.
	x := make([]float32, n)
	for i := range x {
		x[i] = 3
	}
	a.ok(t, "cuMemcpyHtoDAsync", a.cuMemcpyHtoDAsync(p, uintptr(unsafe.Pointer(&x[0])), 4*n, s))
	x[0] = 4
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s))
	if got := download[float32](t, a, p, 2); got[0] != 3 {
		t.Fatalf("pageable upload read %v at the sync, want 3 (taken at the call)", got[0])
	}

	// A blocking stream synchronises with the legacy stream: a synchronous copy waits for it.
	var b uintptr
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&b, 0))
	defer a.cuStreamDestroy(b)
	a.ok(t, "launch", a.launch(f, d1(4, 128), b, p, int64(n)))
	if got := download[float32](t, a, p, 1); got[0] != 4 {
		t.Fatalf("blocking stream: %v, want 4", got[0])
	}
}

func TestEvents(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "add_one")
	var s, e0, e1 uintptr
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&s, 1))
	defer a.cuStreamDestroy(s)
	a.ok(t, "cuEventCreate", a.cuEventCreate(&e0, 0))
	a.ok(t, "cuEventCreate", a.cuEventCreate(&e1, 0))
	defer a.cuEventDestroy(e0)
	defer a.cuEventDestroy(e1)
	var ms float32
	a.want(t, "cuEventElapsedTime before recording", a.cuEventElapsedTime(&ms, e0, e1), 400)
	const n = 1 << 20
	p := alloc(t, a, 4*n)
	a.ok(t, "cuEventRecord", a.cuEventRecord(e0, s))
	a.ok(t, "launch", a.launch(f, d1(256, 256), s, p, int64(n)))
	a.ok(t, "cuEventRecord", a.cuEventRecord(e1, s))
	a.want(t, "cuEventElapsedTime before completion", a.cuEventElapsedTime(&ms, e0, e1), 600)
	a.want(t, "cuEventQuery", a.cuEventQuery(e1), 600) // runs the work, says not ready once
	a.ok(t, "cuEventQuery", a.cuEventQuery(e1))
	a.ok(t, "cuEventSynchronize", a.cuEventSynchronize(e1))
	a.ok(t, "cuEventElapsedTime", a.cuEventElapsedTime(&ms, e0, e1))
	if !(ms > 0) || ms > 60000 {
		t.Errorf("elapsed %v ms", ms)
	}
	var nt uintptr
	a.ok(t, "cuEventCreate", a.cuEventCreate(&nt, 2)) // CU_EVENT_DISABLE_TIMING
	defer a.cuEventDestroy(nt)
	a.ok(t, "cuEventRecord", a.cuEventRecord(nt, s))
	a.ok(t, "cuEventSynchronize", a.cuEventSynchronize(nt))
	a.want(t, "cuEventElapsedTime without timing", a.cuEventElapsedTime(&ms, e0, nt), 400)
}

// TestGraph: a captured sequence (memset, kernel, copy within the device) replays with
// whatever the buffers hold at each launch; a sync or an allocation during the capture
// invalidates it.
func TestGraph(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "add_one")
	var s uintptr
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&s, 1))
	defer a.cuStreamDestroy(s)
	const n = 300
	x := alloc(t, a, 4*n)
	y := alloc(t, a, 4*n)
	a.ok(t, "cuStreamBeginCapture", a.cuStreamBeginCapture(s, 1))
	a.ok(t, "cuMemsetD32Async", a.cuMemsetD32Async(y, math.Float32bits(10), n, s))
	a.ok(t, "launch", a.launch(f, d1(2, 128), s, x, int64(n)))
	a.ok(t, "launch", a.launch(f, d1(2, 128), s, x, int64(n)))
	a.ok(t, "cuMemcpyDtoDAsync", a.cuMemcpyDtoDAsync(y+4, x, 4*(n-1), s))
	var g, e uintptr
	a.ok(t, "cuStreamEndCapture", a.cuStreamEndCapture(s, &g))
	a.ok(t, "cuGraphInstantiateWithFlags", a.cuGraphInstantiateWithFlags(&e, g, 0))
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i)
	}
	a.ok(t, "cuMemcpyHtoD", a.cuMemcpyHtoD(x, unsafe.Pointer(&in[0]), 4*n))
	if got := download[float32](t, a, y, 1); math.Float32bits(got[0]) != 0xffffffff {
		t.Fatalf("the capture ran its work: %v", got[0])
	}
	for rep := 1; rep <= 2; rep++ {
		a.ok(t, "cuGraphLaunch", a.cuGraphLaunch(e, s))
		a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s))
		got := download[float32](t, a, y, n)
		if got[0] != 10 || got[1] != float32(2*rep) || got[n-1] != float32(n-2+2*rep) {
			t.Fatalf("replay %d: %v %v %v", rep, got[0], got[1], got[n-1])
		}
	}
	a.ok(t, "cuGraphExecDestroy", a.cuGraphExecDestroy(e))
	a.ok(t, "cuGraphDestroy", a.cuGraphDestroy(g))

	a.ok(t, "cuStreamBeginCapture", a.cuStreamBeginCapture(s, 1))
	a.want(t, "cuStreamSynchronize during capture", a.cuStreamSynchronize(s), 900)
	a.want(t, "cuStreamEndCapture after an invalid call", a.cuStreamEndCapture(s, &g), 901)
	a.ok(t, "cuStreamBeginCapture", a.cuStreamBeginCapture(s, 1))
	var p uint64
	a.want(t, "cuMemAlloc during capture", a.cuMemAlloc(&p, 64), 900)
	a.want(t, "cuStreamEndCapture after an allocation", a.cuStreamEndCapture(s, &g), 901)
	a.ok(t, "cuStreamBeginCapture(relaxed)", a.cuStreamBeginCapture(s, 2))
	a.ok(t, "cuMemAlloc during a relaxed capture", a.cuMemAlloc(&p, 64))
	a.want(t, "cuCtxSynchronize during a relaxed capture", a.cuCtxSynchronize(), 900)
	a.want(t, "cuStreamEndCapture after a context sync", a.cuStreamEndCapture(s, &g), 901)
	a.want(t, "cuStreamBeginCapture on the legacy stream", a.cuStreamBeginCapture(0, 1), 900)
	a.want(t, "cuStreamEndCapture without a capture", a.cuStreamEndCapture(s, &g), 401)
}

// TestLaunchChecks: launches a GPU refuses are refused with the documented codes.
func TestLaunchChecks(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	m := a.load(t, testKernels(t, a))
	f := m.fn(t, "add_one")
	nf := m.fn(t, "nf4_dequant") // __launch_bounds__(256)
	r := m.fn(t, "reverse")
	p := alloc(t, a, 4096)
	a.want(t, "1025 threads", a.launch(f, d1(1, 1025), 0, p, int64(1)), 1)
	a.want(t, "an empty grid", a.launch(f, d1(0, 32), 0, p, int64(1)), 1)
	a.want(t, "block z of 65", a.launch(f, dims{grid: [3]uint32{1, 1, 1}, block: [3]uint32{1, 1, 65}}, 0, p, int64(1)), 1)
	a.want(t, "grid y of 65536", a.launch(f, dims{grid: [3]uint32{1, 65536, 1}, block: [3]uint32{32, 1, 1}}, 0, p, int64(1)), 1)
	a.want(t, "above the launch bounds", a.launch(nf, d1(1, 512), 0, p, p, p, p, p, p, float32(0), int64(0)), 701)
	d := d1(1, 32)
	d.shared = 64 << 10
	a.want(t, "64 KiB of dynamic shared memory", a.launch(r, d, 0, p, p), 1)
	a.ok(t, "cuFuncSetAttribute", a.cuFuncSetAttribute(r, 8, 64<<10))
	a.ok(t, "64 KiB after raising the limit", a.launch(r, d, 0, p, p))
	a.want(t, "cuFuncSetAttribute above the opt-in limit", a.cuFuncSetAttribute(r, 8, 300<<10), 1)
	a.want(t, "no parameters", a.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, nil, nil), 1)
	a.want(t, "a stale function", a.launch(f+1, d1(1, 32), 0, p, int64(1)), 400)
	a.ok(t, "cuCtxSynchronize", a.cuCtxSynchronize())
}

// TestStreamWaitEvent: work a stream waits for (through an event) runs before it; without
// the wait, the other stream's work has not run when the first is synchronised.
func TestStreamWaitEvent(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "add_one")
	var s1, s2, e uintptr
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&s1, 1))
	a.ok(t, "cuStreamCreate", a.cuStreamCreate(&s2, 1))
	defer a.cuStreamDestroy(s1)
	defer a.cuStreamDestroy(s2)
	a.ok(t, "cuEventCreate", a.cuEventCreate(&e, 2))
	defer a.cuEventDestroy(e)
	const n = 256
	x := upload(t, a, make([]float32, n))
	y := upload(t, a, make([]float32, n))
	a.ok(t, "launch", a.launch(f, d1(1, 256), s1, x, int64(n)))
	a.ok(t, "cuMemcpyDtoDAsync", a.cuMemcpyDtoDAsync(y, x, 4*n, s2)) // no wait: copies the old x
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s2))
	if got := download[float32](t, a, y, 1); got[0] != 0 {
		t.Fatalf("without the wait: %v, want 0", got[0])
	}
	a.ok(t, "cuEventRecord", a.cuEventRecord(e, s1))
	a.ok(t, "cuStreamWaitEvent", a.cuStreamWaitEventF(s2, e, 0))
	a.ok(t, "cuMemcpyDtoDAsync", a.cuMemcpyDtoDAsync(y, x, 4*n, s2))
	a.ok(t, "cuStreamSynchronize", a.cuStreamSynchronize(s2))
	if got := download[float32](t, a, y, 1); got[0] != 1 {
		t.Fatalf("after waiting for the event: %v, want 1", got[0])
	}
}

// TestPinnedFromKernel: with unified addressing a kernel reaches cuMemHostAlloc memory at its
// host address; what it writes there is the host's after a sync.
func TestPinnedFromKernel(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, plantedKernels(t, a)).fn(t, "write_anywhere")
	var h uintptr
	a.ok(t, "cuMemHostAlloc", a.cuMemHostAlloc(&h, 64, 0))
	defer a.cuMemFreeHost(h)
	host := unsafe.Slice((*uint64)(unsafe.Add(unsafe.Pointer(nil), h)), 8)
	host[0] = 7
	a.ok(t, "launch", a.launch(f, d1(1, 1), 0, uint64(h)))
	a.ok(t, "cuCtxSynchronize", a.cuCtxSynchronize())
	if host[0] != 1 {
		t.Fatalf("pinned memory holds %d after the kernel, want 1", host[0])
	}
}
