package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Device is an open CUDA device: a context, one stream, cuBLAS and the compiled kernels.
//
// A CUDA context is current per OS thread and Go moves goroutines between threads, so one
// goroutine locked to its thread owns the context and makes every driver, cuBLAS and launch
// call. Work reaches it through a queue: enqueue returns at once (the GPU runs
// asynchronously anyway), do waits for the answer. The first failure of queued work is kept
// and returned by the next do, Sync or download; work queued after it is dropped, as a CUDA
// context's errors are sticky.
type Device struct {
	Info Info

	drv   *driver
	rtc   *nvrtc
	blas  *cublas
	queue chan func()
	done  chan struct{}

	errMu sync.Mutex
	err   error

	mem allocator

	// noKeep: expand 4-bit weights per product, keeping none (tests of that path).
	noKeep bool

	// ragged is the attention's index table of the current pass (ragged.go), used from the
	// caller's goroutine.
	ragged raggedTable

	// owner is touched only on the owning thread.
	owner *owner
}

// owner is the state of the thread that owns the context.
type owner struct {
	d          *Device
	dev        int32
	ctx        uintptr
	stream     uintptr
	blasHandle uintptr
	workspace  uintptr
	module     uintptr
	fns        []uintptr // by kernel ID
	args       *launchArgs
	pin        runtime.Pinner
	staging    ring             // pinned host memory for asynchronous uploads
	capturing  bool             // a graph capture is under way on the stream
	retained   []uintptr        // scratch the capture's work uses: kept until its graph is closed
	ledger     Ledger           // the calls made (ledger.go)
	nodes      map[string]Count // the work of the capture under way
	hint       int64            // the next launch's volume that lives on the device (costs.go)
	attnHint   attnVolume       // the same for a ragged attention launch (ragged.go)
	costErr    string           // a cost declaration that asked for a parameter its kernel lacks
	shapesOnly bool             // kernels are counted, not run (Backend.ShapesOnly)
	// expandedBytes is the 4-bit weights' kept bf16 expansions (backend_ops.go expandedQ4).
	expandedBytes int64
	kept          []*q4State // the weights whose expansions are kept
	// stacked are the expansions of weights one above the other (linears.go), by weights.
	stacked map[[3]*q4State]*q4State
}

// launchArgs is cuLaunchKernel's kernelParams: ptrs[i] points at slot i. Pinned once for
// the device's life (it is passed to C and holds Go pointers); the driver copies the values
// at launch, so the next launch may reuse it.
type launchArgs struct {
	slots [maxKernelArgs]uint64
	ptrs  [maxKernelArgs]unsafe.Pointer
}

const maxKernelArgs = 32

// Open starts the device Probe found: retains its primary context, makes a stream, opens
// NVRTC and cuBLAS, and compiles (or loads from the cache) the kernels.
func Open() (*Device, error) {
	info, err := Probe()
	if err != nil {
		return nil, err
	}
	d := &Device{Info: info, drv: loaded.drv, queue: make(chan func(), 4096), done: make(chan struct{})}
	if d.rtc, err = openNVRTC(info.Libs.NVRTC, info.Libs.NVRTCBuiltins); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if d.blas, err = openCUBLAS(info.Libs.CUBLAS, info.Libs.CUBLASLt); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	d.mem.d = d
	started := make(chan error)
	go d.run(started)
	if err := <-started; err != nil {
		return nil, err
	}
	if err := d.do(func(o *owner) error { return o.loadKernels() }); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// run is the owning goroutine: it never unlocks its thread, which ends with it.
func (d *Device) run(started chan<- error) {
	runtime.LockOSThread()
	o := &owner{d: d, args: &launchArgs{}}
	for i := range o.args.ptrs {
		o.args.ptrs[i] = unsafe.Pointer(&o.args.slots[i])
	}
	o.pin.Pin(o.args)
	err := o.start()
	started <- err
	if err != nil {
		o.pin.Unpin()
		close(d.done)
		return
	}
	d.owner = o
	for f := range d.queue {
		f()
	}
	o.stop()
	o.pin.Unpin()
	close(d.done)
}

func (o *owner) start() error {
	dr := o.d.drv
	if err := dr.check("cuDeviceGet", call(dr.cuDeviceGet, uintptr(unsafe.Pointer(&o.dev)), 0)); err != nil {
		return err
	}
	if err := dr.check("cuDevicePrimaryCtxRetain", call(dr.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&o.ctx)), uintptr(o.dev))); err != nil {
		return err
	}
	if err := dr.check("cuCtxSetCurrent", call(dr.cuCtxSetCurrent, o.ctx)); err != nil {
		return err
	}
	if err := dr.check("cuStreamCreate", call(dr.cuStreamCreate, uintptr(unsafe.Pointer(&o.stream)), streamNonBlocking)); err != nil {
		return err
	}
	b := o.d.blas
	if err := b.check("cublasCreate", call(b.cublasCreate, uintptr(unsafe.Pointer(&o.blasHandle)))); err != nil {
		return err
	}
	if err := b.check("cublasSetStream", call(b.cublasSetStream, o.blasHandle, o.stream)); err != nil {
		return err
	}
	// A workspace of our own: cuBLAS then allocates nothing while a CUDA graph is captured.
	if err := dr.check("cuMemAlloc(cuBLAS workspace)", call(dr.cuMemAlloc, uintptr(unsafe.Pointer(&o.workspace)), blasWorkspaceBytes)); err != nil {
		return err
	}
	if err := b.check("cublasSetWorkspace", call(b.cublasSetWorkspace, o.blasHandle, o.workspace, blasWorkspaceBytes)); err != nil {
		return err
	}
	return o.staging.init(dr, stagingBytes)
}

