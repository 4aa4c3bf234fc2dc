package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// allocator caches device memory by rounded size, as PyTorch's caching allocator does in
// spirit: a freed buffer waits for the next request of its size class instead of going back
// to the driver (cuMemAlloc/cuMemFree are slow and cuMemFree synchronises the device).
// Reuse is safe without waiting because every kernel and copy runs on the one stream, in
// the order queued.
type allocator struct {
	d        *Device
	mu       sync.Mutex
	cached   map[int][]uintptr // free buffers by size class
	sizes    map[uintptr]int   // size class of every live or cached buffer
	inUse    int64             // bytes handed out
	reserved int64             // bytes held from the driver
	peak     int64             // most bytes handed out at once
	// kept is the bytes of the 4-bit weights' kept bf16 expansions (expandedQ4): a cache
	// that takes only spare memory and is dropped when an allocation fails. working is the
	// most bytes handed out at once without it: what the run needs.
	kept, working int64
}

// sizeClass rounds n up to 512 bytes below 1 MiB, else to one of four steps per power of
// two (at most 25% more than asked).
func sizeClass(n int) int {
	if n <= 0 {
		n = 1
	}
	if n < 1<<20 {
		return (n + 511) &^ 511
	}
	step := 1 << (bits.Len(uint(n-1)) - 3)
	return (n + step - 1) / step * step
}

// alloc returns n bytes of device memory, from the cache when it can; from the owning
// thread (o not nil) it calls the driver directly, from elsewhere through the queue.
func (a *allocator) alloc(n int) (uintptr, error) { return a.allocOn(nil, n) }

func (a *allocator) allocOn(o *owner, n int) (uintptr, error) {
	c := sizeClass(n)
	a.mu.Lock()
	if l := a.cached[c]; len(l) > 0 {
		p := l[len(l)-1]
		a.cached[c] = l[:len(l)-1]
		a.handOut(c)
		a.mu.Unlock()
		return p, nil
	}
	a.mu.Unlock()
	var p uintptr
	get := func(o *owner) error {
		dr := o.d.drv
		r := call(dr.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(c))
		if r != 0 && a.releaseCached(o) > 0 {
			r = call(dr.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(c))
		}
		if r != 0 && o.dropExpanded() > 0 && a.releaseCached(o) > 0 {
			r = call(dr.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(c))
		}
		if r == 0 {
			o.ledger.Allocs++
			o.ledger.AllocBytes += int64(c)
		}
		return dr.check(fmt.Sprintf("cuMemAlloc(%d bytes)", c), r)
	}
	var err error
	if o != nil {
		err = get(o)
	} else {
		err = a.d.do(get)
	}
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	if a.sizes == nil {
		a.sizes, a.cached = map[uintptr]int{}, map[int][]uintptr{}
	}
	a.sizes[p] = c
	a.reserved += int64(c)
	a.handOut(c)
	a.mu.Unlock()
	return p, nil
}

func (a *allocator) handOut(c int) {
	a.inUse += int64(c)
	a.peak = max(a.peak, a.inUse)
	a.working = max(a.working, a.inUse-a.kept)
}

// keepExpansion counts the buffer of n bytes just handed out as a kept expansion, or, with
// gone, one given back.
func (a *allocator) keepExpansion(n int, gone bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gone {
		a.kept -= int64(sizeClass(n))
	} else {
		a.kept += int64(sizeClass(n))
	}
}

// free returns p to the cache.
func (a *allocator) free(p uintptr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.sizes[p]
	if !ok {
		return errors.New("cuda: free of memory this device did not allocate")
	}
	if slices.Contains(a.cached[c], p) {
		return errors.New("cuda: buffer freed twice")
	}
	a.cached[c] = append(a.cached[c], p)
	a.inUse -= int64(c)
	return nil
}

// release frees p at its place in the queue. Freeing at once would be wrong: work queued
// earlier but not yet run may take scratch from the cache (o.tmp) and would get p while
// work queued before the free still uses it. In queue order, every user of p has been
// issued before p can be handed out again, and the stream runs them in that order.
func (d *Device) release(p uintptr) {
	d.enqueue(func(o *owner) error { return o.d.mem.free(p) })
}

// releaseCached gives every cached buffer back to the driver (on the owning thread) and
// returns the bytes released.
func (a *allocator) releaseCached(o *owner) int64 {
	dr := o.d.drv
	call(dr.cuStreamSynchronize, o.stream)
	o.ledger.Syncs++
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for c, l := range a.cached {
		for _, p := range l {
			call(dr.cuMemFree, p)
			o.ledger.Frees++
			delete(a.sizes, p)
			n += int64(c)
		}
		delete(a.cached, c)
	}
	a.reserved -= n
	return n
}

