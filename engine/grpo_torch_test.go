package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/events"
	"rlhfstation/engine/grpo"
	"rlhfstation/engine/lora"
	"rlhfstation/engine/model"
	"rlhfstation/internal/testref"
	"rlhfstation/rewards"
)

// The GRPO step against testdata/grpo_reference.py: an independent PyTorch (float64) version
// of DESIGN §5 on top of engine/model/testdata/reference.py's forward, with autograd for the
// LoRA gradients. Loss and every gradient tensor must agree within stepTol.

// stepTol bounds max|Go − torch| / max|torch| per gradient tensor, and |ΔL| / (the same
// aggregation over |loss_t|) for the loss.
const stepTol = 1e-4

// refLoRA, refModel, microBatch and stepCase are the reference script's request.
type refLoRA struct {
	R     int       `json:"r"`
	In    int       `json:"in"`
	Out   int       `json:"out"`
	Scale float32   `json:"scale"`
	A     []float32 `json:"a"`
	B     []float32 `json:"b"`
}

type refModel struct {
	Dir  string             `json:"dir"`
	LoRA map[string]refLoRA `json:"lora"`
}

type microBatch struct {
	Prompts     [][]int   `json:"prompts"`
	Completions [][]int   `json:"completions"`
	Rewards     []float64 `json:"rewards"`
	Truncated   []bool    `json:"truncated,omitempty"` // ended without a stop token
	// Skip: part of the generation batch (its advantages and dapo's token count) but not
	// trained on in this step.
	Skip bool `json:"skip,omitempty"`
	// NTLPositions are, per completion, NTL's [completion token index, target digit] pairs.
	NTLPositions [][][2]int `json:"ntl_positions,omitempty"`
}

// refNTL is NTL as an auxiliary loss in the reference's request.
type refNTL struct {
	LossWeight  float64 `json:"loss_weight"`
	Loss        string  `json:"loss"`
	DigitIDs    []int   `json:"digit_ids"`
	DigitValues []int   `json:"digit_values"`
}

type stepCase struct {
	Model               string       `json:"model"`
	Temperature         float64      `json:"temperature"`
	LossType            string       `json:"loss_type"`
	ScaleRewards        string       `json:"scale_rewards"`
	Beta                float64      `json:"beta"`
	Epsilon             float64      `json:"epsilon"`
	EpsilonHigh         float64      `json:"epsilon_high"`
	MaxCompletionLength int          `json:"max_completion_length"`
	NumGenerations      int          `json:"num_generations"`
	MicroBatches        []microBatch `json:"micro_batches"`

	ImportanceSamplingLevel  string  `json:"importance_sampling_level"`
	MaskTruncatedCompletions bool    `json:"mask_truncated_completions"`
	TopEntropyQuantile       float64 `json:"top_entropy_quantile"`
	SAPOTemperaturePos       float64 `json:"sapo_temperature_pos"`
	SAPOTemperatureNeg       float64 `json:"sapo_temperature_neg"`
	VESPOKPos                float64 `json:"vespo_k_pos"`
	VESPOLambdaPos           float64 `json:"vespo_lambda_pos"`
	VESPOKNeg                float64 `json:"vespo_k_neg"`
	VESPOLambdaNeg           float64 `json:"vespo_lambda_neg"`
	// OldLoRA are the adapters at sampling time (num_iterations > 1: the completions were
	// drawn before the last update); nil means logp_old = logp detached.
	OldLoRA map[string]refLoRA `json:"old_lora,omitempty"`
	NTL     *refNTL            `json:"ntl,omitempty"`
	// EntropyCoef is the entropy bonus's coefficient as applied in the step.
	EntropyCoef float64 `json:"entropy_coef,omitempty"`
}

func (c stepCase) String() string {
	return fmt.Sprintf("%s/%s/%s/%s/beta=%g/T=%g/ga=%d/mask=%v/rho=%g/old=%v/ent=%g", c.Model, c.LossType, c.ImportanceSamplingLevel,
		c.ScaleRewards, c.Beta, c.Temperature, len(c.MicroBatches), c.MaskTruncatedCompletions, c.TopEntropyQuantile, c.OldLoRA != nil, c.EntropyCoef)
}

