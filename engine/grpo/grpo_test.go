package grpo

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/internal/testref"
)

type refSeq struct {
	LogP []float64 `json:"logp"`
	Old  []float64 `json:"old,omitempty"`
	Ref  []float64 `json:"ref"`
	Adv  float64   `json:"adv"`
}

type refCase struct {
	Kind    string         `json:"kind"`
	Rewards []float64      `json:"rewards,omitempty"`
	G       int            `json:"g,omitempty"`
	Scale   string         `json:"scale,omitempty"`
	Params  map[string]any `json:"params,omitempty"`
	Seqs    []refSeq       `json:"seqs,omitempty"`
}

type refOut struct {
	Adv        []float64   `json:"adv"`
	Frac       float64     `json:"frac"`
	Loss       float64     `json:"loss"`
	Grad       [][]float64 `json:"grad"`
	KL         float64     `json:"kl"`
	ClipLow    float64     `json:"clip_low"`
	ClipHigh   float64     `json:"clip_high"`
	ClipRegion float64     `json:"clip_region"`
}

func runReference(t *testing.T, cases []refCase) []refOut {
	t.Helper()
	py := testref.Python(t)
	in, _ := json.Marshal(cases)
	cmd := exec.Command(py, filepath.Join("testdata", "reference.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var res []refOut
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func close(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// randomBatch makes sequences of varied lengths; with detached=false the old log-probs differ
// from the current ones so that clipping happens on both sides.
func randomBatch(r *rand.Rand, n int, detached bool) []Sequence {
	seqs := make([]Sequence, n)
	for i := range seqs {
		k := 1 + r.IntN(9)
		s := Sequence{LogP: make([]float64, k), RefLogP: make([]float64, k), Advantage: r.NormFloat64()}
		if !detached {
			s.OldLogP = make([]float64, k)
		}
		for t := 0; t < k; t++ {
			s.LogP[t] = -3 * r.Float64()
			s.RefLogP[t] = s.LogP[t] + 0.3*r.NormFloat64()
			if !detached {
				s.OldLogP[t] = s.LogP[t] + 0.4*r.NormFloat64()
			}
		}
		seqs[i] = s
	}
	return seqs
}

func TestLossMatchesPyTorch(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type variant struct {
		p        Params
		detached bool
	}
	var variants []variant
	for _, lt := range []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO} {
		for _, beta := range []float64{0, 0.04} {
			for _, detached := range []bool{true, false} {
				p := Params{Beta: beta, Epsilon: 0.2, EpsilonHigh: 0.28, LossType: lt, MaxCompletionLength: 12}
				variants = append(variants, variant{p, detached})
			}
		}
	}
	// dapo over an accumulated batch larger than this micro-batch.
	variants = append(variants, variant{Params{Beta: 0.1, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: LossDAPO, Tokens: 97}, false})
	var cases []refCase
	var batches [][]Sequence
	for _, v := range variants {
		seqs := randomBatch(r, 6, v.detached)
		batches = append(batches, seqs)
		c := refCase{Kind: "loss", Params: map[string]any{
			"beta": v.p.Beta, "epsilon": v.p.Epsilon, "epsilon_high": v.p.EpsilonHigh,
			"loss_type": v.p.LossType, "max_completion_length": v.p.MaxCompletionLength, "tokens": v.p.Tokens}}
		for _, s := range seqs {
			c.Seqs = append(c.Seqs, refSeq{LogP: s.LogP, Old: s.OldLogP, Ref: s.RefLogP, Adv: s.Advantage})
		}
		cases = append(cases, c)
	}
	want := runReference(t, cases)
	for vi, v := range variants {
		got, err := Loss(batches[vi], v.p)
		if err != nil {
			t.Fatal(err)
		}
		w := want[vi]
		if !close(got.Loss, w.Loss, 1e-9) {
			t.Errorf("%+v detached=%v: loss %.12g, torch %.12g", v.p, v.detached, got.Loss, w.Loss)
		}
		for i := range got.Grad {
			for k := range got.Grad[i] {
				if !close(got.Grad[i][k], w.Grad[i][k], 1e-9) {
					t.Errorf("%+v detached=%v: grad[%d][%d] %.12g, torch %.12g", v.p, v.detached, i, k, got.Grad[i][k], w.Grad[i][k])
				}
			}
		}
		for _, m := range [][3]float64{{got.KL, w.KL}, {got.ClipLow, w.ClipLow}, {got.ClipHigh, w.ClipHigh}, {got.ClipRegion, w.ClipRegion}} {
			if !close(m[0], m[1], 1e-9) {
				t.Errorf("%+v detached=%v: metric %g, torch %g", v.p, v.detached, m[0], m[1])
			}
		}
		if !v.detached && got.ClipRegion == 0 {
			t.Errorf("%+v: the test batch should clip some tokens", v.p)
		}
	}
}

func TestAdvantagesMatchPyTorch(t *testing.T) {
	rewards := []float64{1, 0, 0.5, 0.25, 1, 1, 1, 1, 0.1, 0.9, 0.3, 0.7}
	var cases []refCase
	scales := []string{ScaleGroup, ScaleBatch, ScaleNone}
	for _, s := range scales {
		cases = append(cases, refCase{Kind: "adv", Rewards: rewards, G: 4, Scale: s})
	}
	want := runReference(t, cases)
	for si, s := range scales {
		got, frac, err := Advantages(rewards, 4, s)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !close(got[i], want[si].Adv[i], 1e-12) {
				t.Errorf("%s: adv[%d] = %g, torch %g", s, i, got[i], want[si].Adv[i])
			}
		}
		if frac != want[si].Frac || frac != 1.0/3 {
			t.Errorf("%s: frac_reward_zero_std = %g, torch %g, want 1/3", s, frac, want[si].Frac)
		}
	}
}

// The gradient is also checked against central differences of Loss itself.
func TestLossGradientFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, lt := range []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO} {
		seqs := randomBatch(r, 4, false)
		p := Params{Beta: 0.04, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: lt, MaxCompletionLength: 10}
		res, _ := Loss(seqs, p)
		const h = 1e-6
		for i := range seqs {
			for k := range seqs[i].LogP {
				x := seqs[i].LogP[k]
				seqs[i].LogP[k] = x + h
				up, _ := Loss(seqs, p)
				seqs[i].LogP[k] = x - h
				down, _ := Loss(seqs, p)
				seqs[i].LogP[k] = x
				fd := (up.Loss - down.Loss) / (2 * h)
				if !close(fd, res.Grad[i][k], 1e-5) {
					t.Errorf("%s: grad[%d][%d] = %g, finite difference %g", lt, i, k, res.Grad[i][k], fd)
				}
			}
		}
	}
}

func TestHandValues(t *testing.T) {
	// One token, ratio 1 (detached), A = 2, ref = logp − ln 2: KL = e^{-ln2}... computed by hand.
	lp := -1.0
	ref := lp + math.Log(0.5)
	seqs := []Sequence{{LogP: []float64{lp}, RefLogP: []float64{ref}, Advantage: 2}}
	res, err := Loss(seqs, Params{Beta: 0.5, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: LossBNPO})
	if err != nil {
		t.Fatal(err)
	}
	kl := 0.5 - math.Log(0.5) - 1 // exp(d) − d − 1 with d = ln 0.5
	if !close(res.Loss, -2+0.5*kl, 1e-12) || !close(res.Grad[0][0], -2+0.5*(1-0.5), 1e-12) {
		t.Fatalf("loss %g grad %g", res.Loss, res.Grad[0][0])
	}
	if _, _, err := Advantages([]float64{1, 2, 3}, 2, ScaleGroup); err == nil {
		t.Fatal("3 rewards in groups of 2 must be refused")
	}
	if _, err := Loss(seqs, Params{LossType: "ppo"}); err == nil {
		t.Fatal("unknown loss_type must be refused")
	}
}