// releaseAll frees every buffer, live or cached (when the device closes).
func (a *allocator) releaseAll(o *owner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.sizes {
		call(o.d.drv.cuMemFree, p)
	}
	a.sizes, a.cached = nil, nil
	a.inUse, a.reserved = 0, 0
}

// MemStats are the device memory figures of the dashboard's header.
type MemStats struct {
	InUse    int64 // bytes in buffers handed out
	Reserved int64 // bytes held from the driver (InUse plus the cache)
	Peak     int64 // most bytes in use at once
	Free     int64 // the driver's free memory on the device
	Total    int64
}

// MemStats reports the allocator's figures and the driver's.
func (d *Device) MemStats() (MemStats, error) {
	d.mem.mu.Lock()
	s := MemStats{InUse: d.mem.inUse, Reserved: d.mem.reserved, Peak: d.mem.peak}
	d.mem.mu.Unlock()
	var free, total uint64
	err := d.do(func(o *owner) error {
		return o.d.drv.check("cuMemGetInfo", call(o.d.drv.cuMemGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	})
	s.Free, s.Total = int64(free), int64(total)
	return s, err
}

// stagedCopyMax is the largest upload queued without waiting: the bytes are cloned and the
// caller goes on. Larger uploads wait until their bytes sit in pinned staging memory.
const stagedCopyMax = 256 << 10

// upload copies src to device address dst.
func (d *Device) upload(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if len(src) <= stagedCopyMax {
		b := slices.Clone(src)
		d.enqueue(func(o *owner) error { return o.upload(dst, b) })
		return nil
	}
	return d.do(func(o *owner) error { return o.upload(dst, src) })
}

// upload stages src through the pinned ring, in pieces when it is larger than the ring.
func (o *owner) upload(dst uintptr, src []byte) error {
	if o.capturing {
		return errCapturing
	}
	dr := o.d.drv
	for len(src) > 0 {
		n := min(len(src), o.staging.size)
		p, ok := o.staging.take(n)
		if !ok {
			if err := o.sync(); err != nil {
				return err
			}
			p, _ = o.staging.take(n)
		}
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n), src[:n])
		o.ledger.HtoD.add(Count{N: 1, Read: int64(n)})
		if err := dr.check("cuMemcpyHtoDAsync", call(dr.cuMemcpyHtoDAsync, dst, p, uintptr(n), o.stream)); err != nil {
			return err
		}
		dst += uintptr(n)
		src = src[n:]
	}
	return nil
}

// download copies device memory at src into dst, after all queued work.
func (d *Device) download(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return d.Sync()
	}
	return d.do(func(o *owner) error {
		if o.capturing {
			return errCapturing
		}
		dr := o.d.drv
		for len(dst) > 0 {
			n := min(len(dst), o.staging.size)
			p, ok := o.staging.take(n) // fresh bytes: no queued upload reads them
			if !ok {
				if err := o.sync(); err != nil { // frees the whole ring
					return err
				}
				p, _ = o.staging.take(n)
			}
			o.ledger.DtoH.add(Count{N: 1, Read: int64(n)})
			if err := dr.check("cuMemcpyDtoHAsync", call(dr.cuMemcpyDtoHAsync, p, src, uintptr(n), o.stream)); err != nil {
				return err
			}
			if err := o.sync(); err != nil {
				return err
			}
			copy(dst[:n], unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n))
			src += uintptr(n)
			dst = dst[n:]
		}
		return nil
	})
}

// copyDtoD queues a device-to-device copy of n bytes.
func (o *owner) copyDtoD(dst, src uintptr, n int) error {
	if n == 0 {
		return nil
	}
	dr := o.d.drv
	o.recordDevice(nodeCopy, n)
	return dr.check("cuMemcpyDtoDAsync", call(dr.cuMemcpyDtoDAsync, dst, src, uintptr(n), o.stream))
}

// memset queues filling n bytes with zeros (or any byte value).
func (o *owner) memset(dst uintptr, v byte, n int) error {
	if n == 0 {
		return nil
	}
	dr := o.d.drv
	o.recordDevice(nodeMemset, n)
	if dst%4 == 0 && n%4 == 0 {
		w := uint32(v) * 0x01010101
		return dr.check("cuMemsetD32Async", call(dr.cuMemsetD32Async, dst, uintptr(w), uintptr(n/4), o.stream))
	}
	return dr.check("cuMemsetD8Async", call(dr.cuMemsetD8Async, dst, uintptr(v), uintptr(n), o.stream))
}

// tmp is scratch device memory for the op running on the owning thread; give it back with
// done when the op has queued its work (later work may reuse it: the stream keeps order).
func (o *owner) tmp(n int) (uintptr, error) { return o.d.mem.allocOn(o, n) }

func (o *owner) done(p uintptr) {
	if p == 0 {
		return
	}
	if o.capturing { // the graph's replays will use p again: it belongs to the graph now
		o.retained = append(o.retained, p)
		return
	}
	_ = o.d.mem.free(p)
}
