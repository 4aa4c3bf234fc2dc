package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/safetensors"
)

// gradCase is a model, a batch of sequences of different lengths and random dlogp.
type gradCase struct {
	name  string
	m     *Model
	dir   string
	seqs  [][]int
	dlogp [][]float32
	temp  float32
}

func gradCases(t *testing.T) []gradCase {
	var cases []gradCase
	for i, name := range []string{"gpt2-tied", "gpt2-untied", "llama-gqa", "qwen2-bias", "mistral-window", "llama-tied-bias"} {
		m := randomModel(t, tinyConfigs()[name], uint64(10+i))
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		seqs := [][]int{randomIDs(rng, 14, m.Config.Vocab), randomIDs(rng, 9, m.Config.Vocab), randomIDs(rng, 2, m.Config.Vocab)}
		dlogp := make([][]float32, len(seqs))
		for s, seq := range seqs {
			dlogp[s] = make([]float32, len(seq))
			for j := 1; j < len(seq); j++ {
				if rng.IntN(4) > 0 { // some tokens outside the loss
					dlogp[s][j] = float32(rng.NormFloat64())
				}
			}
		}
		temp := float32(1)
		if i%2 == 1 {
			temp = 0.7
		}
		cases = append(cases, gradCase{name: name, m: m, dir: saveAs(t, m, safetensors.F32), seqs: seqs, dlogp: dlogp, temp: temp})
	}
	return cases
}

// gradErr is max|got − want| / max|want| over one tensor.
func gradErr(got []float32, want []float64) float64 {
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
	}
	if s == 0 {
		return d
	}
	return d / s
}

// storedLayout returns p's gradient in the checkpoint layout (GPT-2's Conv1D transposed).
func storedLayout(p *Param, g []float32) []float32 {
	if !p.conv1D {
		return g
	}
	out, in := p.Shape[0], p.Shape[1]
	t := make([]float32, len(g))
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			t[i*out+o] = g[o*in+i]
		}
	}
	return t
}

// TestGradientsMatchReference: log-probs and every parameter's gradient of
// Σ dlogp·logp against PyTorch autograd, for both families.
func TestGradientsMatchReference(t *testing.T) {
	cases := gradCases(t)
	var jobs []refJob
	for _, c := range cases {
		jobs = append(jobs, refJob{Model: c.dir, Grad: &refGradJob{Seqs: c.seqs, DLogp: c.dlogp, Temperature: c.temp}})
	}
	results := runReference(t, jobs)
	for ci, c := range cases {
		ref := results[ci].Grad
		tape := c.m.NewTape()
		if err := c.m.ForwardTrain(tape, c.seqs, TrainOptions{Temperature: c.temp}); err != nil {
			t.Fatal(err)
		}
		for s := range c.seqs {
			for j := range c.seqs[s] {
				if d := math.Abs(float64(tape.LogProbs[s][j]) - ref.Logp[s][j]); d > 1e-4*math.Max(1, math.Abs(ref.Logp[s][j])) {
					t.Fatalf("%s seq %d token %d: log-prob %g, PyTorch %g", c.name, s, j, tape.LogProbs[s][j], ref.Logp[s][j])
				}
			}
		}
		g := newGrads(t, c.m)
		if err := c.m.Backward(tape, c.dlogp, g); err != nil {
			t.Fatal(err)
		}
		worst, worstName := 0.0, ""
		for _, p := range c.m.Params {
			want, ok := ref.Params[p.Name]
			if !ok {
				t.Fatalf("%s: PyTorch has no gradient for %s", c.name, p.Name)
			}
			if e := gradErr(storedLayout(p, g.Of(p).F32()), want); e > worst {
				worst, worstName = e, p.Name
			}
		}
		if worst > 1e-3 {
			t.Errorf("%s: gradient of %s differs from PyTorch by %.2g relative (tolerance 1e-3)", c.name, worstName, worst)
		} else {
			t.Logf("%s: worst parameter gradient error %.2g (%s)", c.name, worst, worstName)
		}
	}
}

// fullAdapter is an adapter y += x·Mᵀ with a full matrix M: its gradient is the
// gradient of the weight it sits beside, which makes the frozen-base path checkable.
type fullAdapter struct {
	out, in int
	M, dM   []float32
}

func (a *fullAdapter) Forward(y, x backend.Buf, rows int, train bool) error {
	tmp := make([]float32, rows*a.out)
	cpu.MatmulForward(tmp, x.F32(), a.M, nil, rows, a.in, a.out)
	yv := y.F32()
	for i := range tmp {
		yv[i] += tmp[i]
	}
	return nil
}

func (a *fullAdapter) Backward(dx, dy, x backend.Buf, rows int) error {
	cpu.MatmulBackward(dx.F32(), a.dM, nil, dy.F32(), x.F32(), a.M, rows, a.in, a.out)
	return nil
}

