package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TrainOptions.Digits: the tape's digit logits are the raw logits LogProbsSeeing shows, and
// Backward with Tape.DigitGrad alone (dlogp zero: a zero-advantage group) gives the gradient
// of Σ DigitGrad·DigitLogits, against central finite differences of every tensor.
func TestDigitLogitsGradient(t *testing.T) {
	for name, cfg := range map[string]Config{
		"llama": {ModelType: "llama", Vocab: 40, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 24, MaxPos: 16,
			NormEps: 1e-5, RopeTheta: 10000},
		"gpt2 (tied head)": {ModelType: "gpt2", Vocab: 40, Dim: 16, Layers: 2, Heads: 2, Hidden: 24, MaxPos: 16, NormEps: 1e-5, TieEmbed: true},
	} {
		t.Run(name, func(t *testing.T) { digitLogitsGradient(t, cfg) })
	}
}

func digitLogitsGradient(t *testing.T, cfg Config) {
	m := randomModel(t, cfg, 61)
	rng := rand.New(rand.NewPCG(61, 2))
	seqs := [][]int{randomIDs(rng, 9, cfg.Vocab), randomIDs(rng, 6, cfg.Vocab)}
	first := []int{3, 2}
	q := &DigitQuery{IDs: []int{3, 5, 7, 11, 30}, At: [][]int{{3, 5, 8}, {4}}}
	coef := make([][][]float32, len(seqs))
	for s := range q.At {
		for range q.At[s] {
			row := make([]float32, len(q.IDs))
			for c := range row {
				row[c] = float32(rng.NormFloat64())
			}
			coef[s] = append(coef[s], row)
		}
	}
	dlogp := [][]float32{make([]float32, 9), make([]float32, 6)}
	tape := m.NewTape()
	loss := func() float64 {
		if err := m.ForwardTrain(tape, seqs, TrainOptions{Temperature: 0.7, FirstScored: first, Digits: q}); err != nil {
			t.Fatal(err)
		}
		var s float64
		for i := range coef {
			for j := range coef[i] {
				for c, g := range coef[i][j] {
					s += float64(g) * float64(tape.DigitLogits[i][j][c])
				}
			}
		}
		return s
	}
	loss()
	if _, err := m.LogProbsSeeing(seqs, 0.7, AdaptersOn, func(s, i int, logits []float32) {
		for j, at := range q.At[s] {
			if at == i+1 {
				for c, id := range q.IDs {
					if d := tape.DigitLogits[s][j][c] - logits[id]; d > 1e-5 || d < -1e-5 {
						t.Errorf("sequence %d token %d: digit logit %d is %g, the inference pass's %g", s, at, c, tape.DigitLogits[s][j][c], logits[id])
					}
				}
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	tape.DigitGrad = coef
	g := newGrads(t, m)
	if err := m.Backward(tape, dlogp, g); err != nil {
		t.Fatal(err)
	}
	worst, worstName := 0.0, ""
	for _, p := range m.Params {
		gp := g.Of(p).F32()
		var scale float64
		for _, v := range gp {
			scale = math.Max(scale, math.Abs(float64(v)))
		}
		if scale == 0 {
			t.Fatalf("no gradient reaches %s", p.Name)
		}
		for k := 0; k < 4; k++ {
			i := rng.IntN(len(p.Data))
			const eps = 1e-2
			orig := p.Data[i]
			p.Data[i] = orig + eps
			lp := loss()
			p.Data[i] = orig - eps
			lm := loss()
			p.Data[i] = orig
			fd := (lp - lm) / (2 * eps)
			if e := math.Abs(fd-float64(gp[i])) / scale; e > worst {
				worst, worstName = e, p.Name
			}
		}
	}
	if worst > 5e-3 {
		t.Errorf("gradient of %s differs from finite differences by %.2g (relative to its largest entry)", worstName, worst)
	} else {
		t.Logf("worst finite-difference error %.2g (%s)", worst, worstName)
	}
	// A position before FirstScored, or a gradient of another shape, is refused.
	bad := &DigitQuery{IDs: q.IDs, At: [][]int{{2}, {}}}
	if err := m.ForwardTrain(tape, seqs, TrainOptions{FirstScored: first, Digits: bad}); err == nil {
		t.Error("a digit position before FirstScored accepted")
	}
	if err := m.ForwardTrain(tape, seqs, TrainOptions{FirstScored: first, Digits: q}); err != nil {
		t.Fatal(err)
	}
	tape.DigitGrad = [][][]float32{coef[0], nil}
	if err := m.Backward(tape, dlogp, nil); err == nil {
		t.Error("digit gradients of the wrong shape accepted")
	}
}
