package model

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"rlhfstation/quant"
)

// builtinOrShaped loads the built-in model from the tree, or makes a random model of its shape.
func builtinOrShaped(b *testing.B) (*Model, string) {
	if _, err := os.Stat(filepath.Join(builtinDir, "config.json")); err == nil {
		m, err := Load(builtinDir)
		if err != nil {
			b.Fatal(err)
		}
		return m, "built-in"
	}
	m, err := NewRandom(builtinShape(), 1)
	if err != nil {
		b.Fatal(err)
	}
	return m, "random built-in shape"
}

// BenchmarkResidentBuiltin reports the bytes the built-in model's weights hold (ResidentBytes)
// in float32 and with NF4 linears (blocks of 64, double quantization), the bits per quantized
// parameter, and the Go heap the model holds in each form (the float32 copies freed).
// run: go test ./engine/model -run X -bench ResidentBuiltin -benchtime 1x -v
func BenchmarkResidentBuiltin(b *testing.B) {
	heap := func() int64 {
		runtime.GC()
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		return int64(s.HeapAlloc)
	}
	for b.Loop() {
		h0 := heap()
		m, what := builtinOrShaped(b)
		fp32, hFP32 := m.ResidentBytes(), heap()-h0
		if _, _, err := m.Quantize(quant.Default()); err != nil {
			b.Fatal(err)
		}
		hNF4 := heap() - h0
		qp, qb := m.QuantStats()
		nf4 := m.ResidentBytes()
		b.Logf("%s: %d parameters, float32 %d bytes, NF4 %d bytes", what, m.NumParams(), fp32, nf4)
		b.ReportMetric(float64(m.NumParams())/1e6, "Mparams")
		b.ReportMetric(float64(fp32)/(1<<20), "fp32-MiB")
		b.ReportMetric(float64(nf4)/(1<<20), "nf4-MiB")
		b.ReportMetric(8*float64(qb)/float64(qp), "bits/quantized-param")
		b.ReportMetric(float64(hFP32)/(1<<20), "heap-fp32-MiB")
		b.ReportMetric(float64(hNF4)/(1<<20), "heap-nf4-MiB")
		runtime.KeepAlive(m)
	}
}

// BenchmarkQuantizedForward: the built-in model's full forward (log-probabilities of 8
// sequences × 128 tokens) with float32 linears and with the fused 4-bit GEMM (NF4),
// interleaved so that a busy machine slows both alike; x_fp32 is the ratio of their speeds.
// run: go test ./engine/model -run X -bench QuantizedForward -benchtime 10x
func BenchmarkQuantizedForward(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	seqs := make([][]int, 8)
	for i := range seqs {
		seqs[i] = randomIDs(rng, 128, builtinShape().Vocab)
	}
	fp32, _ := builtinOrShaped(b)
	nf4, _ := builtinOrShaped(b)
	if _, _, err := nf4.Quantize(quant.Default()); err != nil {
		b.Fatal(err)
	}
	var t32, t4 time.Duration
	run := func(m *Model, t *time.Duration) {
		t0 := time.Now()
		if _, err := m.LogProbs(seqs, 1, AdaptersOn); err != nil {
			b.Fatal(err)
		}
		*t += time.Since(t0)
	}
	run(fp32, &t32) // warm the buffers
	run(nf4, &t4)
	t32, t4 = 0, 0
	for b.Loop() {
		run(fp32, &t32)
		run(nf4, &t4)
	}
	tokens := float64(b.N * 8 * 128)
	b.ReportMetric(tokens/t32.Seconds(), "fp32_tokens/s")
	b.ReportMetric(tokens/t4.Seconds(), "nf4_tokens/s")
	b.ReportMetric(t32.Seconds()/t4.Seconds(), "x_fp32")
}
