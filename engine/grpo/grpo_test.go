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
	Mask      []bool    `json:"mask,omitempty"`
}

type refCase struct {
	Kind    string         `json:"kind"`
	Rewards []float64      `json:"rewards,omitempty"`
	G       int            `json:"g,omitempty"`
	Scale   string         `json:"scale,omitempty"`
	Params  map[string]any `json:"params,omitempty"`
	Seqs    []refSeq       `json:"seqs,omitempty"`
	ByFunc  [][]*float64   `json:"by_func,omitempty"` // nil: not applicable
	Weights []float64      `json:"weights,omitempty"`
	// filter_groups: rounds of rewards (nil: not applicable)
	Rounds    [][]*float64 `json:"rounds,omitempty"`
	Want      int          `json:"want,omitempty"`
	MaxRounds int          `json:"max_rounds,omitempty"`
	// adaptive_entropy: each step's entropy
	Entropies []float64 `json:"entropies,omitempty"`
}

type refOut struct {
	Adv     []float64          `json:"adv"`
	Frac    float64            `json:"frac"`
	Loss    float64            `json:"loss"`
	Grad    [][]float64        `json:"grad"`
	EntGrad [][]float64        `json:"entropy_grad"`
	Metrics map[string]float64 `json:"metrics"`
	// filter_groups
	Selected [][2]int `json:"selected"`
	Rounds   int      `json:"rounds"`
	// adaptive_entropy: the coefficient each step applied, and the coefficient after it
	Applied, Coefs []float64
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
		"vespo_k_neg": p.VESPOKNeg, "vespo_lambda_neg": p.VESPOLambdaNeg,
		"delta": p.Delta, "off_policy_mask_threshold": p.OffPolicyMaskThreshold, "entropy_coef": p.EntropyCoef}
}

func refSeqs(seqs []Sequence) []refSeq {
	var out []refSeq
	for _, s := range seqs {
		out = append(out, refSeq{LogP: s.LogP, Old: s.OldLogP, Ref: s.RefLogP, Entropy: s.Entropy, Adv: s.Advantage, Truncated: s.Truncated, Mask: s.Mask})
	}
	return out
}

type variant struct {
	p        Params
	detached bool
	envMask  bool // environment tokens masked out of the loss
}

func (v variant) String() string {
	return fmt.Sprintf("%s/%s/beta=%g/detached=%v/mask=%v/rho=%g/tokens=%d/env=%v/delta=%g/opm=%g/ent=%g", v.p.LossType, v.p.ImportanceSamplingLevel,
		v.p.Beta, v.detached, v.p.MaskTruncatedCompletions, v.p.TopEntropyQuantile, v.p.Tokens, v.envMask, v.p.Delta,
		v.p.OffPolicyMaskThreshold, v.p.EntropyCoef)
}

