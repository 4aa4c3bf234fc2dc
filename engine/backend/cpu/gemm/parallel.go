package gemm

import "sync/atomic"

// parallelFor runs f(0), …, f(n-1) on the calling goroutine and up to t-1 helpers, each taking
// the next index as it frees. A helper that starts late (its core busy elsewhere) finds less or
// nothing left, so the call never waits for a helper to be scheduled, only for items a helper
// has already begun.
func parallelFor(n, t int, f func(int)) {
	t = min(t, n)
	if t <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	done := make(chan struct{}, n) // one token per item a helper finishes; never blocks
	take := func(helper bool) (count int) {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return count
			}
			f(i)
			count++
			if helper {
				done <- struct{}{}
			}
		}
	}
	for range t - 1 {
		go take(true)
	}
	for range n - take(false) {
		<-done
	}
}
