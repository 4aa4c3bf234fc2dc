package model

import (
	"math/rand/v2"
	"testing"
	"time"

	"rlhfstation/engine/backend/cpu"
)

// bench25M is a llama of about 25M parameters (29M with the tied 8192×512 embedding).
var bench25M = Config{ModelType: "llama", Vocab: 8192, Dim: 512, Layers: 8, Heads: 8, KVHeads: 4, Hidden: 1536,
	MaxPos: 512, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1}

// reportGEMM adds the share of time in GEMM and the GEMM rate to a benchmark's metrics.
func reportGEMM(b *testing.B, elapsed time.Duration, tokens int) {
	s := cpu.ReadGEMMStats()
	b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(100*s.Seconds/elapsed.Seconds(), "%gemm")
	b.ReportMetric(s.Flops/s.Seconds/1e9, "gemm-GFLOP/s")
}

// BenchmarkForward25M: a full forward (every position's log-probability, the scoring and
// training-forward shape) of 8 sequences × 256 tokens.
func BenchmarkForward25M(b *testing.B) {
	m, err := NewRandom(bench25M, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	seqs := make([][]int, 8)
	for i := range seqs {
		seqs[i] = randomIDs(rng, 256, bench25M.Vocab)
	}
	m.LogProbs(seqs, 1, AdaptersOn) // warm the buffers
	cpu.ResetGEMMStats()
	cpu.ProfileGEMM(true)
	defer cpu.ProfileGEMM(false)
	start := time.Now()
	for b.Loop() {
		if _, err := m.LogProbs(seqs, 1, AdaptersOn); err != nil {
			b.Fatal(err)
		}
	}
	reportGEMM(b, time.Since(start), b.N*8*256)
}

// BenchmarkDecode25M: batched decoding of 8 sequences, one token each per step, at
// contexts from 128 to 256 (generation's shape).
func BenchmarkDecode25M(b *testing.B) {
	m, err := NewRandom(bench25M, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = randomIDs(rng, 128, bench25M.Vocab)
	}
	cache := m.NewCache(8, 256)
	steps := 0
	cpu.ResetGEMMStats()
	cpu.ProfileGEMM(true)
	defer cpu.ProfileGEMM(false)
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		cache.Reset()
		if _, err := m.Forward(cache, prompts, true, AdaptersOn); err != nil {
			b.Fatal(err)
		}
		cpu.ResetGEMMStats()
		b.StartTimer()
		start := time.Now()
		next := make([][]int, 8)
		for s := 0; s < 128; s++ {
			for i := range next {
				next[i] = []int{rng.IntN(bench25M.Vocab)}
			}
			if _, err := m.Forward(cache, next, true, AdaptersOn); err != nil {
				b.Fatal(err)
			}
		}
		elapsed += time.Since(start)
		steps += 128
	}
	reportGEMM(b, elapsed, steps*8)
}

// BenchmarkTrainStep25M: training forward and full-parameter backward of a mean
// cross-entropy over 8 sequences × 256 tokens (pretraining's step).
func BenchmarkTrainStep25M(b *testing.B) {
	m, err := NewRandom(bench25M, 1)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	seqs := make([][]int, 8)
	dlogp := make([][]float32, 8)
	for i := range seqs {
		seqs[i] = randomIDs(rng, 256, bench25M.Vocab)
		dlogp[i] = make([]float32, 256)
		for j := 1; j < 256; j++ {
			dlogp[i][j] = -1.0 / (8 * 255)
		}
	}
	tape, g := m.NewTape(), newGrads(b, m)
	step := func() {
		if err := m.ForwardTrain(tape, seqs, TrainOptions{}); err != nil {
			b.Fatal(err)
		}
		g.Zero()
		if err := m.Backward(tape, dlogp, g); err != nil {
			b.Fatal(err)
		}
	}
	step()
	cpu.ResetGEMMStats()
	cpu.ProfileGEMM(true)
	defer cpu.ProfileGEMM(false)
	start := time.Now()
	for b.Loop() {
		step()
	}
	reportGEMM(b, time.Since(start), b.N*8*256)
}