// params are the case's loss parameters; tokens is the accumulated batch's loss tokens.
func (c stepCase) params(tokens int) grpo.Params {
	return grpo.Params{Beta: c.Beta, Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, LossType: c.LossType,
		MaxCompletionLength: c.MaxCompletionLength, Tokens: tokens, ImportanceSamplingLevel: c.ImportanceSamplingLevel,
		MaskTruncatedCompletions: c.MaskTruncatedCompletions, TopEntropyQuantile: c.TopEntropyQuantile,
		SAPOTemperaturePos: c.SAPOTemperaturePos, SAPOTemperatureNeg: c.SAPOTemperatureNeg,
		VESPOKPos: c.VESPOKPos, VESPOLambdaPos: c.VESPOLambdaPos, VESPOKNeg: c.VESPOKNeg, VESPOLambdaNeg: c.VESPOLambdaNeg,
		EntropyCoef: c.EntropyCoef}
}

// withTRLDefaults fills the options a case does not vary with TRL's defaults.
func (c stepCase) withTRLDefaults() stepCase {
	if c.ImportanceSamplingLevel == "" {
		c.ImportanceSamplingLevel = grpo.LevelToken
	}
	if c.TopEntropyQuantile == 0 {
		c.TopEntropyQuantile = 1
	}
	c.SAPOTemperaturePos, c.SAPOTemperatureNeg = 1, 1.05
	c.VESPOKPos, c.VESPOLambdaPos, c.VESPOKNeg, c.VESPOLambdaNeg = 2, 3, 3, 2
	return c
}

// stepResult is a step's loss, advantages and LoRA gradients (module → A, B), from either side.
type stepResult struct {
	Loss       float64     `json:"loss"`
	LossScale  float64     `json:"loss_scale"`
	Advantages [][]float64 `json:"advantages"`
	Grads      map[string]struct {
		A []float64 `json:"a"`
		B []float64 `json:"b"`
	} `json:"grads"`
}

// stepPolicy is a saved random model with LoRA (random B) on all its linears.
type stepPolicy struct {
	name  string
	dir   string
	model *model.Model
	set   *lora.Set
}

