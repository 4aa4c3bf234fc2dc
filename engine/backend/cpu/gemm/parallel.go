package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// parallelFor runs f(0), …, f(n-1) on the calling goroutine and up to t-1 helpers, each taking
// the next index as it frees. A helper that arrives late (its thread asleep, its core busy
// elsewhere) finds less or nothing left, so the call never waits for a helper to be scheduled,
// only for items a helper has already begun.
//
// The helpers are long-lived goroutines that poll for the next call for helperSpin before they
// sleep: waking a sleeping thread takes about 100 µs on this project's virtual machines (two
// 90 µs halves of a call took 180 µs with fresh goroutines), longer than many of the products a
// training step runs back to back. A call made while another has the helpers uses plain
// goroutines.
func parallelFor(n, t int, f func(int)) {
	t = min(t, n)
	if t <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	run(&batch{n: n, f: f}, t)
}

// run publishes b to t-1 helpers, takes its items on the caller and waits for those the
// helpers began.
func run(b *batch, t int) {
	n := b.n
	probe := Probe.On.Load()
	if probe {
		b.t0 = time.Now().UnixNano()
	}
	b.seats.Store(int64(t - 1))
	if helpers.busy.CompareAndSwap(false, true) {
		defer helpers.busy.Store(false)
		startHelpers(t - 1)
		b.goroutines = runtime.NumGoroutine()
		helpers.current.Store(b)
		if helpers.sleeping.Load() > 0 {
			helpers.mu.Lock()
			helpers.wake.Broadcast()
			helpers.mu.Unlock()
		}
	} else {
		for range t - 1 {
			go b.join()
		}
	}
	// Wait for the items helpers began, polling: parking here would put this thread to sleep
	// and cost the same wake-up the helpers avoid.
	mine := b.take(false)
	var t1 int64
	if probe {
		t1 = time.Now().UnixNano()
	}
	for b.finished.Load() < int64(n)-mine {
		runtime.Gosched()
	}
	if probe {
		Probe.add(b, t1, time.Now().UnixNano())
	}
	b.f, b.r = nil, nil // the helpers keep the last batch; it must not keep the caller's matrices
}

// helperSpin is how long an idle helper polls for the next call before it sleeps. A training
// step's products come with gaps of up to a millisecond between them (norms, attention, the
// optimizer), each a wake-up (about 100 µs here) when the helper has gone to sleep: with 100 µs
// of polling, the 25M-parameter GRPO step took 3.5–11.6% longer on a quiet machine (three
// alternated pairs, 2026-11-28) and decoding one sequence gained nothing in wall time. The
// shorter poll used about 10–18% less CPU under load, which a shared machine's other processes
// would get; the wall time is what a run is waiting on.
const helperSpin = time.Millisecond

// batch is one parallelFor or Ranges call: items 0..n-1, one at a time to f, or, with div
// set, ranges of them to r (Ranges' sizes). f and r are read only after a claim succeeds: the
// caller clears them once every claimed item is done.
type batch struct {
	n        int
	f        func(int)
	r        func(lo, hi int)
	grain    int
	div      int64
	next     atomic.Int64
	seats    atomic.Int64 // helpers that may still join
	finished atomic.Int64 // items helpers have finished
	// goroutines is runtime.NumGoroutine() when the batch was published; more, later, means
	// the program started other parallel work, and the helpers must stop polling.
	goroutines int
	t0         int64        // with Probe on: the call's start (ns)
	first      atomic.Int64 // with Probe on: when a helper began its first item (ns)
}

// Probe counts where parallelFor's calls spend their time while On is set (BenchmarkDecodeParts
// in the model package reads it): the calls, those a helper joined, the time from a call to
// its helper's first item (Start), the time the caller waited after its own last item (Tail),
// and the time the caller and the helpers spent in items.
var Probe HandOffs

// HandOffs is Probe's type.
type HandOffs struct {
	On                                                 atomic.Bool
	Calls, Helped, StartNs, TailNs, CallerNs, HelperNs atomic.Int64
}

// add counts a finished call: the caller's items ended at t1, its wait at t2 (ns).
func (p *HandOffs) add(b *batch, t1, t2 int64) {
	p.Calls.Add(1)
	p.CallerNs.Add(t1 - b.t0)
	p.TailNs.Add(t2 - t1)
	if f := b.first.Load(); f != 0 {
		p.Helped.Add(1)
		p.StartNs.Add(f - b.t0)
	}
}

