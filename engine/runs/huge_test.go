package runs

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
	"rlhfstation/engine/runs/runstest"
)

// BenchmarkHugeEventFile streams a big TensorBoard event file (TRL's tags, one record a
// scalar, as PyTorch writes them) through the reader, the mapping, the monitor and the digest
// of `replay --summary`, and reports the read rate and the most heap in use while reading,
// against the file's size. RLHFSTATION_HUGE_MB sets the size (64 by default; 1024 for the
// issue's 1 GB):
//
//	RLHFSTATION_HUGE_MB=1024 go test ./engine/runs -run X -bench HugeEventFile -benchtime 1x
func BenchmarkHugeEventFile(b *testing.B) {
	mb := 64
	if s := os.Getenv("RLHFSTATION_HUGE_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	path := writeHuge(b, filepath.Join(dir, "runs", "x"), int64(mb)<<20)
	fi, _ := os.Stat(path)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var peak atomic.Uint64
		stop := make(chan struct{})
		go func() {
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		start, cpu0 := time.Now(), cpuTime()
		r, err := Detect(dir)
		if err != nil {
			b.Fatal(err)
		}
		d := monitor.NewDigest(monitor.DefaultThresholds())
		steps := 0
		for e := range r.Stream(context.Background(), Options{}) {
			if e.Type == events.Step {
				steps++
			}
			d.Apply(e)
		}
		rep := d.Report()
		el, cpu := time.Since(start), cpuTime()-cpu0
		close(stop)
		b.ReportMetric(float64(fi.Size())/(1<<20)/el.Seconds(), "MB/s")
		b.ReportMetric(float64(fi.Size())/(1<<20)/cpu.Seconds(), "MB/cpu-s")
		b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
		b.ReportMetric(float64(steps), "steps")
		if rep.Run.Steps != steps || steps == 0 {
			b.Fatalf("digest %d steps, stream %d", rep.Run.Steps, steps)
		}
	}
}

// cpuTime is the process's user and system time so far (the machine is shared: CPU time
// says more than wall time).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeHuge writes an event file of about size bytes: steps of the plan's 14 TRL metrics.
func writeHuge(b *testing.B, dir string, size int64) string {
	b.Helper()
	p := runstest.Plan{Steps: 1 << 30, Seed: 9}
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, "events.out.tfevents.1700000000.host.1.0")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(runstest.Record(runstest.FileVersion(1700000000)))
	var n int64
	for s := 1; n < size; s++ {
		m := p.Metrics(s)
		for _, k := range sortedKeys(m) {
			rec := runstest.Record(runstest.ScalarEvent(1700000000+float64(s), int64(s), "train/"+k, m[k], runstest.SimpleValue))
			w.Write(rec)
			n += int64(len(rec))
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path
}