// The device memory held outside the allocator: cuBLAS's workspace and the staging buffer
// of uploads.
const (
	blasWorkspaceBytes = 32 << 20
	stagingBytes       = 16 << 20
)

func (o *owner) stop() {
	dr := o.d.drv
	call(dr.cuStreamSynchronize, o.stream)
	if o.blasHandle != 0 {
		call(o.d.blas.cublasDestroy, o.blasHandle)
	}
	o.d.mem.releaseAll(o)
	if o.workspace != 0 {
		call(dr.cuMemFree, o.workspace)
	}
	o.staging.free(dr)
	if o.module != 0 {
		call(dr.cuModuleUnload, o.module)
	}
	call(dr.cuStreamDestroy, o.stream)
	call(dr.cuDevicePrimaryCtxRelease, uintptr(o.dev))
}

// Close waits for queued work, frees the device's memory and releases the context.
func (d *Device) Close() error {
	err := d.Sync()
	close(d.queue)
	<-d.done
	return err
}

// enqueue queues f for the owning thread and returns at once. f's error, if it is the
// first, is kept; once one is kept, queued work is dropped.
func (d *Device) enqueue(f func(o *owner) error) {
	d.queue <- func() {
		if d.failed() {
			return
		}
		if err := f(d.owner); err != nil {
			d.fail(err)
		}
	}
}

// do runs f on the owning thread and waits for it (never call it from queued work: the
// owner would wait for itself); it returns the kept error of earlier
// queued work instead of running f when there is one.
func (d *Device) do(f func(o *owner) error) error {
	res := make(chan error, 1)
	d.queue <- func() {
		if err := d.failure(); err != nil {
			res <- err
			return
		}
		err := f(d.owner)
		if err != nil {
			d.fail(err)
		}
		res <- err
	}
	return <-res
}

func (d *Device) fail(err error) {
	d.errMu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.errMu.Unlock()
}

func (d *Device) failed() bool { return d.failure() != nil }

func (d *Device) failure() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.err
}

// Sync waits for every queued operation and the GPU work they started.
func (d *Device) Sync() error {
	return d.do(func(o *owner) error { return o.sync() })
}

func (o *owner) sync() error {
	if o.capturing {
		return errCapturing
	}
	dr := o.d.drv
	o.ledger.Syncs++
	if err := dr.check("cuStreamSynchronize", call(dr.cuStreamSynchronize, o.stream)); err != nil {
		return err
	}
	o.staging.release()
	return nil
}

// ring is pinned host memory that asynchronous uploads stage through: the caller's bytes
// are copied into it, so the copy to the device can run later while the caller reuses its
// slice. Space is handed out in order; everything staged before a stream synchronisation
// is free after it.
type ring struct {
	base uintptr
	size int
	head int // next free byte
	used bool
}

func (r *ring) init(dr *driver, size int) error {
	if err := dr.check("cuMemHostAlloc", call(dr.cuMemHostAlloc, uintptr(unsafe.Pointer(&r.base)), uintptr(size), 0)); err != nil {
		return err
	}
	r.size = size
	return nil
}

func (r *ring) free(dr *driver) {
	if r.base != 0 {
		call(dr.cuMemFreeHost, r.base)
		r.base = 0
	}
}

// take returns n bytes of staging memory, or ok false when the ring is full (the caller
// synchronises and retries).
func (r *ring) take(n int) (p uintptr, ok bool) {
	n = (n + 255) &^ 255
	if r.head+n > r.size {
		return 0, false
	}
	p = r.base + uintptr(r.head)
	r.head += n
	return p, true
}

func (r *ring) release() { r.head = 0 }