// join takes items as a helper if a seat is left.
func (b *batch) join() {
	if b.seats.Add(-1) >= 0 {
		b.take(true)
	}
}

// take runs items until none are left and reports how many it ran.
func (b *batch) take(helper bool) (count int64) {
	for {
		lo, hi, ok := b.claim()
		if !ok {
			return count
		}
		if helper && Probe.On.Load() {
			s := time.Now().UnixNano()
			b.first.CompareAndSwap(0, s)
			b.do(lo, hi)
			Probe.HelperNs.Add(time.Now().UnixNano() - s)
		} else {
			b.do(lo, hi)
		}
		count += int64(hi - lo)
		if helper {
			b.finished.Add(int64(hi - lo))
		}
	}
}

// claim takes the next item, or with r set the next range: what is left over div, grain
// items at least.
func (b *batch) claim() (lo, hi int, ok bool) {
	if b.div == 0 {
		i := int(b.next.Add(1) - 1)
		return i, i + 1, i < b.n
	}
	for {
		l := b.next.Load()
		if l >= int64(b.n) {
			return 0, 0, false
		}
		h := min(int64(b.n), l+max(int64(b.grain), (int64(b.n)-l+b.div-1)/b.div))
		if b.next.CompareAndSwap(l, h) {
			return int(l), int(h), true
		}
	}
}

// do runs the items lo..hi-1 claim gave.
func (b *batch) do(lo, hi int) {
	if b.div != 0 {
		b.r(lo, hi)
		return
	}
	b.f(lo)
}

var helpers struct {
	busy     atomic.Bool // a call is using the helpers
	current  atomic.Pointer[batch]
	started  atomic.Int64
	sleeping atomic.Int64
	mu       sync.Mutex
	wake     sync.Cond
}

func init() { helpers.wake.L = &helpers.mu }

// startHelpers makes sure at least n helper goroutines run.
func startHelpers(n int) {
	for {
		s := helpers.started.Load()
		if s >= int64(n) {
			return
		}
		if helpers.started.CompareAndSwap(s, s+1) {
			go helperLoop()
		}
	}
}

func helperLoop() {
	var seen *batch
	for {
		seen = nextBatch(seen)
		seen.join()
	}
}

// nextBatch waits for a batch other than seen: polling for helperSpin, then asleep until
// parallelFor wakes it.
func nextBatch(seen *batch) *batch {
	// While it polls, the helper holds its thread's P, and the scheduler does not hand it
	// goroutines started on other Ps (a sibling package's parallel loop would run serially).
	// So it stops polling as soon as the goroutine count rises above the last batch's.
	deadline := time.Now().Add(helperSpin)
	for i := 0; ; i++ {
		if b := helpers.current.Load(); b != seen {
			return b
		}
		if seen == nil || runtime.NumGoroutine() > seen.goroutines || i%64 == 63 && time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	helpers.mu.Lock()
	defer helpers.mu.Unlock()
	// parallelFor stores current before it reads sleeping, and this reads current after it
	// counts itself asleep, so one of the two sees the other.
	helpers.sleeping.Add(1)
	defer helpers.sleeping.Add(-1)
	for {
		if b := helpers.current.Load(); b != seen {
			return b
		}
		helpers.wake.Wait()
	}
}

// Parallel is parallelFor for the other ops of the CPU backend: f(0), …, f(n-1) on the caller
// and up to t-1 of the same long-lived helpers.
func Parallel(n, t int, f func(int)) { parallelFor(n, t, f) }

// Ranges runs f over [0, n) in contiguous ranges on the caller and up to t-1 of the helpers,
// each range what is left over 2t, grain items at least (guided scheduling): the first ranges
// are long (each core streams one stretch of a matrix), the last short, so the cores finish
// within a short range of each other, and a core that joins late takes less. The decode
// step's few-row products run it: with equal pieces the last piece's core ran on alone for
// half a piece on average (about 1 ms a token of the head's 1.6 ms pieces).
func Ranges(n, grain, t int, f func(lo, hi int)) {
	grain = max(grain, 1)
	t = min(t, (n+grain-1)/grain)
	if t <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	run(&batch{n: n, r: f, grain: grain, div: int64(2 * t)}, t)
}
