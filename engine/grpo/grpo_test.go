package grpo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/internal/testref"
)

type refSeq struct {
	LogP      []float64 `json:"logp"`
	Old       []float64 `json:"old,omitempty"`
	Ref       []float64 `json:"ref"`
	Entropy   []float64 `json:"entropy,omitempty"`
	Adv       float64   `json:"adv"`
	Truncated bool      `json:"truncated,omitempty"`
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
	Adv     []float64          `json:"adv"`
	Frac    float64            `json:"frac"`
	Loss    float64            `json:"loss"`
	Grad    [][]float64        `json:"grad"`
	Metrics map[string]float64 `json:"metrics"`
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

// randomBatch makes sequences of varied lengths with entropies, a third of them truncated;
// with detached=false the old log-probs differ from the current ones so that clipping happens
// on both sides.
func randomBatch(r *rand.Rand, n int, detached bool) []Sequence {
	seqs := make([]Sequence, n)
	for i := range seqs {
		k := 1 + r.IntN(9)
		s := Sequence{LogP: make([]float64, k), RefLogP: make([]float64, k), Entropy: make([]float64, k),
			Advantage: r.NormFloat64(), Truncated: i%3 == 1}
		if !detached {
			s.OldLogP = make([]float64, k)
		}
		for t := 0; t < k; t++ {
			s.LogP[t] = -3 * r.Float64()
			s.RefLogP[t] = s.LogP[t] + 0.3*r.NormFloat64()
			s.Entropy[t] = 4 * r.Float64()
			if !detached {
				s.OldLogP[t] = s.LogP[t] + 0.15*r.NormFloat64()
			}
		}
		seqs[i] = s
	}
	return seqs
}

// baseParams are TRL's defaults for the options a test does not vary.
func baseParams(lossType string) Params {
	return Params{Epsilon: 0.2, EpsilonHigh: 0.28, LossType: lossType, MaxCompletionLength: 12,
		TopEntropyQuantile: 1, SAPOTemperaturePos: 1, SAPOTemperatureNeg: 1.05,
		VESPOKPos: 2, VESPOLambdaPos: 3, VESPOKNeg: 3, VESPOLambdaNeg: 2}
}

func (p Params) ref() map[string]any {
	return map[string]any{"beta": p.Beta, "epsilon": p.Epsilon, "epsilon_high": p.EpsilonHigh,
		"loss_type": p.LossType, "max_completion_length": p.MaxCompletionLength, "tokens": p.Tokens,
		"importance_sampling_level": p.ImportanceSamplingLevel, "mask_truncated": p.MaskTruncatedCompletions,
		"top_entropy_quantile": p.TopEntropyQuantile,
		"sapo_temperature_pos": p.SAPOTemperaturePos, "sapo_temperature_neg": p.SAPOTemperatureNeg,
		"vespo_k_pos": p.VESPOKPos, "vespo_lambda_pos": p.VESPOLambdaPos,
		"vespo_k_neg": p.VESPOKNeg, "vespo_lambda_neg": p.VESPOLambdaNeg}
}

func refSeqs(seqs []Sequence) []refSeq {
	var out []refSeq
	for _, s := range seqs {
		out = append(out, refSeq{LogP: s.LogP, Old: s.OldLogP, Ref: s.RefLogP, Entropy: s.Entropy, Adv: s.Advantage, Truncated: s.Truncated})
	}
	return out
}

type variant struct {
	p        Params
	detached bool
}

func (v variant) String() string {
	return fmt.Sprintf("%s/%s/beta=%g/detached=%v/mask=%v/rho=%g/tokens=%d", v.p.LossType, v.p.ImportanceSamplingLevel,
		v.p.Beta, v.detached, v.p.MaskTruncatedCompletions, v.p.TopEntropyQuantile, v.p.Tokens)
}

// TestLossMatchesPyTorch compares the loss, every per-token gradient and every metric with
// the PyTorch reference for each loss_type × importance_sampling_level × on/off-policy ×
// {plain, β with truncation masking and the entropy filter}, plus ρ = 0, β alone, and dapo
// over an accumulated batch larger than the micro-batch.
func TestLossMatchesPyTorch(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var variants []variant
	for _, lt := range LossTypes {
		for _, level := range []string{LevelToken, LevelSequence} {
			for _, detached := range []bool{true, false} {
				p := baseParams(lt)
				p.ImportanceSamplingLevel = level
				variants = append(variants, variant{p, detached})
				p.Beta, p.MaskTruncatedCompletions, p.TopEntropyQuantile = 0.04, true, 0.3
				variants = append(variants, variant{p, detached})
			}
		}
		p := baseParams(lt)
		p.Beta = 0.04
		variants = append(variants, variant{p, false})
		p.TopEntropyQuantile = 0 // only the highest-entropy token(s)
		variants = append(variants, variant{p, false})
	}
	p := baseParams(LossDAPO)
	p.Beta, p.Tokens, p.MaskTruncatedCompletions = 0.1, 97, true
	variants = append(variants, variant{p, false})
	// A cispo cap the ratios exceed.
	p = baseParams(LossCISPO)
	p.EpsilonHigh = 1.05
	variants = append(variants, variant{p, false})

	var cases []refCase
	var batches [][]Sequence
	for _, v := range variants {
		seqs := randomBatch(r, 7, v.detached)
		batches = append(batches, seqs)
		cases = append(cases, refCase{Kind: "loss", Params: v.p.ref(), Seqs: refSeqs(seqs)})
	}
	// Batches where every sequence clips some of its tokens low (all A < 0, ratios mostly
	// below 1 − ε), or high: clip_ratio/low_min and high_max are then fractions above 0.
	for _, sign := range []float64{-1, 1} {
		seqs := randomBatch(r, 7, false)
		for i := range seqs {
			s := &seqs[i]
			s.Advantage = sign * (0.5 + math.Abs(s.Advantage))
			s.LogP = append(s.LogP, -1, -1)
			s.RefLogP = append(s.RefLogP, -1, -1)
			s.Entropy = append(s.Entropy, 1, 1)
			s.OldLogP = append(s.OldLogP, -1-sign*0.5, -1) // one token clips, one does not
		}
		for _, level := range []string{LevelToken, LevelSequence} {
			p := baseParams(LossGRPO)
			p.ImportanceSamplingLevel = level
			variants = append(variants, variant{p, false})
			batches = append(batches, seqs)
			cases = append(cases, refCase{Kind: "loss", Params: p.ref(), Seqs: refSeqs(seqs)})
		}
	}
	want := runReference(t, cases)
	clipped := 0
	for vi, v := range variants {
		got, err := Loss(batches[vi], v.p)
		if err != nil {
			t.Fatal(err)
		}
		w := want[vi]
		if !close(got.Loss, w.Loss, 1e-9) {
			t.Errorf("%v: loss %.12g, torch %.12g", v, got.Loss, w.Loss)
		}
		for i := range got.Grad {
			for k := range got.Grad[i] {
				if !close(got.Grad[i][k], w.Grad[i][k], 1e-9) {
					t.Errorf("%v: grad[%d][%d] %.12g, torch %.12g", v, i, k, got.Grad[i][k], w.Grad[i][k])
				}
			}
		}
		m := got.Stats.Metrics()
		if len(m) != len(w.Metrics) {
			t.Errorf("%v: metrics %v, torch %v", v, m, w.Metrics)
		}
		for name, x := range w.Metrics {
			if y, ok := m[name]; !ok || !close(y, x, 1e-9) {
				t.Errorf("%v: %s = %v, torch %v", v, name, y, x)
			}
		}
		if m["clip_ratio/region_mean"] > 0 || m["cispo_clip_ratio"] > 0 {
			clipped++
		}
	}
	if clipped < len(LossTypes) {
		t.Errorf("only %d variants clipped anything: the test batches should clip", clipped)
	}
}

// The gradient is also checked against central differences of Loss itself, for every loss
// type and level (cispo and vespo hold their weights constant, so their gradient is the
// derivative with the weight frozen: they are left to the PyTorch comparison).
func TestLossGradientFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, lt := range []string{LossGRPO, LossBNPO, LossDrGRPO, LossDAPO, LossSAPO, LossLUSPO} {
		for _, level := range []string{LevelToken, LevelSequence} {
			seqs := randomBatch(r, 4, false)
			p := baseParams(lt)
			p.Beta, p.ImportanceSamplingLevel, p.MaskTruncatedCompletions, p.TopEntropyQuantile = 0.04, level, true, 0.5
			res, err := Loss(seqs, p)
			if err != nil {
				t.Fatal(err)
			}
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
						t.Errorf("%s/%s: grad[%d][%d] = %g, finite difference %g", lt, level, i, k, res.Grad[i][k], fd)
					}
				}
			}
		}
	}
}

