package cpu

import (
	"fmt"
	"runtime"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// BenchmarkQ4Linear: the decode step's fused 4-bit linear at one row of x on Qwen2.5-0.5B's
// MLP shapes, without and with a rank-16 adapter and a residual: the product against its
// epilogue (bias, LoRA term, residual); with -cpu 1 also the thread's CPU µs an op.
// run: go test ./engine/backend/cpu -run X -bench Q4Linear -benchtime 200x -cpu 1,2
func BenchmarkQ4Linear(b *testing.B) {
	be := New()
	for _, s := range []struct{ out, in int }{{4864, 896}, {896, 4864}} {
		w, err := quant.Quantize(randn(s.out*s.in, 7), s.out, s.in, "", quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true})
		if err != nil {
			b.Fatal(err)
		}
		q, err := be.UploadQ4(w)
		if err != nil {
			b.Fatal(err)
		}
		const r = 16
		x, res, y := randn(s.in, 8), randn(s.out, 9), make([]float32, s.out)
		xa, lb := randn(r, 11), randn(s.out*r, 12)
		for _, lora := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dx%d/lora=%v", s.out, s.in, lora), func(b *testing.B) {
				var xb, lbb backend.Buf
				if lora {
					xb, lbb = backend.HostF32(xa), backend.HostF32(lb)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				c0 := threadCPU()
				for b.Loop() {
					if err := be.Q4Linear(backend.HostF32(y), backend.HostF32(res), backend.HostF32(x), q, backend.Buf{}, xb, r, lbb, r, 0.5, 1); err != nil {
						b.Fatal(err)
					}
				}
				if runtime.GOMAXPROCS(0) == 1 { // all on this thread: its CPU time, which load does not inflate
					b.ReportMetric((threadCPU()-c0)/float64(b.N)*1e6, "cpu-µs/op")
				}
			})
		}
	}
}

// BenchmarkSampleGreedy: the decode step's greedy draw over Qwen2.5's 151,936 logits (the
// token and its log-prob); with -cpu 1 also the thread's CPU µs an op.
// run: go test ./engine/backend/cpu -run X -bench SampleGreedy -benchtime 200x -cpu 1
func BenchmarkSampleGreedy(b *testing.B) {
	be := New()
	logits := backend.HostF32(randn(151936, 14))
	loopCPU(b, func() {
		if _, _, err := be.Sample(logits, []float64{0}, 1, 151936, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
	})
}

// loopCPU runs f in b.Loop and, with -cpu 1, reports the thread's CPU µs an op too, which
// other processes' load does not inflate.
func loopCPU(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := threadCPU()
	for b.Loop() {
		f()
	}
	if runtime.GOMAXPROCS(0) == 1 {
		b.ReportMetric((threadCPU()-c0)/float64(b.N)*1e6, "cpu-µs/op")
	}
}

// BenchmarkSampleTopP: a rollout's draw over the same 151,936 logits at temperature 1: top-p
// 0.9 alone, top-k 50 with top-p 0.9, and neither (the whole vocabulary by its cumulative sum).
// The logits are normal with a spread of 3 (the most likely token holds a few percent).
// run: go test ./engine/backend/cpu -run X -bench SampleTopP -benchtime 100x -cpu 1,2
func BenchmarkSampleTopP(b *testing.B) {
	be := New()
	row := randn(151936, 15)
	for j := range row {
		row[j] *= 3
	}
	logits := backend.HostF32(row)
	for _, c := range []struct {
		name string
		k    int
		p    float32
	}{{"p=0.9", 0, 0.9}, {"k=50,p=0.9", 50, 0.9}, {"all", 0, 0}} {
		b.Run(c.name, func(b *testing.B) {
			u := []float64{0.37}
			loopCPU(b, func() {
				if _, _, err := be.Sample(logits, u, 1, 151936, 1, c.k, c.p); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
