package model

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"rlhfstation/quant"
)

// TestQ4Head: a 4-bit LM head (QuantizeHead) computes what the same model with the head's
// dequantized values in a float32 head computes (the same math: tight), and stays near the
// original head (loose): prefill and one-row decode logits, log-probs (the reference pass's
// chunked path), greedy generation, NTL's digit logits and adapter gradients through the
// frozen head (dhidden = dlogits·W) and, tied, through the embedding read from the same
// 4-bit tensor. The memory it holds, its parameters, and a folder written and read back.
func TestQ4Head(t *testing.T) {
	for _, name := range []string{"llama-gqa", "gpt2-tied", "qwen2-bias", "gemma2-softcap"} {
		t.Run(name, func(t *testing.T) {
			c := tinyConfigs()[name]
			build := func() *Model {
				m := randomModel(t, c, 11)
				for _, l := range m.Linears() {
					l.W = &Quantized{W: mustQuantize(t, l, quant.Default())}
				}
				m.ReleaseReplaced()
				return m
			}
			orig, q4, ref := build(), build(), build()
			before := q4.ResidentBytes()
			dense, packed, err := q4.QuantizeHead(quant.Default())
			if err != nil {
				t.Fatal(err)
			}
			if q4.HeadQ == nil || q4.Head != nil || (c.TieEmbed != (q4.Embed == nil)) {
				t.Fatalf("QuantizeHead: HeadQ %v, Head %v, Embed %v (tied %v)", q4.HeadQ != nil, q4.Head != nil, q4.Embed != nil, c.TieEmbed)
			}
			if dense != int64(4*c.Vocab*c.Dim) || before-q4.ResidentBytes() != dense-packed {
				t.Errorf("head %d → %d bytes; resident %d → %d", dense, packed, before, q4.ResidentBytes())
			}
			if q4.NumParams() != orig.NumParams() {
				t.Errorf("NumParams %d, dense head %d", q4.NumParams(), orig.NumParams())
			}
			// ref: the dequantized head's values in a float32 head (the embedding too when tied)
			q4.HeadQ.W.Dequantize(ref.Head.Data)
			rng := rand.New(rand.NewPCG(7, 8))
			seqs := [][]int{randomIDs(rng, 13, c.Vocab), randomIDs(rng, 5, c.Vocab)}
			near1e5(t, "prefill logits", logitsOf(t, q4, seqs), logitsOf(t, ref, seqs))
			decode := func(m *Model) []float32 {
				cache := m.NewCache(1, len(seqs[0]))
				var out []float32
				for _, tok := range seqs[0] {
					lg, err := m.Forward(cache, [][]int{{tok}}, true, AdaptersOn)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, lg...)
				}
				return out
			}
			// One and two rows of x take the CPU's int16 kernels for the 4-bit head (q4row16, an
			// approximation: up to 2.1e-4 of these logits against the dense head's exact product).
			near := func(what string, got, want []float32) {
				t.Helper()
				for i := range got {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-3*math.Max(1, math.Abs(float64(want[i]))) {
						t.Fatalf("%s[%d] = %g, dequantized dense %g", what, i, got[i], want[i])
					}
				}
			}
			near("decode logits", decode(q4), decode(ref))
			lpOf := func(m *Model) []float32 {
				lp, err := m.LogProbs(seqs, 0.7, AdaptersOff)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Concat(lp...)
			}
			lq := lpOf(q4)
			near1e5(t, "log-probs", lq, lpOf(ref))
			// against the original head: near, but not the same (the head is 4-bit)
			// (NF4 on these N(0, 0.15²) weights: 3-17% of the log-probs, gemma2 tied with √hidden)
			if e := relErr(lq, lpOf(orig)); e == 0 || e > 0.25 {
				t.Errorf("log-probs differ from the dense head's by %.3g (relative), want in (0, 0.25]", e)
			} else {
				t.Logf("log-probs against the dense head: relative error %.3g", e)
			}
			genOf := func(m *Model) *Generation {
				g, err := m.Generate(seqs, GenerateOptions{MaxNewTokens: 6, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			gq, gr := genOf(q4), genOf(ref)
			for i := range gq.Tokens {
				if !slices.Equal(gq.Tokens[i], gr.Tokens[i]) {
					t.Fatalf("greedy tokens %v, dequantized head %v", gq.Tokens[i], gr.Tokens[i])
				}
				near("generated log-probs", gq.LogProbs[i], gr.LogProbs[i])
			}
			dlogp := [][]float32{make([]float32, 13), make([]float32, 5)}
			for _, d := range dlogp {
				for j := 1; j < len(d); j++ {
					d[j] = float32(rng.NormFloat64())
				}
			}
			digits := &DigitQuery{IDs: []int{3, 7, 11, 19}, At: [][]int{{2, 5, 9}, {1, 4}}}
			gradOf := func(m *Model) ([]float32, []float32) { return headGrads(t, m, seqs, digits, dlogp, true) }
			gQ, dQ := gradOf(q4)
			gR, dR := gradOf(ref)
			near1e5(t, "digit logits", dQ, dR)
			if e := relErr(gQ, gR); e > 1e-5 || allZeroF(gQ) {
				t.Errorf("adapter gradients: relative error %.2e against the dequantized head", e)
			}
			if q4.hexp.on != nil || q4.Head != nil {
				t.Fatal("a dense copy of the 4-bit head was made on the CPU")
			}
			// Written and read back: an untied head as bitsandbytes' 4-bit lm_head (a
			// quantization_config that does not skip it); a tied one expanded (bitsandbytes has
			// no 4-bit embedding).
			dir := t.TempDir()
			if err := q4.Save(dir); err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if c.TieEmbed {
				if loaded.HeadQ != nil || !slices.Equal(loaded.Head.Float32(), ref.Head.Data) {
					t.Fatal("a tied 4-bit head is not written as its expansion")
				}
				return
			}
			raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if qc, ok, err := quant.IsQuantized(raw); err != nil || !ok || qc.SkipModules == nil || slices.Contains(qc.SkipModules, "lm_head") {
				t.Fatalf("quantization_config skips %v (%v): transformers would keep lm_head 16-bit", qc.SkipModules, err)
			}
			if loaded.HeadQ == nil || !slices.Equal(loaded.HeadQ.W.Packed, q4.HeadQ.W.Packed) || loaded.ResidentBytes() != q4.ResidentBytes() {
				t.Fatal("a bitsandbytes folder's 4-bit lm_head does not load as the 4-bit head")
			}
			near1e5(t, "loaded log-probs", lpOf(loaded), lq)
			d, err := loaded.Dequantize()
			if err != nil || !slices.Equal(d.Head.Data, ref.Head.Data) {
				t.Fatalf("Dequantize: %v, or the head's values differ", err)
			}
		})
	}
}

func allZeroF(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}
