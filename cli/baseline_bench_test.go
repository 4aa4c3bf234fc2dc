package cli

import (
	"math/rand/v2"
	"rlhfstation/engine"
	"strings"
	"testing"

	"rlhfstation/engine/model"
	"rlhfstation/engine/tokenizer"
	"rlhfstation/rewards"
)

// benchScorerConfig is a random llama of about the built-in model's size (≤ 8 MB of weights:
// 2.4M parameters), used until the built-in model exists.
var benchScorerConfig = model.Config{ModelType: "llama", Vocab: 4096, Dim: 192, Layers: 4, Heads: 6, KVHeads: 2,
	HeadDim: 32, Hidden: 512, MaxPos: 512, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: 0, EOS: []int{0}}

// benchGroup makes G completions of n tokens after prompts of p tokens from a trained
// tokenizer: words drawn at random from the test corpus, so words span several tokens.
func benchGroup(t testing.TB, tok *tokenizer.Tokenizer, g, p, n int) []engine.BaselineSample {
	rng := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields(baselineCorpus)
	out := make([]engine.BaselineSample, g)
	for i := range out {
		var sb strings.Builder
		for sb.Len() < 8*(p+n) {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(" \n"[min(rng.IntN(12), 1)])
		}
		text := sb.String()
		enc := tok.Encode(text, false)
		if len(enc.IDs) < p+n {
			t.Fatalf("text of %d tokens", len(enc.IDs))
		}
		lo, hi := enc.Offsets[p][0], enc.Offsets[p+n-1][1]
		s := engine.BaselineSample{Context: append([]int{0}, enc.IDs[:p]...), IDs: enc.IDs[p : p+n], Text: text[lo:hi]}
		for _, o := range enc.Offsets[p : p+n] {
			s.Spans = append(s.Spans, rewards.Span{Start: o[0] - lo, End: o[1] - lo})
		}
		out[i] = s
	}
	return out
}

// BenchmarkMultiLevelScoring measures multi-level perplexity scoring for one GRPO batch of
// 64 completions of 128 tokens (after 32-token prompts) on a built-in-sized model:
//   - forward: the scorer's pass (adapters off) giving each completion token's NLL;
//   - rewards: the pure reward computation (words, three levels, aggregate, improvement,
//     step shape) from those NLLs;
//   - rollout: generating the same 64×128 tokens with the KV cache, the part of a GRPO step
//     the scoring is to be compared with.
//
// Run: go test -run '^$' -bench MultiLevelScoring -benchtime 3x .
func BenchmarkMultiLevelScoring(b *testing.B) {
	tok, err := tokenizer.Train([]string{baselineCorpus, baselineCorpus}, 300, []string{"<s>"})
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.NewRandom(benchScorerConfig, 1)
	if err != nil {
		b.Fatal(err)
	}
	const g, p, n = 64, 32, 128
	samples := benchGroup(b, tok, g, p, n)
	ppl := rewards.PPL{Weights: rewards.Weights{Word: 0.1, Phrase: 0.3, Sentence: 0.6}, Baselines: rewards.Levels{Word: 4000, Phrase: 4000, Sentence: 4000},
		Shape: rewards.Step, Thresholds: rewards.DefaultThresholds}
	nlls, err := engine.BaselineNLL(m, samples)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]rewards.Sample, g)
	for i, s := range samples {
		batch[i] = rewards.Sample{Completion: s.Text, Spans: s.Spans, NLL: nlls[i]}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N*g)/b.Elapsed().Seconds(), "completions/s")
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/batch")
	}
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			if _, err := engine.BaselineNLL(m, samples); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("rewards", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := ppl.Score(batch); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("rollout", func(b *testing.B) {
		prompts := make([][]int, g)
		for i, s := range samples {
			prompts[i] = s.Context
		}
		for b.Loop() {
			if _, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: n, Temperature: 1, Seed: 1, NoEOS: true}); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
}
