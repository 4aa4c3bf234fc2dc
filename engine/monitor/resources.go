package monitor

import (
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"time"

	"rlhfstation/engine/events"
)

// Resources is one sample of the process's memory and speed.
type Resources struct {
	RSSBytes    uint64 // resident set size, from /proc/self/statm (0 where there is none)
	GoHeapBytes uint64 // bytes of live and not yet swept Go heap objects
	// GPUBytes is the device memory in use; the engine fills it when it runs on a GPU.
	GPUBytes uint64
	// GPUPeakBytes is the most device memory the run's buffers held at once (the allocator's
	// peak, as torch.cuda.max_memory_allocated); the engine fills it on a GPU.
	GPUPeakBytes    uint64
	TokensPerSecond float64 // generated tokens per wall-clock second since the previous sample
}

// Metrics are the sample under the DESIGN §5 names (mem/gpu_bytes only when set), plus
// mem/go_heap_bytes and, on a GPU, mem/gpu_peak_bytes.
func (r Resources) Metrics() events.Metrics {
	m := events.Metrics{
		"mem/rss_bytes":          float64(r.RSSBytes),
		"mem/go_heap_bytes":      float64(r.GoHeapBytes),
		"perf/tokens_per_second": r.TokensPerSecond,
	}
	if r.GPUBytes > 0 {
		m["mem/gpu_bytes"] = float64(r.GPUBytes)
	}
	if r.GPUPeakBytes > 0 {
		m["mem/gpu_peak_bytes"] = float64(r.GPUPeakBytes)
	}
	return m
}

// RSS is the process's resident set size in bytes (Linux; an error elsewhere).
func RSS() (uint64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("resident memory: %w", err)
	}
	return parseStatm(b, os.Getpagesize())
}

// parseStatm reads the second field of /proc/self/statm, the resident pages.
func parseStatm(b []byte, pageSize int) (uint64, error) {
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("resident memory: /proc/self/statm has %d fields, want at least 2", len(f))
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resident memory: /proc/self/statm: %v", err)
	}
	return pages * uint64(pageSize), nil
}

// heapMetric is read through runtime/metrics, which does not stop the world as
// runtime.ReadMemStats does.
const heapMetric = "/memory/classes/heap/objects:bytes"

// GoHeap is the bytes of Go heap objects (live and not yet swept).
func GoHeap() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Sampler measures Resources once per step; tokens/s is over the time since its previous
// sample (or since Start).
type Sampler struct {
	last time.Time
}

// Start marks the beginning of the first interval.
func (s *Sampler) Start(now time.Time) { s.last = now }

// Sample reads memory and the speed of the tokens generated since the previous sample. The
// engine sets GPUBytes on the result when it runs on a GPU.
func (s *Sampler) Sample(now time.Time, tokens int64) Resources {
	r := Resources{GoHeapBytes: GoHeap()}
	r.RSSBytes, _ = RSS() // 0 where the system has no /proc
	r.TokensPerSecond = tokensPerSecond(tokens, now.Sub(s.last))
	if s.last.IsZero() {
		r.TokensPerSecond = 0
	}
	s.last = now
	return r
}

// tokensPerSecond is 0 for an empty or backwards interval.
func tokensPerSecond(tokens int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(tokens) / d.Seconds()
}
