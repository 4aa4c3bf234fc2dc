package cuda

import (
	"math/rand/v2"
	"testing"

	"rlhfstation/quant"
)

// BenchmarkDequantVsCopy: NF4 (double-quantized, blocks of 64) expanded to bf16, against a
// device-to-device copy of the bf16 output's size, both timed by GPU events in the same run.
// Bandwidth counts bytes read plus bytes written; the target is a ratio ≥ 0.8.
// Shapes of Qwen2.5-0.5B's MLP and of a 7B model's.
func BenchmarkDequantVsCopy(b *testing.B) {
	d := benchDevice(b)
	for _, sh := range []struct {
		name       string
		rows, cols int
	}{{"qwen0.5b-mlp-4864x896", 4864, 896}, {"7b-mlp-11008x4096", 11008, 4096}} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			n := sh.rows * sh.cols
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 0.02)
			}
			w, err := quant.Quantize(x, sh.rows, sh.cols, "float32", quant.Default())
			if err != nil {
				b.Fatal(err)
			}
			q := uploadQ4(b, d, w)
			out := allocT[bf16](b, d, n)
			copyDst := allocT[bf16](b, d, n)
			reps := 50
			b.ResetTimer()
			var tq, tc float64
			for i := 0; i < b.N; i++ {
				if tq, err = d.timeGPU(reps, func(o *owner) error { return o.dequant(out, q) }); err != nil {
					b.Fatal(err)
				}
				if tc, err = d.timeGPU(reps, func(o *owner) error { return o.copyDtoD(uintptr(copyDst), uintptr(out), 2*n) }); err != nil {
					b.Fatal(err)
				}
			}
			readQ := float64(len(w.Packed) + len(w.QAbsmax) + 4*len(w.NestedAbsmax))
			gbq := (readQ + 2*float64(n)) / tq / 1e9
			gbc := 4 * float64(n) / tc / 1e9
			b.ReportMetric(gbq, "dequant-GB/s")
			b.ReportMetric(gbc, "copy-GB/s")
			b.ReportMetric(gbq/gbc, "ratio")
			b.ReportMetric(tq*1e6, "dequant-µs")
		})
	}
}

// BenchmarkGEMV4: the fused 4-bit product of a decode step (m = 1 and 8 rows) on Qwen2.5-0.5B's
// MLP up projection; bandwidth counts the 4-bit weight read once.
func BenchmarkGEMV4(b *testing.B) {
	d := benchDevice(b)
	rows, cols := 4864, 896
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.02)
	}
	w, err := quant.Quantize(x, rows, cols, "float32", quant.Default())
	if err != nil {
		b.Fatal(err)
	}
	q := uploadQ4(b, d, w)
	for _, m := range []int{1, 8} {
		b.Run(map[int]string{1: "m1", 8: "m8"}[m], func(b *testing.B) {
			xs, _ := putBF16(b, d, randn(rng, m*cols, 1))
			y := allocT[bf16](b, d, m*rows)
			var t float64
			for i := 0; i < b.N; i++ {
				if t, err = d.timeGPU(100, func(o *owner) error { return o.gemv4(y, rows, xs, cols, q, m) }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(w.Packed)+len(w.QAbsmax))/t/1e9, "weight-GB/s")
			b.ReportMetric(t*1e6, "µs")
		})
	}
}

func benchDevice(b *testing.B) *Device {
	b.Helper()
	testDevOnce.Do(func() {
		testDev, testDevErr = Open()
	})
	if testDevErr != nil {
		b.Skipf("no CUDA device: %v", testDevErr)
	}
	return testDev
}
