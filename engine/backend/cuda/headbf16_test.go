package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// TestBF16HeadOnTheDevice: a 4-bit model whose embedding and head are held as bf16 on the host
// (model.Param.BF16, as the CPU reads a bf16 folder) places them on the device as they are:
// its log-probs match the CPU's, and the decode step (graph) runs.
func TestBF16HeadOnTheDevice(t *testing.T) {
	b := testBackend(t)
	m, err := model.NewRandom(decodeStructure, 3)
	must(t, err)
	for i, v := range m.Embed.Data {
		m.Embed.Data[i] = cpu.FromBF16(cpu.ToBF16(v))
	}
	_, _, err = m.Quantize(quant.Default())
	must(t, err)
	if m.Head.BF16 == nil {
		t.Fatal("the head is not held as bf16")
	}
	rng := rand.New(rand.NewPCG(3, 3))
	seqs := make([][]int, 3)
	for i := range seqs {
		for j := 0; j < 6+4*i; j++ {
			seqs[i] = append(seqs[i], rng.IntN(decodeStructure.Vocab))
		}
	}
	want, err := m.LogProbs(seqs, 1, model.AdaptersOff)
	must(t, err)
	must(t, m.Use(b))
	got, err := m.LogProbs(seqs, 1, model.AdaptersOff)
	must(t, err)
	for s := range want {
		for i := range want[s] {
			if d := math.Abs(float64(got[s][i] - want[s][i])); d > 0.1+0.1*math.Abs(float64(want[s][i])) {
				t.Fatalf("sequence %d token %d: log-prob %g on the device, %g on the CPU", s, i, got[s][i], want[s][i])
			}
		}
	}
	g, err := m.Generate(seqs, model.GenerateOptions{MaxNewTokens: 4, NoEOS: true})
	must(t, err)
	for i := range g.Tokens {
		if len(g.Tokens[i]) != 4 {
			t.Fatalf("sequence %d: %d tokens", i, len(g.Tokens[i]))
		}
	}
}

// TestQ4HeadOnTheDevice: a 4-bit LM head ([quant] head), untied and tied to the embedding,
// runs on the device as its bf16 expansion (ExpandsQ4Head; the embedding's rows read from it
// when tied) where the CPU runs the 4-bit ops: log-probs match the CPU's within the bf16
// head's bounds, the decode step (graph) generates, and the training pass's backward through
// the frozen head runs.
func TestQ4HeadOnTheDevice(t *testing.T) {
	for _, tied := range []bool{false, true} {
		c := decodeStructure
		c.TieEmbed = tied
		b := testBackend(t)
		m, err := model.NewRandom(c, 3)
		must(t, err)
		_, _, err = m.Quantize(quant.Default())
		must(t, err)
		_, _, err = m.QuantizeHead(quant.Default())
		must(t, err)
		if m.HeadQ == nil || (m.Embed == nil) != tied {
			t.Fatalf("tied %v: the head is not 4-bit", tied)
		}
		rng := rand.New(rand.NewPCG(3, 3))
		seqs := make([][]int, 3)
		for i := range seqs {
			for j := 0; j < 6+4*i; j++ {
				seqs[i] = append(seqs[i], rng.IntN(c.Vocab))
			}
		}
		want, err := m.LogProbs(seqs, 1, model.AdaptersOff)
		must(t, err)
		must(t, m.Use(b))
		got, err := m.LogProbs(seqs, 1, model.AdaptersOff)
		must(t, err)
		for s := range want {
			for i := range want[s] {
				if d := math.Abs(float64(got[s][i] - want[s][i])); d > 0.1+0.1*math.Abs(float64(want[s][i])) {
					t.Fatalf("tied %v: sequence %d token %d: log-prob %g on the device, %g on the CPU", tied, s, i, got[s][i], want[s][i])
				}
			}
		}
		g, err := m.Generate(seqs, model.GenerateOptions{MaxNewTokens: 4, NoEOS: true})
		must(t, err)
		for i := range g.Tokens {
			if len(g.Tokens[i]) != 4 {
				t.Fatalf("tied %v: sequence %d: %d tokens", tied, i, len(g.Tokens[i]))
			}
		}
		tape := m.NewTape()
		must(t, m.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: 1, Entropy: true}))
		dlogp := make([][]float32, len(seqs))
		for s := range seqs {
			dlogp[s] = make([]float32, len(seqs[s]))
			for j := 1; j < len(seqs[s]); j++ {
				dlogp[s][j] = 0.1
			}
		}
		must(t, m.Backward(tape, dlogp, nil))
		must(t, b.Sync())
	}
}
