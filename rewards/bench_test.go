package rewards

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// benchBatch makes n completions of tokens tokens each: words of one to three tokens,
// sentences of about ten words, with NLLs around 3.
func benchBatch(n, tokens int) []Sample {
	rng := rand.New(rand.NewPCG(1, 2))
	samples := make([]Sample, n)
	for i := range samples {
		var b strings.Builder
		s := Sample{Spans: make([]Span, tokens), NLL: make([]float64, tokens)}
		for k := 0; k < tokens; k++ {
			piece := "ab"
			switch {
			case rng.IntN(10) == 0:
				piece = ". Cd"
			case rng.IntN(2) == 0:
				piece = " ef"
			}
			s.Spans[k] = Span{b.Len(), b.Len() + len(piece)}
			b.WriteString(piece)
			s.NLL[k] = 6 * rng.Float64()
		}
		s.Completion = b.String()
		samples[i] = s
	}
	return samples
}

// BenchmarkMultiLevelRewards times the pure reward computation (segmentation, three levels,
// aggregate, improvement, shape) for one GRPO batch: 64 completions of 128 tokens. The
// model's forward pass that produces the NLLs is timed by the baseline command's benchmark.
func BenchmarkMultiLevelRewards(b *testing.B) {
	samples := benchBatch(64, 128)
	p := PPL{Weights: Weights{0.1, 0.3, 0.6}, Baselines: Levels{20, 25, 30}, Shape: Step, Thresholds: DefaultThresholds}
	for b.Loop() {
		if _, _, err := p.Score(samples); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(samples))/b.Elapsed().Seconds(), "completions/s")
}