func newStepPolicy(t *testing.T, name string, c model.Config, seed uint64) *stepPolicy {
	t.Helper()
	m, err := model.NewRandom(c, seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := m.Save(dir); err != nil {
		t.Fatal(err)
	}
	lc := lora.Config{R: 4, Alpha: 8, TargetModules: []string{"all-linear"}}
	rng := rand.New(rand.NewPCG(seed, 11))
	var layers []*lora.Layer
	for _, l := range m.Linears() {
		ll, err := lora.NewLayer(m.Backend(), l.Name, l.In, l.Out, lc, rng)
		if err != nil {
			t.Fatal(err)
		}
		if err := ll.RandomizeB(rng); err != nil { // B ≠ 0: the adapted policy differs from the reference, dA ≠ 0
			t.Fatal(err)
		}
		l.Adapter = &adapter{layer: ll}
		layers = append(layers, ll)
	}
	return &stepPolicy{name: name, dir: dir, model: m, set: lora.NewSet(lc, layers)}
}

func (p *stepPolicy) ref() refModel {
	r := refModel{Dir: p.dir, LoRA: map[string]refLoRA{}}
	for _, l := range p.set.Layers {
		r.LoRA[l.Module] = refLoRA{R: l.R, In: l.In, Out: l.Out, Scale: l.Scale, A: l.A.F32(), B: l.B.F32()}
	}
	return r
}

// step computes the loss and the LoRA gradients of c as trainStep does: advantages over the
// generation batch (all micro-batches of the case), then per micro-batch reference log-probs
// from the base with the adapters off, the policy's training forward under the temperature,
// grpo.Loss over the completion tokens (dapo over the tokens of all micro-batches, the others
// averaged over the micro-batches trained on) and the backward into the adapters.
func (p *stepPolicy) step(c stepCase) (stepResult, error) {
	m := p.model
	p.set.ZeroGrad()
	ga := 0
	params := c.params(0)
	var rewards []float64
	for _, mb := range c.MicroBatches {
		for i, comp := range mb.Completions {
			if !params.Masked(mb.truncated(i)) {
				params.Tokens += len(comp)
			}
		}
		rewards = append(rewards, mb.Rewards...)
		if !mb.Skip {
			ga++
		}
	}
	T := float32(c.Temperature)
	var res stepResult
	all, _, err := grpo.Advantages(rewards, c.NumGenerations, c.ScaleRewards)
	if err != nil {
		return res, err
	}
	tape := m.NewTape()
	for _, mb := range c.MicroBatches {
		adv := all[:len(mb.Rewards)]
		all = all[len(mb.Rewards):]
		res.Advantages = append(res.Advantages, adv)
		if mb.Skip {
			continue
		}
		seqs := make([][]int, len(mb.Prompts))
		for i := range seqs {
			seqs[i] = append(append([]int{}, mb.Prompts[i]...), mb.Completions[i]...)
		}
		ref, err := m.LogProbs(seqs, T, model.AdaptersOff)
		if err != nil {
			return res, err
		}
		var old [][]float32
		if c.OldLoRA != nil {
			if old, err = p.logProbsWith(c.OldLoRA, seqs, T); err != nil {
				return res, err
			}
		}
		if err := m.ForwardTrain(tape, seqs, model.TrainOptions{Temperature: T, Entropy: true}); err != nil {
			return res, err
		}
		gs := make([]grpo.Sequence, len(seqs))
		for i := range seqs {
			pl, n := len(mb.Prompts[i]), len(mb.Completions[i])
			lp, rl, ent := make([]float64, n), make([]float64, n), make([]float64, n)
			for k := 0; k < n; k++ {
				lp[k], rl[k], ent[k] = float64(tape.LogProbs[i][pl+k]), float64(ref[i][pl+k]), float64(tape.Entropy[i][pl+k])
			}
			gs[i] = grpo.Sequence{LogP: lp, RefLogP: rl, Entropy: ent, Advantage: adv[i], Truncated: mb.truncated(i)}
			if old != nil {
				gs[i].OldLogP = make([]float64, n)
				for k := range n {
					gs[i].OldLogP[k] = float64(old[i][pl+k])
				}
			}
		}
		out, err := grpo.Loss(gs, params)
		if err != nil {
			return res, err
		}
		scale := 1.0
		if !grpo.GlobalTokens(c.LossType) {
			scale = 1 / float64(ga)
		}
		res.Loss += out.Loss * scale
		dlogp := make([][]float32, len(seqs))
		for i := range seqs {
			d := make([]float32, len(seqs[i]))
			for k, g := range out.Grad[i] {
				d[len(mb.Prompts[i])+k] = float32(g * scale)
			}
			dlogp[i] = d
		}
		if out.EntropyGrad != nil {
			tape.EntropyGrad = make([][]float32, len(seqs))
			for i := range seqs {
				d := make([]float32, len(seqs[i]))
				for k, g := range out.EntropyGrad[i] {
					d[len(mb.Prompts[i])+k] = float32(g * scale)
				}
				tape.EntropyGrad[i] = d
			}
		}
		if err := m.Backward(tape, dlogp, nil); err != nil {
			return res, err
		}
	}
	res.Grads = layerGrads(p.set)
	return res, nil
}

func (mb microBatch) truncated(i int) bool { return mb.Truncated != nil && mb.Truncated[i] }

// logProbsWith computes the policy's log-probs with the adapters' weights set to w (what they
// were at sampling time), then puts the current weights back.
func (p *stepPolicy) logProbsWith(w map[string]refLoRA, seqs [][]int, T float32) ([][]float32, error) {
	saved := map[string][2][]float32{}
	for _, l := range p.set.Layers {
		saved[l.Module] = [2][]float32{append([]float32(nil), l.A.F32()...), append([]float32(nil), l.B.F32()...)}
		copy(l.A.F32(), w[l.Module].A)
		copy(l.B.F32(), w[l.Module].B)
	}
	defer func() {
		for _, l := range p.set.Layers {
			copy(l.A.F32(), saved[l.Module][0])
			copy(l.B.F32(), saved[l.Module][1])
		}
	}()
	return p.model.LogProbs(seqs, T, model.AdaptersOn)
}

// perturbed is p's adapters with every weight moved by noise of the given size: the policy
// one optimizer step after the completions were drawn.
func (p *stepPolicy) perturbed(rng *rand.Rand, size float32) map[string]refLoRA {
	out := map[string]refLoRA{}
	for _, l := range p.set.Layers {
		r := refLoRA{R: l.R, In: l.In, Out: l.Out, Scale: l.Scale, A: append([]float32(nil), l.A.F32()...), B: append([]float32(nil), l.B.F32()...)}
		for i := range r.A {
			r.A[i] += size * float32(rng.NormFloat64())
		}
		for i := range r.B {
			r.B[i] += size * float32(rng.NormFloat64())
		}
		out[l.Module] = r
	}
	return out
}

func layerGrads(set *lora.Set) map[string]struct {
	A []float64 `json:"a"`
	B []float64 `json:"b"`
} {
	out := map[string]struct {
		A []float64 `json:"a"`
		B []float64 `json:"b"`
	}{}
	for _, l := range set.Layers {
		out[l.Module] = struct {
			A []float64 `json:"a"`
			B []float64 `json:"b"`
		}{f64(l.GradA.F32()), f64(l.GradB.F32())}
	}
	return out
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// runStepReference runs testdata/grpo_reference.py on cases (skipping without PyTorch).
func runStepReference(t *testing.T, models map[string]refModel, cases []stepCase) []stepResult {
	t.Helper()
	py := testref.Python(t)
	req, err := json.Marshal(map[string]any{"models": models, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("testdata", "grpo_reference.py")
	// Read the scripts here so that go test's cache sees them change.
	for _, f := range []string{script, filepath.Join("model", "testdata", "reference.py")} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, script)
	cmd.Stdin = bytes.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpo_reference.py: %v\n%s", err, stderr.String())
	}
	var resp struct{ Results []stepResult }
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("grpo_reference.py output: %v", err)
	}
	if len(resp.Results) != len(cases) {
		t.Fatalf("grpo_reference.py answered %d cases of %d", len(resp.Results), len(cases))
	}
	return resp.Results
}

// stepError is the worst of the loss's and every gradient tensor's relative error, and what
// it was measured on.
func stepError(got, want stepResult) (float64, string) {
	worst, where := math.Abs(got.Loss-want.Loss)/math.Max(want.LossScale, 1e-12), "loss"
	if len(got.Grads) != len(want.Grads) {
		return math.Inf(1), fmt.Sprintf("%d gradient modules, want %d", len(got.Grads), len(want.Grads))
	}
	for mod, w := range want.Grads {
		g, ok := got.Grads[mod]
		if !ok {
			return math.Inf(1), "no gradient for " + mod
		}
		for _, pair := range []struct {
			name      string
			got, want []float64
		}{{mod + ".A", g.A, w.A}, {mod + ".B", g.B, w.B}} {
			if e := maxAbsRel(pair.got, pair.want); e > worst || math.IsNaN(e) {
				worst, where = e, pair.name
			}
		}
	}
	return worst, where
}

// maxAbsRel is max_j |got_j − want_j| / max_j |want_j|.
func maxAbsRel(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var d, s float64
	for j := range want {
		d = math.Max(d, math.Abs(got[j]-want[j]))
		s = math.Max(s, math.Abs(want[j]))
	}
	if s == 0 {
		return d
	}
	return d / s
}

// fixedBatch is prompts × g fixed completions (lengths 1…7) over vocab ids, with rewards.
func fixedBatch(rng *rand.Rand, vocab, prompts, g int, rewards []float64) microBatch {
	var mb microBatch
	for p := 0; p < prompts; p++ {
		prompt := make([]int, 2+rng.IntN(5))
		for i := range prompt {
			prompt[i] = rng.IntN(vocab)
		}
		for j := 0; j < g; j++ {
			comp := make([]int, 1+rng.IntN(7))
			for i := range comp {
				comp[i] = rng.IntN(vocab)
			}
			mb.Prompts = append(mb.Prompts, prompt)
			mb.Completions = append(mb.Completions, comp)
		}
	}
	mb.Rewards = rewards
	return mb
}

func stepPolicies(t *testing.T) []*stepPolicy {
	return []*stepPolicy{
		newStepPolicy(t, "llama", model.Config{ModelType: "llama", Vocab: 96, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2,
			Hidden: 64, MaxPos: 64, NormEps: 1e-5, RopeTheta: 10000, BOS: -1}, 5),
		newStepPolicy(t, "gpt2", model.Config{ModelType: "gpt2", Vocab: 96, Dim: 32, Layers: 2, Heads: 4,
			Hidden: 128, MaxPos: 64, NormEps: 1e-5, TieEmbed: true, BOS: -1}, 6),
	}
}

// TestGRPOStepMatchesTorch checks the loss and the LoRA gradients of a GRPO step on fixed
// completions, on a GQA llama and a gpt2: every loss_type × importance_sampling_level, on- and
// off-policy (num_iterations > 1) with truncation masking and the entropy filter; the first
// four loss types × scale_rewards × beta ∈ {0, 0.04}, plus a temperature ≠ 1 and two
// accumulated micro-batches; and that the comparison catches a wrong temperature, loss_type,
// or a dropped option.
func TestGRPOStepMatchesTorch(t *testing.T) {
	const g = 4
	policies := stepPolicies(t)
	models := map[string]refModel{}
	type check struct {
		goCase, pyCase stepCase
		match          bool // false: a deliberate mismatch the comparison must reject
	}
	var checks []check
	for _, p := range policies {
		models[p.name] = p.ref()
		rng := rand.New(rand.NewPCG(17, 0))
		one := fixedBatch(rng, p.model.Config.Vocab, 2, g, []float64{0.1, 0.9, 0.4, 0.35, 1, 0, 0.25, 0.5})
		two := []microBatch{
			fixedBatch(rng, p.model.Config.Vocab, 2, g, []float64{0.3, 0.1, 0.8, 0.2, 0.7, 0.7, 0.1, 0.9}),
			// The second prompt's group is all alike: zero advantages there.
			fixedBatch(rng, p.model.Config.Vocab, 2, g, []float64{0, 1, 0.5, 0.25, 0.6, 0.6, 0.6, 0.6}),
		}
		base := stepCase{Model: p.name, Temperature: 1, Epsilon: 0.2, EpsilonHigh: 0.28, MaxCompletionLength: 8,
			NumGenerations: g, MicroBatches: []microBatch{one}}.withTRLDefaults()
		// Every loss type at both importance-sampling levels, on-policy (num_iterations = 1)
		// and one update after sampling (num_iterations > 1: logp_old from the adapters
		// before the update), the latter with truncated completions masked, the entropy filter
		// and β, over two micro-batches.
		old := p.perturbed(rand.New(rand.NewPCG(23, 0)), 0.3)
		masked := append([]microBatch(nil), two...)
		for k := range masked {
			masked[k].Truncated = make([]bool, len(masked[k].Completions))
			for i := range masked[k].Truncated {
				masked[k].Truncated[i] = (i+k)%3 == 0
			}
		}
		for _, lt := range grpo.LossTypes {
			for _, level := range []string{grpo.LevelToken, grpo.LevelSequence} {
				c := base
				c.LossType, c.ScaleRewards, c.ImportanceSamplingLevel = lt, grpo.ScaleGroup, level
				checks = append(checks, check{c, c, true})
				c.OldLoRA, c.MicroBatches, c.MaskTruncatedCompletions, c.TopEntropyQuantile, c.Beta = old, masked, true, 0.4, 0.04
				if lt == grpo.LossCISPO {
					c.EpsilonHigh = 1.1 // cispo's cap on the weight itself, within reach of the ratios
				}
				checks = append(checks, check{c, c, true})
			}
		}
		for _, lt := range []string{grpo.LossGRPO, grpo.LossBNPO, grpo.LossDrGRPO, grpo.LossDAPO} {
			for _, sr := range []string{grpo.ScaleGroup, grpo.ScaleBatch, grpo.ScaleNone} {
				for _, beta := range []float64{0, 0.04} {
					c := base
					c.LossType, c.ScaleRewards, c.Beta = lt, sr, beta
					checks = append(checks, check{c, c, true})
				}
			}
			// Temperature ≠ 1 and gradient accumulation over two micro-batches.
			c := base
			c.LossType, c.ScaleRewards, c.Beta, c.Temperature = lt, grpo.ScaleBatch, 0.04, 0.7
			checks = append(checks, check{c, c, true})
			c.MicroBatches = two
			checks = append(checks, check{c, c, true})
		}
		// The entropy bonus (its gradient through the head's softmax) for every loss type, on
		// the policy's own samples and one update after, with the entropy filter, β and
		// truncation masking over two micro-batches.
		for _, lt := range grpo.LossTypes {
			c := base
			c.LossType, c.ScaleRewards, c.EntropyCoef = lt, grpo.ScaleGroup, 0.05
			checks = append(checks, check{c, c, true})
			c.OldLoRA, c.MicroBatches, c.MaskTruncatedCompletions, c.TopEntropyQuantile, c.Beta = old, masked, true, 0.4, 0.04
			if lt == grpo.LossCISPO {
				c.EpsilonHigh = 1.1
			}
			checks = append(checks, check{c, c, true})
		}
		// Negative controls: the same comparison must fail on a wrong temperature or loss_type.
		c := base
		c.LossType, c.ScaleRewards, c.Beta, c.Temperature = grpo.LossDAPO, grpo.ScaleGroup, 0.04, 0.7
		wrongT := c
		wrongT.Temperature = 1
		checks = append(checks, check{c, wrongT, false})
		c.LossType = grpo.LossGRPO
		wrongType := c
		wrongType.LossType = grpo.LossBNPO
		checks = append(checks, check{c, wrongType, false})
		// … and on a dropped option: no entropy filter, no truncation mask, logp_old detached,
		// token instead of sequence level, no entropy bonus or another coefficient.
		c = base
		c.LossType, c.ScaleRewards, c.MicroBatches, c.OldLoRA = grpo.LossDAPO, grpo.ScaleGroup, masked, old
		c.MaskTruncatedCompletions, c.TopEntropyQuantile, c.ImportanceSamplingLevel = true, 0.4, grpo.LevelSequence
		c.EntropyCoef = 0.05
		for _, wrong := range []func(*stepCase){
			func(w *stepCase) { w.TopEntropyQuantile = 1 },
			func(w *stepCase) { w.MaskTruncatedCompletions = false },
			func(w *stepCase) { w.OldLoRA = nil },
			func(w *stepCase) { w.ImportanceSamplingLevel = grpo.LevelToken },
			func(w *stepCase) { w.EntropyCoef = 0 },
			func(w *stepCase) { w.EntropyCoef = 0.1 },
		} {
			w := c
			wrong(&w)
			checks = append(checks, check{c, w, false})
		}
	}
	byName := map[string]*stepPolicy{}
	for _, p := range policies {
		byName[p.name] = p
	}
	got := make([]stepResult, len(checks))
	pyCases := make([]stepCase, len(checks))
	for i, ch := range checks {
		r, err := byName[ch.goCase.Model].step(ch.goCase)
		if err != nil {
			t.Fatalf("%v: %v", ch.goCase, err)
		}
		got[i], pyCases[i] = r, ch.pyCase
	}
	want := runStepReference(t, models, pyCases)
	worst := 0.0
	for i, ch := range checks {
		e, where := stepError(got[i], want[i])
		if ch.match {
			worst = math.Max(worst, e)
			if !(e <= stepTol) {
				t.Errorf("%v: %s differs from PyTorch by %.3g relative (tolerance %g): loss %.9g, torch %.9g",
					ch.goCase, where, e, stepTol, got[i].Loss, want[i].Loss)
			}
			for k := range want[i].Advantages {
				if d := maxAbsRel(got[i].Advantages[k], want[i].Advantages[k]); d > 1e-12 {
					t.Errorf("%v: advantages of micro-batch %d differ by %.3g", ch.goCase, k, d)
				}
			}
		} else if e <= 100*stepTol {
			t.Errorf("Go %v against torch %v: error %.3g at %s, want a mismatch the test would reject",
				ch.goCase, ch.pyCase, e, where)
		}
	}
	t.Logf("%d cases, worst relative error %.3g (tolerance %g)", len(checks), worst, stepTol)
}

// nllReward rewards a completion by its mean scorer NLL: a reward that varies continuously, so
// that no group's advantages vanish.
type nllReward struct{}

func (nllReward) Name() string { return "nll" }

func (nllReward) Score(samples []rewards.Sample) ([]float64, map[string]float64, error) {
	out := make([]float64, len(samples))
	for i, s := range samples {
		for _, v := range s.NLL {
			out[i] += v / float64(max(len(s.NLL), 1))
		}
	}
	return out, nil, nil
}

// TestTrainStepMatchesTorch runs the engine's own trainStep (rollout with the policy, scoring
// with the adapters off, rewards, advantages, loss, backward) and checks its loss and the
// gradients it leaves in the adapters against PyTorch on the completions it sampled.
func TestTrainStepMatchesTorch(t *testing.T) {
	type run struct {
		name string
		got  stepResult
		ref  refModel
		sc   stepCase
	}
	var runs []run
	for i, tc := range []struct {
		lossType, scale string
		beta, temp      float64
		ga              int
		level           string
		mask            bool
		rho             float64
		entropyCoef     float64
	}{
		{grpo.LossDAPO, grpo.ScaleGroup, 0.04, 0.8, 2, grpo.LevelToken, false, 1, 0},
		{grpo.LossGRPO, grpo.ScaleBatch, 0.04, 1, 2, grpo.LevelSequence, true, 1, 0},
		{grpo.LossDrGRPO, grpo.ScaleNone, 0, 1.3, 1, grpo.LevelToken, true, 0.3, 0},
		{grpo.LossSAPO, grpo.ScaleGroup, 0.04, 1, 2, grpo.LevelToken, false, 0.5, 0},
		// the entropy bonus, its gradient through the head: dapo's global normalisation and a
		// per-micro-batch mean with the entropy filter
		{grpo.LossDAPO, grpo.ScaleGroup, 0.04, 0.8, 2, grpo.LevelToken, false, 1, 0.05},
		{grpo.LossBNPO, grpo.ScaleGroup, 0, 1, 2, grpo.LevelToken, false, 0.4, 0.08},
	} {
		name := fmt.Sprintf("%s-%s-beta%g-T%g-ga%d-%s-mask%v-rho%g-ent%g", tc.lossType, tc.scale, tc.beta, tc.temp, tc.ga, tc.level, tc.mask, tc.rho, tc.entropyCoef)
		c := tinyConfig(t, "story", 1)
		c.Quant.Type = "none"
		c.LoRA.InitLoRAWeights = false // random B: dA ≠ 0 and policy ≠ reference
		c.MaxGradNorm = 0              // the raw gradients stay in the adapters
		c.LossType, c.ScaleRewards, c.Beta, c.Temperature = tc.lossType, tc.scale, tc.beta, tc.temp
		c.GradientAccumulationSteps = tc.ga
		c.ImportanceSamplingLevel, c.MaskTruncatedCompletions, c.TopEntropyQuantile = tc.level, tc.mask, tc.rho
		c.EntropyCoef = tc.entropyCoef
		c.MaxCompletionLength = 10
		if tc.mask {
			c.MaxCompletionLength = 160 // long enough that some completions stop (EOS is 1 of 400 tokens)
		}
		c.RunName = fmt.Sprintf("run%d", i)
		if err := c.Finish(); err != nil {
			t.Fatal(err)
		}
		got, ref, sc := replayTrainStep(t, c)
		sc.Model = name
		if tc.mask { // the masking must have something to drop and something to keep
			cut, all := 0, 0
			for _, mb := range sc.MicroBatches {
				for _, tr := range mb.Truncated {
					all++
					if tr {
						cut++
					}
				}
			}
			t.Logf("%s: %d of %d completions truncated", name, cut, all)
			if cut == 0 || cut == all {
				t.Fatalf("%s: %d of %d completions truncated: the test needs both kinds", name, cut, all)
			}
		}
		runs = append(runs, run{name, got, ref, sc})
	}
	models := map[string]refModel{}
	var cases []stepCase
	for _, r := range runs {
		models[r.name] = r.ref
		cases = append(cases, r.sc)
	}
	want := runStepReference(t, models, cases)
	for i, r := range runs {
		if err, where := stepError(r.got, want[i]); !(err <= stepTol) {
			t.Errorf("%s: trainStep's %s differs from PyTorch by %.3g relative (tolerance %g): loss %.9g, torch %.9g",
				r.name, where, err, stepTol, r.got.Loss, want[i].Loss)
		} else {
			t.Logf("%s: worst relative error %.3g (%s); loss %.6g", r.name, err, where, r.got.Loss)
		}
	}
}

// replayTrainStep makes an engine for c (its rewards replaced by nllReward), draws the first
// step's completions and rewards as trainStep will, then runs trainStep itself. It returns
// trainStep's loss and gradients, the adapters as they were before the update, and the step
// as a reference case.
func replayTrainStep(t *testing.T, c *config.Config) (stepResult, refModel, stepCase) {
	t.Helper()
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Prompts: prompts(t, "story")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	e.funcs = []rewards.Weighted{{Func: nllReward{}, Weight: 1}}
	ref := (&stepPolicy{dir: tinyModelDir(t), model: e.model, set: e.adapters}).ref()
	for name, l := range ref.LoRA { // the weights before the update
		l.A, l.B = append([]float32(nil), l.A...), append([]float32(nil), l.B...)
		ref.LoRA[name] = l
	}
	ctx := context.Background()
	cursor := e.cursor
	rng := e.stepRNG(e.step+1, 0)
	sc := stepCase{Temperature: c.Temperature, LossType: c.LossType, ScaleRewards: c.ScaleRewards, Beta: c.Beta,
		Epsilon: c.Epsilon, EpsilonHigh: c.EpsilonHigh, MaxCompletionLength: c.MaxCompletionLength,
		NumGenerations: c.NumGenerations, ImportanceSamplingLevel: c.ImportanceSamplingLevel,
		MaskTruncatedCompletions: c.MaskTruncatedCompletions, TopEntropyQuantile: c.TopEntropyQuantile,
		SAPOTemperaturePos: c.SAPOTemperaturePos, SAPOTemperatureNeg: c.SAPOTemperatureNeg,
		VESPOKPos: c.VESPOKPos, VESPOLambdaPos: c.VESPOLambdaPos, VESPOKNeg: c.VESPOKNeg, VESPOLambdaNeg: c.VESPOLambdaNeg,
		EntropyCoef: c.EntropyCoef}
	for mb := 0; mb < max(1, c.GradientAccumulationSteps); mb++ {
		b, err := e.generate(ctx, e.nextPrompts(c.PerDeviceTrainBatchSize), rng.Uint64())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.score(b); err != nil {
			t.Fatal(err)
		}
		if _, err := e.reward(b); err != nil {
			t.Fatal(err)
		}
		var m microBatch
		for _, r := range b.rollouts {
			m.Prompts = append(m.Prompts, r.prompt)
			m.Completions = append(m.Completions, r.tokens)
			m.Rewards = append(m.Rewards, r.reward)
			m.Truncated = append(m.Truncated, r.cut)
		}
		sc.MicroBatches = append(sc.MicroBatches, m)
	}
	e.cursor = cursor
	if err := e.trainStep(ctx); err != nil {
		t.Fatal(err)
	}
	// The replay must have drawn what trainStep drew: its samples event shows the first
	// prompt's completions with their rewards.
	seen := false
	for _, ev := range pendingEvents(e) {
		for i, s := range ev.Samples {
			seen = true
			if s.Reward != sc.MicroBatches[0].Rewards[i] {
				t.Fatalf("replayed reward %d is %v, trainStep's %v", i, sc.MicroBatches[0].Rewards[i], s.Reward)
			}
		}
	}
	if !seen {
		t.Fatal("trainStep emitted no samples")
	}
	return stepResult{Loss: e.lastStep["loss"], Grads: layerGrads(e.adapters)}, ref, sc
}

// pendingEvents takes the events waiting in e's channel.
func pendingEvents(e *Engine) []events.Event {
	var out []events.Event
	for {
		select {
		case ev := <-e.out:
			out = append(out, ev)
		default:
			return out
		}
	}
}