// withEnvMask marks a run of tokens in the middle of every other sequence as written by an
// environment (a tool's result between two assistant turns).
func withEnvMask(seqs []Sequence) []Sequence {
	for i := range seqs {
		s := &seqs[i]
		s.Mask = make([]bool, len(s.LogP))
		for t := range s.Mask {
			s.Mask[t] = !(i%2 == 0 && t >= 1 && t < len(s.Mask)-1)
		}
	}
	return seqs
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
				variants = append(variants, variant{p, detached, false})
				p.Beta, p.MaskTruncatedCompletions, p.TopEntropyQuantile = 0.04, true, 0.3
				variants = append(variants, variant{p, detached, false})
			}
		}
		p := baseParams(lt)
		p.Beta = 0.04
		variants = append(variants, variant{p, false, false})
		p.TopEntropyQuantile = 0 // only the highest-entropy token(s)
		variants = append(variants, variant{p, false, false})
	}
	// Environment tokens masked out, for every loss type at both levels, on- and off-policy,
	// with β, truncation masking and the entropy filter on the masked side.
	for _, lt := range LossTypes {
		for _, level := range []string{LevelToken, LevelSequence} {
			p := baseParams(lt)
			p.ImportanceSamplingLevel = level
			variants = append(variants, variant{p, true, true})
			p.Beta, p.MaskTruncatedCompletions, p.TopEntropyQuantile = 0.04, true, 0.5
			variants = append(variants, variant{p, false, true})
		}
		// The entropy bonus, alone and with the filter and the environment mask.
		p := baseParams(lt)
		p.EntropyCoef = 0.03
		variants = append(variants, variant{p, false, false})
		p.TopEntropyQuantile, p.Beta = 0.5, 0.04
		variants = append(variants, variant{p, false, true})
	}
	for _, level := range []string{LevelToken, LevelSequence} {
		for _, lt := range []string{LossGRPO, LossDAPO} {
			// Two-sided clipping with a δ the ratios exceed, and the off-policy sequence mask.
			p := baseParams(lt)
			p.ImportanceSamplingLevel, p.Delta = level, 1.3
			variants = append(variants, variant{p, false, true})
			p.Delta, p.OffPolicyMaskThreshold = 0, 0.02
			variants = append(variants, variant{p, false, true})
			p.Delta, p.Beta = 1.3, 0.04
			variants = append(variants, variant{p, false, false})
		}
	}
	p := baseParams(LossDAPO)
	p.Beta, p.Tokens, p.MaskTruncatedCompletions = 0.1, 97, true
	variants = append(variants, variant{p, false, false})
	// A cispo cap the ratios exceed.
	p = baseParams(LossCISPO)
	p.EpsilonHigh = 1.05
	variants = append(variants, variant{p, false, false})

	var cases []refCase
	var batches [][]Sequence
	for _, v := range variants {
		seqs := randomBatch(r, 7, v.detached)
		switch {
		case v.p.Delta != 0:
			for i := range seqs { // ratios well above 1 + ε_high and δ
				for t := range seqs[i].OldLogP {
					seqs[i].OldLogP[t] = seqs[i].LogP[t] - 0.4*r.Float64()
				}
			}
		case v.p.OffPolicyMaskThreshold != 0:
			for i := range seqs { // the policy has moved away: mean(old − logp) from 0 to 0.05
				for t := range seqs[i].OldLogP {
					seqs[i].OldLogP[t] = seqs[i].LogP[t] + 0.05*float64(i%3)
				}
			}
		}
		if v.envMask {
			seqs = withEnvMask(seqs)
		}
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
			variants = append(variants, variant{p, false, false})
			batches = append(batches, seqs)
			cases = append(cases, refCase{Kind: "loss", Params: p.ref(), Seqs: refSeqs(seqs)})
		}
	}
	want := runReference(t, cases)
	clipped, dropped, twoSided := 0, 0.0, 0
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
		if (got.EntropyGrad == nil) != (w.EntGrad == nil) {
			t.Errorf("%v: entropy gradient %v, torch %v", v, got.EntropyGrad != nil, w.EntGrad != nil)
		}
		for i := range got.EntropyGrad {
			for k := range got.EntropyGrad[i] {
				if !close(got.EntropyGrad[i][k], w.EntGrad[i][k], 1e-9) {
					t.Errorf("%v: entropy grad[%d][%d] %.12g, torch %.12g", v, i, k, got.EntropyGrad[i][k], w.EntGrad[i][k])
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
		dropped += got.Stats.OffPolicyDropped
		if v.p.Delta != 0 {
			for _, s := range batches[vi] {
				for k := range s.LogP {
					if s.OldLogP != nil && math.Exp(s.LogP[k]-s.OldLogP[k]) > v.p.Delta && s.Advantage < 0 {
						twoSided++
					}
				}
			}
		}
	}
	if dropped == 0 || twoSided == 0 {
		t.Errorf("the off-policy mask dropped %g sequences and δ bound %d tokens: the test batches should make both act", dropped, twoSided)
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

// TestGDPOMatchesPyTorch compares normalize_then_sum (GDPO) advantages with the reference for
// three reward functions on different scales, one of them not applicable to some completions
// and none applicable to one, and checks that the aggregation differs from sum_then_normalize.
func TestGDPOMatchesPyTorch(t *testing.T) {
	nan := math.NaN()
	byFunc := [][]float64{
		{1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1},                         // correctness
		{10, 40, 25, 5, 7, 7, 30, 12, 3, 9, 4, nan},                  // a large-scale reward
		{0.2, nan, 0.4, 0.1, 0.9, 0.3, nan, nan, 0.5, 0.5, 0.6, nan}, // sometimes not applicable
	}
	weights := []float64{1, 0.5, 2}
	byFunc[0][11], byFunc[1][11] = nan, nan // the last completion: nothing applies
	var refVals [][]*float64
	for _, vals := range byFunc {
		row := make([]*float64, len(vals))
		for i := range vals {
			if !math.IsNaN(vals[i]) {
				row[i] = &vals[i]
			}
		}
		refVals = append(refVals, row)
	}
	want := runReference(t, []refCase{{Kind: "gdpo", ByFunc: refVals, Weights: weights, G: 4}})[0].Adv
	sum, err := NormalizedSum(byFunc, weights, 4)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Advantages(sum, len(sum), ScaleBatch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !close(got[i], want[i], 1e-9) {
			t.Errorf("adv[%d] = %.12g, torch %.12g", i, got[i], want[i])
		}
	}
	if got[11] != 0 {
		t.Errorf("a completion no function scored has advantage %g, want 0", got[11])
	}
	// sum_then_normalize lets the large-scale reward dominate: the order differs.
	total := make([]float64, 12)
	for i := range total {
		for f := range byFunc {
			if !math.IsNaN(byFunc[f][i]) {
				total[i] += weights[f] * byFunc[f][i]
			}
		}
	}
	plain, _, _ := Advantages(total, 4, ScaleGroup)
	if maxDiff := math.Abs(plain[0] - got[0]); maxDiff < 0.1 {
		t.Errorf("normalize_then_sum gave %v, sum_then_normalize %v: they should differ", got[:4], plain[:4])
	}
}

// TestAdvantagesNaN: a completion no function scored (a failed episode) is left out of its
// group's mean and deviation and gets advantage 0.
func TestAdvantagesNaN(t *testing.T) {
	adv, _, err := Advantages([]float64{1, math.NaN(), 0, 0.5}, 4, ScaleGroup)
	if err != nil {
		t.Fatal(err)
	}
	want, _, _ := Advantages([]float64{1, 0, 0.5}, 3, ScaleGroup)
	if adv[1] != 0 || !close(adv[0], want[0], 1e-12) || !close(adv[2], want[1], 1e-12) || !close(adv[3], want[2], 1e-12) {
		t.Fatalf("advantages %v, want %v with 0 for the NaN", adv, want)
	}
}

// TestAdaptiveEntropy follows TRL's controller: no bonus before the first observation, the
// coefficient rises by delta while the entropy is at or below the target (the bonus applied),
// falls while above (no bonus), within [min, max].
func TestAdaptiveEntropy(t *testing.T) {
	c := AdaptiveEntropy{Coef: 0.01, Target: 0.2, Min: 0, Max: 0.02, Delta: 0.005, Last: math.Inf(1)}
	var applied, coefs []float64
	for _, h := range []float64{0.5, 0.1, 0.2, 0.05, 0.3, 0.3, 0.3} {
		applied = append(applied, c.Applied())
		c.Observe(h)
		coefs = append(coefs, c.Coef)
	}
	wantApplied := []float64{0, 0, 0.01, 0.015, 0.02, 0, 0}
	wantCoefs := []float64{0.005, 0.01, 0.015, 0.02, 0.015, 0.01, 0.005}
	for i := range wantApplied {
		if !close(applied[i], wantApplied[i], 1e-12) || !close(coefs[i], wantCoefs[i], 1e-12) {
			t.Fatalf("applied %v coefs %v, want %v and %v", applied, coefs, wantApplied, wantCoefs)
		}
	}
}

// TestAdaptiveEntropyMatchesReference runs the controller over random runs of entropies
// (some exactly at the target, some hitting min and max) against reference.py's TRL 1.9
// controller.
func TestAdaptiveEntropyMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 2))
	var cases []refCase
	var ctrls []AdaptiveEntropy
	for k := 0; k < 12; k++ {
		c := AdaptiveEntropy{Coef: r.Float64() * 0.02, Target: 0.1 + r.Float64(), Min: 0.001 * float64(k%3), Max: 0.02 + 0.01*r.Float64(),
			Delta: 0.002 + 0.004*r.Float64(), Last: math.Inf(1)}
		hs := make([]float64, 40)
		for i := range hs {
			switch r.IntN(5) {
			case 0:
				hs[i] = c.Target // at the target: counts as at or below
			default:
				hs[i] = c.Target * (0.5 + r.Float64())
			}
		}
		ctrls = append(ctrls, c)
		cases = append(cases, refCase{Kind: "adaptive_entropy", Entropies: hs, Params: map[string]any{"entropy_coef": c.Coef,
			"entropy_target": c.Target, "entropy_coef_min": c.Min, "entropy_coef_max": c.Max, "entropy_coef_delta": c.Delta}})
	}
	want := runReference(t, cases)
	for k, c := range ctrls {
		for i, h := range cases[k].Entropies {
			if a := c.Applied(); !close(a, want[k].Applied[i], 1e-12) {
				t.Fatalf("case %d step %d: applied %v, reference %v", k, i, a, want[k].Applied[i])
			}
			c.Observe(h)
			if !close(c.Coef, want[k].Coefs[i], 1e-12) {
				t.Fatalf("case %d step %d: coefficient %v, reference %v", k, i, c.Coef, want[k].Coefs[i])
			}
		}
	}
}
