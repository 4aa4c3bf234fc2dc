package backend

// Capturer is a backend that can record a sequence of queued ops once and replay it with one
// launch: a CUDA graph. A decode step of a small model is hundreds of short ops; replayed as
// a graph, the device pays one launch for them instead of hundreds. Replay reuses the
// addresses and arguments of the recording, so everything that changes between replays
// (ids, positions, uniforms) must live in device buffers the ops read, updated by Upload
// before Launch or by the recorded ops themselves. The CPU backend implements it as plain
// execution (each Launch runs the recording function again), so that the same code runs
// and is tested on both.
type Capturer interface {
	// Capture records the ops record queues (it must only queue ops: no Upload, Download,
	// Sync, Sample, Alloc or Free of buffers the ops use) and returns them ready to replay.
	// The recorded work has not run when Capture returns: Launch runs it.
	Capture(record func() error) (Graph, error)
}

// Graph is a recorded sequence of ops (see Capturer).
type Graph interface {
	// Launch queues one replay.
	Launch() error
	// Close releases the recording (after the work queued before it).
	Close()
}

// As is b viewed as another element type of the same size (I32 as F32): one allocation
// holding the sampled ids and their log-probs crosses to the host in one copy.
func (b Buf) As(dt DType) Buf {
	if dt.Size() != b.dt.Size() {
		panic("backend: a " + b.dt.String() + " buffer viewed as " + dt.String())
	}
	b.dt = dt
	return b
}
