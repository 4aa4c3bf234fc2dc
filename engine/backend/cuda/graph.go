package cuda

import (
	"errors"
	"unsafe"
)

// Graph is a captured sequence of the device's work (kernels, cuBLAS products, copies within
// the device), replayed with one launch: a decode step of a small model is hundreds of
// launches of a few microseconds each, so replaying it as one graph removes their overhead.
// A graph keeps the addresses and arguments it was captured with: what changes between
// replays must live in device memory (positions, lengths, sampled ids, uniforms) and be
// updated there before Launch.
type Graph struct {
	d           *Device
	graph, exec uintptr
	retained    []uintptr        // scratch its kernels use, freed with it
	nodes       map[string]Count // its work, for the ledger
}

// errCapturing refuses host-to-device staging during a capture: the copy would be recorded
// reading the staging ring, whose bytes change before the replay.
var errCapturing = errors.New("cuda: upload while capturing a graph (upload before capturing, into buffers the graph reads)")

// Capture records the work f queues (f runs on the calling goroutine and only queues device
// ops: no uploads, downloads, syncs or frees of buffers the work uses) into a graph ready to
// launch. Scratch that the ops take while capturing stays with the graph until Close.
func (d *Device) Capture(f func() error) (*Graph, error) {
	// A capture the driver refuses to begin leaves the device as it was (not a failure kept
	// for later work): the caller runs its ops without a graph.
	begun := make(chan error, 1)
	d.queue <- func() {
		if err := d.failure(); err != nil {
			begun <- err
			return
		}
		o := d.owner
		dr := o.d.drv
		// Relaxed: the one owning thread may still allocate (a scratch buffer missing from the
		// cache) while capturing; nothing else runs on it.
		if err := dr.check("cuStreamBeginCapture", call(dr.cuStreamBeginCapture, o.stream, captureModeRelaxed)); err != nil {
			begun <- err
			return
		}
		o.capturing, o.retained, o.nodes = true, nil, nil
		begun <- nil
	}
	if err := <-begun; err != nil {
		return nil, err
	}
	ferr := f()
	g := &Graph{d: d}
	// End the capture whatever happened: the stream must leave capture mode to be usable.
	res := make(chan error, 1)
	d.queue <- func() {
		o := d.owner
		dr := o.d.drv
		o.capturing = false
		g.retained, o.retained = o.retained, nil
		g.nodes = o.captured()
		err := dr.check("cuStreamEndCapture", call(dr.cuStreamEndCapture, o.stream, uintptr(unsafe.Pointer(&g.graph))))
		if err == nil && ferr == nil && !d.failed() {
			err = dr.check("cuGraphInstantiate", call(dr.cuGraphInstantiate, uintptr(unsafe.Pointer(&g.exec)), g.graph, 0))
		}
		res <- err
	}
	err := <-res
	if ferr != nil {
		err = ferr
	}
	if err == nil {
		err = d.failure()
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// Launch queues one replay of the graph on the device's stream.
func (g *Graph) Launch() {
	g.d.enqueue(func(o *owner) error {
		o.replayed(g.nodes)
		return o.d.drv.check("cuGraphLaunch", call(o.d.drv.cuGraphLaunch, g.exec, o.stream))
	})
}

// Close frees the graph and the scratch it kept (after the work queued before it).
func (g *Graph) Close() {
	if g == nil || (g.exec == 0 && g.graph == 0 && g.retained == nil) {
		return
	}
	exec, graph, kept := g.exec, g.graph, g.retained
	g.exec, g.graph, g.retained = 0, 0, nil
	g.d.queue <- func() {
		dr := g.d.drv
		if exec != 0 {
			call(dr.cuGraphExecDestroy, exec)
		}
		if graph != 0 {
			call(dr.cuGraphDestroy, graph)
		}
		for _, p := range kept {
			_ = g.d.mem.free(p)
		}
	}
}

// timeGPU runs f reps times on the owning thread between two events and returns the device
// time per repetition in seconds (the GPU's own clock: no host overhead counted).
func (d *Device) timeGPU(reps int, f func(o *owner) error) (float64, error) {
	var ms float32
	err := d.do(func(o *owner) error {
		dr := o.d.drv
		var start, stop uintptr
		if err := dr.check("cuEventCreate", call(dr.cuEventCreate, uintptr(unsafe.Pointer(&start)), eventDefault)); err != nil {
			return err
		}
		defer call(dr.cuEventDestroy, start)
		if err := dr.check("cuEventCreate", call(dr.cuEventCreate, uintptr(unsafe.Pointer(&stop)), eventDefault)); err != nil {
			return err
		}
		defer call(dr.cuEventDestroy, stop)
		if err := dr.check("cuEventRecord", call(dr.cuEventRecord, start, o.stream)); err != nil {
			return err
		}
		for i := 0; i < reps; i++ {
			if err := f(o); err != nil {
				return err
			}
		}
		if err := dr.check("cuEventRecord", call(dr.cuEventRecord, stop, o.stream)); err != nil {
			return err
		}
		if err := dr.check("cuEventSynchronize", call(dr.cuEventSynchronize, stop)); err != nil {
			return err
		}
		return dr.check("cuEventElapsedTime", call(dr.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start, stop))
	})
	return float64(ms) / 1e3 / float64(reps), err
}
