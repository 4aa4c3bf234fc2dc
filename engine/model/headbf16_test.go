package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"rlhfstation/engine/backend/cpu"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// TestBF16Head: over a 4-bit base, a token embedding and LM head whose values are bf16 (as
// released checkpoints store them) are held as bf16, half the bytes, and compute what the
// same values held in float32 compute: logits of a prefill and of one-row decode steps,
// log-probs (the head's chunked path: the reference pass), greedy tokens and their log-probs,
// NTL's digit logits, adapter gradients through the head, its digit rows and the embedding; a folder saved in bf16 loads
// straight into bf16. Tied and untied heads, GPT-2's Conv1D, gemma2's embedding scale and
// final soft-cap.
func TestBF16Head(t *testing.T) {
	for _, name := range []string{"qwen2-bias", "llama-gqa", "gpt2-untied", "gemma2-softcap"} {
		t.Run(name, func(t *testing.T) {
			c := tinyConfigs()[name]
			build := func() *Model {
				m := randomModel(t, c, 11)
				for _, p := range []*Param{m.Embed, m.Head} {
					for i, v := range p.Data {
						p.Data[i] = cpu.FromBF16(cpu.ToBF16(v))
					}
				}
				for _, l := range m.Linears() {
					l.W = &Quantized{W: mustQuantize(t, l, quant.Default())}
				}
				m.ReleaseReplaced() // as Quantize does, without holdBF16
				return m
			}
			f32, b16 := build(), build()
			b16.holdBF16()
			if f32.Head.BF16 != nil || b16.Embed.BF16 == nil || b16.Head.BF16 == nil || b16.Head.Data != nil || b16.Embed.Data != nil {
				t.Fatal("the bf16 values over a 4-bit base are not held as bf16 (or the float32 copy is kept)")
			}
			held := int64(c.Vocab * c.Dim)
			if !c.TieEmbed {
				held *= 2
			}
			if d := f32.ResidentBytes() - b16.ResidentBytes(); d != 2*held {
				t.Errorf("bf16 saves %d bytes, want %d", d, 2*held)
			}
			if f32.NumParams() != b16.NumParams() {
				t.Errorf("NumParams %d, float32 %d", b16.NumParams(), f32.NumParams())
			}
			rng := rand.New(rand.NewPCG(7, 8))
			seqs := [][]int{randomIDs(rng, 13, c.Vocab), randomIDs(rng, 5, c.Vocab)}
			near1e5(t, "prefill logits", logitsOf(t, b16, seqs), logitsOf(t, f32, seqs))
			decode := func(m *Model) []float32 { // one row at a time through the cache
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
			near1e5(t, "decode logits", decode(b16), decode(f32))
			lpOf := func(m *Model) []float32 {
				lp, err := m.LogProbs(seqs, 0.7, AdaptersOff)
				if err != nil {
					t.Fatal(err)
				}
				return slices.Concat(lp...)
			}
			near1e5(t, "log-probs", lpOf(b16), lpOf(f32))
			genOf := func(m *Model) *Generation {
				g, err := m.Generate(seqs, GenerateOptions{MaxNewTokens: 6, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			gb, gf := genOf(b16), genOf(f32)
			for i := range gb.Tokens {
				if !slices.Equal(gb.Tokens[i], gf.Tokens[i]) {
					t.Fatalf("greedy tokens %v, float32 head %v", gb.Tokens[i], gf.Tokens[i])
				}
				near1e5(t, "generated log-probs", gb.LogProbs[i], gf.LogProbs[i])
			}
			// Adapter gradients: the head's backward into the hidden states (HeadLogProbsBackward).
			dlogp := [][]float32{make([]float32, 13), make([]float32, 5)}
			for _, d := range dlogp {
				for j := 1; j < len(d); j++ {
					d[j] = float32(rng.NormFloat64())
				}
			}
			// and through the digit tokens' rows of the head (NTL's query, copied rows).
			digits := &DigitQuery{IDs: []int{3, 7, 11, 19}, At: [][]int{{2, 5, 9}, {1, 4}}}
			gradOf := func(m *Model) ([]float32, []float32) { return headGrads(t, m, seqs, digits, dlogp, false) }
			gB, dB := gradOf(b16)
			gF, dF := gradOf(f32)
			near1e5(t, "digit logits", dB, dF)
			if e := relErr(gB, gF); e > 1e-5 {
				t.Errorf("adapter gradients: relative error %.2e against the float32 head", e)
			}
			// A bf16 folder loads into bf16 without a float32 copy, the same function.
			dir := t.TempDir()
			if err := b16.SaveAs(dir, safetensors.BF16); err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if loaded.Head.BF16 == nil || loaded.Embed.BF16 == nil || !slices.Equal(loaded.Head.BF16, b16.Head.BF16) {
				t.Fatal("the bf16 folder's head is not loaded as the bf16 it holds")
			}
			if math.Abs(float64(loaded.ResidentBytes()-b16.ResidentBytes())) > 0 {
				t.Errorf("loaded resident %d, in memory %d", loaded.ResidentBytes(), b16.ResidentBytes())
			}
			// bf16 rounding of norms and biases changes them: compare the head's own values only.
			if d, err := loaded.Dequantize(); err != nil || !slices.Equal(d.Head.Data, b16.Head.Float32()) {
				t.Fatalf("Dequantize: %v, or the head's values differ", err)
			}
		})
	}
}

// A float32 model, or a 4-bit one whose embedding has float32 values, keeps them in float32.
func TestBF16HeadOnlyWhenExact(t *testing.T) {
	c := tinyConfigs()["llama-gqa"]
	m := randomModel(t, c, 3)
	m.holdBF16()
	if m.Embed.BF16 != nil {
		t.Fatal("a float32 base's embedding held as bf16")
	}
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		t.Fatal(err)
	}
	if m.Embed.BF16 != nil || m.Head.BF16 != nil {
		t.Fatal("float32 values held as bf16")
	}
}

// headGrads runs a training pass through every head path (log-probs, with entropy when asked,
// and the digit rows of NTL) with a full adapter on every linear, and the backward from fixed
// upstream gradients; it gives the adapters' gradients and the digit logits.
func headGrads(t *testing.T, m *Model, seqs [][]int, digits *DigitQuery, dlogp [][]float32, entropy bool) ([]float32, []float32) {
	t.Helper()
	var all []*fullAdapter
	for _, l := range m.Linears() {
		a := &fullAdapter{out: l.Out, in: l.In, M: make([]float32, l.Out*l.In), dM: make([]float32, l.Out*l.In)}
		l.Adapter = a
		all = append(all, a)
	}
	tape := m.NewTape()
	if err := m.ForwardTrain(tape, seqs, TrainOptions{Temperature: 0.7, Entropy: entropy, Digits: digits}); err != nil {
		t.Fatal(err)
	}
	if entropy {
		tape.EntropyGrad = make([][]float32, len(dlogp))
		for s := range tape.EntropyGrad {
			tape.EntropyGrad[s] = make([]float32, len(dlogp[s]))
			for j := range tape.EntropyGrad[s] {
				tape.EntropyGrad[s][j] = 0.01 * float32(j%3)
			}
		}
	}
	var dl []float32
	tape.DigitGrad = make([][][]float32, len(tape.DigitLogits))
	for s, rows := range tape.DigitLogits {
		for j, row := range rows {
			dl = append(dl, row...)
			g := make([]float32, len(row))
			for k := range g {
				g[k] = float32(s+j+k) * 0.1
			}
			tape.DigitGrad[s] = append(tape.DigitGrad[s], g)
		}
	}
	if err := m.Backward(tape, dlogp, nil); err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, a := range all {
		out = append(out, a.dM...)
	}
	return out, dl
}