// TestFrozenBaseAdapterGradients: with the base frozen (no Grads), an adapter on every
// linear receives exactly the gradient the full-parameter backward gives that linear's
// weight, so input gradients flow correctly through every frozen weight; with
// AdaptersOff the adapters are skipped.
func TestFrozenBaseAdapterGradients(t *testing.T) {
	for _, name := range []string{"llama-gqa", "gpt2-tied"} {
		m := randomModel(t, tinyConfigs()[name], 21)
		rng := rand.New(rand.NewPCG(5, 5))
		seqs := [][]int{randomIDs(rng, 12, m.Config.Vocab), randomIDs(rng, 7, m.Config.Vocab)}
		dlogp := [][]float32{make([]float32, 12), make([]float32, 7)}
		dent := [][]float32{make([]float32, 12), make([]float32, 7)}
		for i, d := range dlogp {
			for j := 1; j < len(d); j++ {
				d[j], dent[i][j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
		}
		tape := m.NewTape()
		if err := m.ForwardTrain(tape, seqs, TrainOptions{}); err != nil {
			t.Fatal(err)
		}
		tape.EntropyGrad = dent // an entropy term too: the frozen head's op takes it as well
		full := newGrads(t, m)
		if err := m.Backward(tape, dlogp, full); err != nil {
			t.Fatal(err)
		}
		adapters := map[*Linear]*fullAdapter{}
		for _, l := range m.Linears() {
			a := &fullAdapter{out: l.Out, in: l.In, M: make([]float32, l.Out*l.In), dM: make([]float32, l.Out*l.In)}
			l.Adapter, adapters[l] = a, a
		}
		before := append([]float32(nil), tape.LogProbs[0]...)
		if err := m.ForwardTrain(tape, seqs, TrainOptions{}); err != nil {
			t.Fatal(err)
		}
		tape.EntropyGrad = dent
		if err := m.Backward(tape, dlogp, nil); err != nil {
			t.Fatal(err)
		}
		for j, v := range tape.LogProbs[0] {
			if v != before[j] {
				t.Fatalf("%s: a zero adapter changed log-prob %d", name, j)
			}
		}
		for l, a := range adapters {
			want := full.Of(l.weight).F32()
			e := 0.0
			var scale float64
			for i := range want {
				e = math.Max(e, math.Abs(float64(a.dM[i]-want[i])))
				scale = math.Max(scale, math.Abs(float64(want[i])))
			}
			if e > 1e-5*scale || scale == 0 {
				t.Errorf("%s %s: adapter gradient off by %g (scale %g)", name, l.Name, e, scale)
			}
		}
		for _, a := range adapters {
			clear(a.dM)
		}
		m.ForwardTrain(tape, seqs, TrainOptions{Adapters: AdaptersOff})
		m.Backward(tape, dlogp, nil)
		for l, a := range adapters {
			if !allZero(a.dM) {
				t.Fatalf("%s: AdaptersOff still ran %s's adapter", name, l.Name)
			}
		}
	}
}

// TestGradientsFiniteDifferences: the whole model's backward against central differences
// of Σ dlogp·logp + dent·H (an entropy bonus's term; summed in float64) at sampled
// coordinates of every tensor.
func TestGradientsFiniteDifferences(t *testing.T) {
	configs := map[string]Config{
		"gpt2": {ModelType: "gpt2", Vocab: 40, Dim: 16, Layers: 2, Heads: 2, Hidden: 24, MaxPos: 16, NormEps: 1e-5, TieEmbed: true},
		"llama": {ModelType: "llama", Vocab: 40, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 24, MaxPos: 16,
			NormEps: 1e-5, RopeTheta: 10000, QKVBias: true, Window: 0},
	}
	for name, cfg := range configs {
		m := randomModel(t, cfg, 31)
		rng := rand.New(rand.NewPCG(8, 8))
		seqs := [][]int{randomIDs(rng, 9, cfg.Vocab), randomIDs(rng, 5, cfg.Vocab)}
		dlogp := [][]float32{make([]float32, 9), make([]float32, 5)}
		dent := [][]float32{make([]float32, 9), make([]float32, 5)}
		for i, d := range dlogp {
			for j := 1; j < len(d); j++ {
				d[j], dent[i][j] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
		}
		tape := m.NewTape()
		loss := func() float64 {
			if err := m.ForwardTrain(tape, seqs, TrainOptions{Temperature: 0.8, Entropy: true}); err != nil {
				t.Fatal(err)
			}
			var s float64
			for i := range seqs {
				for j := range seqs[i] {
					s += float64(dlogp[i][j])*float64(tape.LogProbs[i][j]) + float64(dent[i][j])*float64(tape.Entropy[i][j])
				}
			}
			return s
		}
		loss()
		tape.EntropyGrad = dent
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
			t.Errorf("%s: gradient of %s differs from finite differences by %.2g (relative to its largest entry)", name, worstName, worst)
		} else {
			t.Logf("%s: worst finite-difference error %.2g (%s)", name, worst, worstName)
		}
	}
}

// copiedWeight is a non-dense Weight (standing in for a quantized one).
type copiedWeight struct{ d Dense }

func (c *copiedWeight) MulT(b backend.Backend, y, x backend.Buf, rows int) error {
	return c.d.MulT(b, y, x, rows)
}
func (c *copiedWeight) MulAcc(b backend.Backend, dx, dy backend.Buf, rows int) error {
	return c.d.MulAcc(b, dx, dy, rows)
}

// TestReleaseReplaced: replacing weights and releasing their dense copies keeps the
// model's outputs and shrinks the parameter buffer.
func TestReleaseReplaced(t *testing.T) {
	m := randomModel(t, tinyConfigs()["qwen2-bias"], 41)
	seqs := [][]int{{1, 2, 3, 4, 5, 6, 7, 8, 9}}
	before, _ := m.LogProbs(seqs, 1, AdaptersOn)
	n0 := m.NumParams()
	freed := 0
	for _, l := range m.Linears() {
		if l.Name == "model.layers.1.mlp.up_proj" || l.Name == "model.layers.0.self_attn.q_proj" {
			d := l.W.(*Dense)
			l.W = &copiedWeight{Dense{Out: d.Out, In: d.In, W: append([]float32(nil), d.W...)}}
			freed += d.Out * d.In
		}
	}
	if got := m.ReleaseReplaced(); got != freed || m.NumParams() != n0-freed {
		t.Fatalf("freed %d of %d, %d parameters left of %d", got, freed, m.NumParams(), n0)
	}
	after, _ := m.LogProbs(seqs, 1, AdaptersOn)
	for i := range before[0] {
		if before[0][i] != after[0][i] {
			t.Fatalf("token %d: log-prob %g before, %g after", i, before[0][i], after[0][i])
		}
	}
	if _, ok := m.Param("model.layers.1.mlp.up_proj.weight"); ok {
		t.Fatal("released tensor still listed")
	}
	// Full gradients still work for what is left (the replaced weights get none).
	tape, g := m.NewTape(), newGrads(t, m)
	if err := m.ForwardTrain(tape, seqs, TrainOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(tape, [][]float32{{0, 1, 1, 1, 1, 1, 1, 1, 1}}, g); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Param("model.norm.weight"); allZero(g.Of(p).F32()) {
		t.Fatal("no gradient after release")
	}
}

// TestFirstScored: skipping the head on prompt positions changes nothing for the scored
// tokens, their gradients included.
func TestFirstScored(t *testing.T) {
	m := randomModel(t, tinyConfigs()["qwen2-bias"], 51)
	rng := rand.New(rand.NewPCG(51, 1))
	seqs := [][]int{randomIDs(rng, 12, m.Config.Vocab), randomIDs(rng, 6, m.Config.Vocab), randomIDs(rng, 4, m.Config.Vocab)}
	first := []int{5, 1, 4}
	dlogp := make([][]float32, len(seqs))
	for s, seq := range seqs {
		dlogp[s] = make([]float32, len(seq))
		for j := first[s]; j < len(seq); j++ {
			dlogp[s][j] = float32(rng.NormFloat64())
		}
	}
	run := func(o TrainOptions) (*Tape, *Grads) {
		tape, g := m.NewTape(), newGrads(t, m)
		if err := m.ForwardTrain(tape, seqs, o); err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(tape, dlogp, g); err != nil {
			t.Fatal(err)
		}
		return tape, g
	}
	full, gFull := run(TrainOptions{Entropy: true})
	part, gPart := run(TrainOptions{Entropy: true, FirstScored: first})
	for s, seq := range seqs {
		for j := range seq {
			want, wantH := full.LogProbs[s][j], full.Entropy[s][j]
			if j < first[s] {
				want, wantH = 0, 0
			}
			if part.LogProbs[s][j] != want || part.Entropy[s][j] != wantH {
				t.Fatalf("seq %d token %d: %g/%g, want %g/%g", s, j, part.LogProbs[s][j], part.Entropy[s][j], want, wantH)
			}
		}
	}
	gf, gp := gFull.Data.F32(), gPart.Data.F32()
	for i := range gf {
		if d := math.Abs(float64(gf[i] - gp[i])); d > 1e-6 {
			t.Fatalf("gradient %d: %g with every row, %g with FirstScored", i, gf[i], gp[i])
		}
	}
	dlogp[0][1] = 1
	if err := m.Backward(part, dlogp, gPart); err == nil {
		t.Fatal("dlogp before FirstScored accepted")
	}
}