// Micro-batch stats add up to the stats of the whole batch.
func TestStatsAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	seqs := randomBatch(r, 9, false)
	for _, level := range []string{LevelToken, LevelSequence} {
		p := baseParams(LossDAPO)
		p.ImportanceSamplingLevel, p.MaskTruncatedCompletions = level, true
		whole, _ := Loss(seqs, p)
		var acc Stats
		for _, part := range [][]Sequence{seqs[:4], seqs[4:]} {
			res, _ := Loss(part, p)
			acc.Add(res.Stats)
		}
		a, b := acc.Metrics(), whole.Stats.Metrics()
		for k, v := range b {
			if !close(a[k], v, 1e-12) {
				t.Errorf("%s: %s over micro-batches %v, whole batch %v", level, k, a[k], v)
			}
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

func TestHandValues(t *testing.T) {
	// One token, ratio 1 (detached), A = 2, ref = logp − ln 2: KL = e^{-ln2}... computed by hand.
	lp := -1.0
	ref := lp + math.Log(0.5)
	seqs := []Sequence{{LogP: []float64{lp}, RefLogP: []float64{ref}, Advantage: 2}}
	res, err := Loss(seqs, Params{Beta: 0.5, Epsilon: 0.2, EpsilonHigh: 0.2, LossType: LossBNPO, TopEntropyQuantile: 1})
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
	if _, err := Loss(seqs, Params{LossType: "ppo", TopEntropyQuantile: 1}); err == nil {
		t.Fatal("unknown loss_type must be refused")
	}
	if _, err := Loss(seqs, Params{LossType: LossDAPO, TopEntropyQuantile: 0.2}); err == nil {
		t.Fatal("the entropy filter without entropies must be refused")
	}

	// GSPO: log w = mean(logp − old) = (0.1 + 0.3)/2 = 0.2, w = e^0.2 ≈ 1.2214 > 1 + 0.2 with
	// A = 1 > 0: clipped high, the loss −1.2·A on both tokens, no gradient; bnpo averages.
	gspo := Params{Epsilon: 0.2, EpsilonHigh: 0.2, LossType: LossBNPO, ImportanceSamplingLevel: LevelSequence, TopEntropyQuantile: 1}
	two := []Sequence{{LogP: []float64{-1, -2}, OldLogP: []float64{-1.1, -2.3}, RefLogP: []float64{-1, -2}, Advantage: 1}}
	res, _ = Loss(two, gspo)
	m := res.Stats.Metrics()
	if !close(res.Loss, -1.2, 1e-12) || res.Grad[0][0] != 0 || res.Grad[0][1] != 0 || m["clip_ratio/high_mean"] != 1 || m["clip_ratio/high_max"] != 1 {
		t.Fatalf("GSPO clipped: loss %g grad %v metrics %v", res.Loss, res.Grad[0], m)
	}
	// Inside the clip range (ε_high 0.3): loss −w·A (two tokens averaged), each token's
	// gradient −w·A·∂(log w)/∂logp_t = −w·A/2.
	gspo.EpsilonHigh = 0.3
	res, _ = Loss(two, gspo)
	w := math.Exp(0.2)
	if !close(res.Loss, -w, 1e-12) || !close(res.Grad[0][0], -w/2, 1e-12) || !close(res.Grad[0][1], -w/2, 1e-12) {
		t.Fatalf("GSPO unclipped: loss %g grad %v, want %g and %g each", res.Loss, res.Grad[0], -w, -w/2)
	}

	// A masked truncated completion adds nothing and counts no token: the bnpo loss is the
	// other sequence's alone, and dapo's token count is its length.
	pair := []Sequence{
		{LogP: []float64{-1}, RefLogP: []float64{-1}, Advantage: 3},
		{LogP: []float64{-1, -1, -1}, RefLogP: []float64{-1, -1, -1}, Advantage: -5, Truncated: true},
	}
	mask := Params{LossType: LossBNPO, MaskTruncatedCompletions: true, Epsilon: 0.2, EpsilonHigh: 0.2, TopEntropyQuantile: 1}
	res, _ = Loss(pair, mask)
	if res.Loss != -3 || res.Grad[1][0] != 0 || res.Stats.Tokens != 1 {
		t.Fatalf("masked truncation: loss %g grads %v tokens %g", res.Loss, res.Grad, res.Stats.Tokens)
	}

	// torch.quantile's linear interpolation: rank 0.8·3 = 2.4 between 3 and 4.
	if q := Quantile([]float64{4, 1, 3, 2}, 0.8); !close(q, 3.4, 1e-15) {
		t.Fatalf("Quantile = %v, want 3.4", q)
	}
}
