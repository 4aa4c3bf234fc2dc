package monitor

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/internal/stats"
	"rlhfstation/safetensors"
)

// Health checks of a checkpoint.
const (
	// OutlierFactor: a module whose ‖A‖, ‖B‖ or ‖s·B·A‖ (or, against a reference, whose
	// ‖Δ(s·B·A)‖) exceeds this multiple of the median of its kind (q_proj, down_proj…; of all
	// modules when its kind has fewer than 3) is an outlier.
	OutlierFactor = 10
	// MaxLearningRate: above it a LoRA learning rate is reported as implausible.
	MaxLearningRate = 1e-2
	// MinLearningRate: a positive learning rate below it is too small to move the weights.
	MinLearningRate = 1e-8
)

// Penalty is the score factor each issue costs, by severity: the health score is
// Π over issues (1 − Penalty[severity]). Issues are counted once per code (one issue lists every
// module it concerns), so a clean checkpoint scores 1, one warning 0.85, one critical 0.5.
var Penalty = map[string]float64{events.Info: 0.02, events.Warning: 0.15, events.Critical: 0.5}

// Report is the analysis of one checkpoint; it is the JSON document `rlhfstation inspect --json`
// prints. Every number in it is finite.
type Report struct {
	Path      string `json:"path"`
	Reference string `json:"reference,omitempty"` // the --ref checkpoint
	// Score is the health score in [0, 1]: Π over Issues of (1 − Penalty[severity]).
	Score float64 `json:"score"`
	// Step is the training step: trainer_state.json's global_step, else the optimizer's "step"
	// metadata; StepFrom says which ("" when neither is there and Step is 0).
	Step     int    `json:"step"`
	StepFrom string `json:"step_from,omitempty"`

	Adapter AdapterInfo `json:"adapter"`
	Norms   NormSummary `json:"norms"`
	// Issues, most severe first; empty when the checkpoint is healthy.
	Issues []Issue `json:"issues"`
	// Groups: attention, mlp and other modules, each with its modules worst first.
	Groups []Group `json:"groups"`
	// Layers: per-layer aggregates, by layer number (-1: modules outside numbered layers).
	Layers []LayerStats `json:"layers"`

	Drift     *DriftSummary            `json:"drift,omitempty"`     // with a reference
	Optimizer *OptimizerInfo           `json:"optimizer,omitempty"` // when optimizer.safetensors is there
	Trainer   *checkpoint.TrainerState `json:"trainer_state,omitempty"`
	// Skipped names the files not read: PyTorch pickles (optimizer.pt, scheduler.pt…), which
	// only code execution could load.
	Skipped []string `json:"skipped,omitempty"`
	// Foreign is set for a checkpoint another tool wrote (the Hugging Face Trainer's
	// checkpoint-N): this tool cannot resume from it, and does not say so as a problem.
	Foreign bool `json:"foreign,omitempty"`
}

// AdapterInfo describes the adapter as configured and as stored.
type AdapterInfo struct {
	PeftType      string   `json:"peft_type,omitempty"`
	BaseModel     string   `json:"base_model,omitempty"`
	R             int      `json:"r"` // the config's r (0 without adapter_config.json)
	Alpha         float64  `json:"lora_alpha"`
	RSLoRA        bool     `json:"use_rslora"`
	Scale         float64  `json:"scale"`      // s for rank r: alpha/r, or alpha/√r with rslora
	ScaleRule     string   `json:"scale_rule"` // "alpha/r", "alpha/sqrt(r)", or "1 (no adapter_config.json)"
	TargetModules []string `json:"target_modules,omitempty"`
	Modules       int      `json:"modules"`       // LoRA modules found
	Params        int64    `json:"params"`        // elements of all LoRA factors
	OtherTensors  int      `json:"other_tensors"` // tensors of the adapter file that are not LoRA factors
}

// Agg aggregates one quantity over modules: mean, sample standard deviation, and the maximum
// with the module that holds it.
type Agg struct {
	Mean      float64 `json:"mean"`
	Std       float64 `json:"std"`
	Max       float64 `json:"max"`
	MaxModule string  `json:"max_module,omitempty"`
}

// NormSummary aggregates the module norms over the whole adapter.
type NormSummary struct {
	A         Agg `json:"norm_a"`  // ‖A‖_F
	B         Agg `json:"norm_b"`  // ‖B‖_F
	BA        Agg `json:"norm_ba"` // ‖s·B·A‖_F
	NonFinite int `json:"non_finite"`
	ZeroB     int `json:"zero_b"` // modules whose B is all zero (no update yet)
}

// Module is one LoRA module's analysis.
type Module struct {
	Name  string  `json:"name"` // module path inside the model: model.layers.3.self_attn.q_proj
	Group string  `json:"group"`
	Kind  string  `json:"kind"`  // last path component: q_proj, c_attn…
	Layer int     `json:"layer"` // -1 outside numbered layers
	Rank  int     `json:"r"`
	In    int     `json:"in"`
	Out   int     `json:"out"`
	Scale float64 `json:"scale"`
	// Frobenius norms of the finite entries; NonFinite counts the others (A and B together).
	NormA     float64      `json:"norm_a"`
	NormB     float64      `json:"norm_b"`
	NormBA    float64      `json:"norm_ba"` // ‖s·B·A‖_F from r×r products
	NonFinite int          `json:"non_finite"`
	Drift     *ModuleDrift `json:"drift,omitempty"`
	// Issues are the codes of the issues naming this module.
	Issues []string `json:"issues,omitempty"`

	severity int // worst issue's, for ordering
}

// ModuleDrift compares a module with the same module of the reference checkpoint.
type ModuleDrift struct {
	DeltaA    float64 `json:"delta_a"`     // ‖A − A₀‖_F
	DeltaB    float64 `json:"delta_b"`     // ‖B − B₀‖_F
	RefNormBA float64 `json:"ref_norm_ba"` // ‖s₀·B₀·A₀‖_F
	// RelChange = (‖s·B·A‖ − ‖s₀·B₀·A₀‖)/‖s₀·B₀·A₀‖; absent when the reference's norm is 0.
	RelChange *float64 `json:"rel_change,omitempty"`
	DeltaBA   float64  `json:"delta_ba"` // ‖s·B·A − s₀·B₀·A₀‖_F from r×r products
	Frozen    bool     `json:"frozen"`   // A and B exactly equal to the reference's
}

// Issue is one problem found, with what to do about it.
type Issue struct {
	Code           string   `json:"code"`
	Severity       string   `json:"severity"` // info, warning, critical
	Message        string   `json:"message"`
	Recommendation string   `json:"recommendation"`
	Modules        []string `json:"modules,omitempty"`
}

// Group gathers the modules of one kind of block.
type Group struct {
	Name    string      `json:"name"` // attention, mlp, other
	Kinds   []KindStats `json:"kinds"`
	Modules []Module    `json:"modules"` // worst first: by issue severity, then ‖s·B·A‖ over its kind's median
}

// KindStats aggregates the modules of one kind.
type KindStats struct {
	Kind    string `json:"kind"`
	Modules int    `json:"modules"`
	A       Agg    `json:"norm_a"`
	B       Agg    `json:"norm_b"`
	BA      Agg    `json:"norm_ba"`
	DeltaBA *Agg   `json:"delta_ba,omitempty"`
}

// LayerStats aggregates the modules of one layer.
type LayerStats struct {
	Layer   int  `json:"layer"`
	Modules int  `json:"modules"`
	BA      Agg  `json:"norm_ba"`
	DeltaBA *Agg `json:"delta_ba,omitempty"`
}

// DriftSummary aggregates the comparison with the reference.
type DriftSummary struct {
	Compared  int  `json:"compared"` // modules present in both with the same shape
	Frozen    int  `json:"frozen"`
	DeltaA    Agg  `json:"delta_a"`
	DeltaB    Agg  `json:"delta_b"`
	DeltaBA   Agg  `json:"delta_ba"`
	RelChange *Agg `json:"rel_change,omitempty"`
	RefStep   int  `json:"ref_step,omitempty"`
}

// OptimizerInfo is what optimizer.safetensors says.
type OptimizerInfo struct {
	Step         int               `json:"step"`
	LearningRate float64           `json:"learning_rate"`
	Beta1        float64           `json:"beta1"`
	Beta2        float64           `json:"beta2"`
	Eps          float64           `json:"eps"`
	WeightDecay  float64           `json:"weight_decay"`
	Metadata     map[string]string `json:"metadata"` // as stored
	Tensors      int               `json:"tensors"`  // moment tensors read
	ExpAvgNorm   float64           `json:"exp_avg_norm"`
	ExpAvgSqMax  float64           `json:"exp_avg_sq_max"`
	NonFinite    int               `json:"non_finite"`
	Negative     int               `json:"negative_exp_avg_sq"`
}

// Health is the short form for a checkpoint event.
func (r *Report) Health() *events.Health {
	h := &events.Health{Score: r.Score}
	for _, is := range r.Issues {
		h.Issues = append(h.Issues, is.Severity+": "+is.Message)
	}
	return h
}

// Analyze inspects the checkpoint folder dir and, when ref is not "", compares it with the
// checkpoint ref. Errors are for folders that cannot be read as a LoRA adapter at all; every
// other problem becomes an Issue of the report.
func Analyze(dir, ref string) (*Report, error) {
	c, err := openCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer c.close()
	var rc *folder
	if ref != "" {
		if rc, err = openCheckpoint(ref); err != nil {
			return nil, fmt.Errorf("reference: %w", err)
		}
		defer rc.close()
	}
	a := &analysis{c: c, rc: rc, issues: newIssues()}
	return a.run()
}

type analysis struct {
	c, rc   *folder
	issues  *issueSet
	rep     *Report
	modules []Module
}

func (a *analysis) run() (*Report, error) {
	c := a.c
	rep := &Report{Path: c.dir, Skipped: c.skipped, Foreign: c.foreign}
	a.rep = rep
	if a.rc != nil {
		rep.Reference = a.rc.dir
	}
	a.adapterInfo()
	a.stepAndTrainer()

	for _, bad := range c.malformed {
		a.issues.global("malformed_module", events.Critical, bad)
	}
	var refModules map[string]moduleTensors
	if a.rc != nil {
		refModules = map[string]moduleTensors{}
		for _, m := range a.rc.modules {
			refModules[m.Path] = m
		}
	}
	for _, mt := range c.modules {
		if err := a.module(mt, refModules); err != nil {
			return nil, err
		}
	}
	if a.rc != nil {
		a.referenceCoverage()
	}
	a.moduleIssues()
	if c.optPath != "" {
		if err := a.optimizer(); err != nil {
			return nil, err
		}
	}
	a.aggregate()
	rep.Issues = a.issues.list()
	rep.Score = 1
	for _, is := range rep.Issues {
		rep.Score *= 1 - Penalty[is.Severity]
	}
	return rep, nil
}

func (a *analysis) adapterInfo() {
	c, info := a.c, &a.rep.Adapter
	info.Modules = len(c.modules)
	info.OtherTensors = len(c.other)
	for _, m := range c.modules {
		for _, n := range []string{m.AName, m.BName} {
			ti, _ := c.adapter.Info(n)
			info.Params += int64(ti.NumElements())
		}
	}
	if c.cfg == nil {
		info.Scale, info.ScaleRule = 1, "1 (no adapter_config.json)"
		a.issues.global("no_config", events.Warning, "no "+checkpoint.AdapterConfigFile+": lora_alpha and r are unknown, so s is taken as 1 and ‖s·B·A‖ is ‖B·A‖")
		return
	}
	cfg := c.cfg
	info.PeftType, info.BaseModel, info.R, info.Alpha, info.RSLoRA = cfg.PeftType, cfg.BaseModel, cfg.R, cfg.LoraAlpha, cfg.UseRSLoRA
	info.TargetModules = cfg.TargetModules
	info.Scale = loraScale(cfg.LoraAlpha, cfg.R, cfg.UseRSLoRA)
	info.ScaleRule = "alpha/r"
	if cfg.UseRSLoRA {
		info.ScaleRule = "alpha/sqrt(r)"
	}
	if cfg.PeftType != "" && !strings.EqualFold(cfg.PeftType, "LORA") {
		a.issues.global("config_mismatch", events.Warning, fmt.Sprintf("peft_type is %q, not LORA; the LoRA reading may not apply", cfg.PeftType))
	}
}

func (a *analysis) stepAndTrainer() {
	c, rep := a.c, a.rep
	if c.trainErr != nil {
		if c.foreign {
			a.issues.global("trainer_state", events.Warning, fmt.Sprintf("%s is unreadable (%v): the step and the last metrics are unknown", checkpoint.TrainerStateFile, c.trainErr))
		} else {
			a.issues.global("trainer_state", events.Critical, fmt.Sprintf("%s is unreadable (%v): the run cannot resume from here", checkpoint.TrainerStateFile, c.trainErr))
		}
	}
	if c.trainer == nil {
		if m := checkpointFolder.FindStringSubmatch(filepath.Base(c.dir)); m != nil {
			rep.Step, _ = strconv.Atoi(m[1])
			rep.StepFrom = "folder name"
		}
		return
	}
	t := c.trainer
	rep.Trainer = t
	rep.Step, rep.StepFrom = t.GlobalStep, "trainer_state"
	if t.GlobalStep < 0 {
		a.issues.global("trainer_state", events.Critical, fmt.Sprintf("global_step is %d", t.GlobalStep))
	}
	// The Hugging Face Trainer keeps the learning rate in its log; a checkpoint saved before the
	// first log has none.
	if _, logged := t.Metrics["learning_rate"]; t.Own() || logged {
		a.checkLR("trainer_state learning_rate", t.LearningRate)
	}
	var bad []string
	for k, v := range t.Metrics {
		if !finite(v) {
			bad = append(bad, fmt.Sprintf("%s = %v", k, v))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Metrics = finiteMetrics(t.Metrics)
		a.issues.global("nonfinite_metrics", events.Warning, "the last step's metrics hold non-finite values: "+strings.Join(bad, ", "))
	}
}

// finiteMetrics drops non-finite values (reported as an issue) so that the report stays plain
// JSON numbers.
func finiteMetrics(m events.Metrics) events.Metrics {
	out := events.Metrics{}
	for k, v := range m {
		if finite(v) {
			out[k] = v
		}
	}
	return out
}

// checkLR judges a learning rate for LoRA training.
func (a *analysis) checkLR(what string, lr float64) {
	switch {
	case !finite(lr) || lr < 0:
		a.issues.global("learning_rate", events.Critical, fmt.Sprintf("%s is %v", what, lr))
	case lr == 0:
		a.issues.global("learning_rate", events.Info, what+" is 0: the schedule has ended or training is off")
	case lr > MaxLearningRate:
		a.issues.global("learning_rate", events.Warning, fmt.Sprintf("%s %.3g is above %.0e, implausibly high for LoRA", what, lr, MaxLearningRate))
	case lr < MinLearningRate:
		a.issues.global("learning_rate", events.Warning, fmt.Sprintf("%s %.3g is below %.0e: too small to move the weights", what, lr, MinLearningRate))
	}
}

// moduleName splits a module path into its group, kind and layer.
func moduleName(path string) (group, kind string, layer int) {
	parts := strings.Split(path, ".")
	kind, layer = parts[len(parts)-1], -1
	for _, p := range parts {
		if n, err := strconv.Atoi(p); err == nil {
			layer = n
		}
	}
	lower := strings.ToLower(path)
	switch {
	case strings.Contains(lower, "attn") || strings.Contains(lower, "attention") || attentionKinds[kind]:
		group = "attention"
	case strings.Contains(lower, "mlp") || strings.Contains(lower, "feed_forward") || strings.Contains(lower, "ffn") || mlpKinds[kind]:
		group = "mlp"
	default:
		group = "other"
	}
	return group, kind, layer
}

var attentionKinds = map[string]bool{"q_proj": true, "k_proj": true, "v_proj": true, "o_proj": true,
	"qkv_proj": true, "query_key_value": true, "c_attn": true, "Wqkv": true, "query": true, "key": true, "value": true}
var mlpKinds = map[string]bool{"gate_proj": true, "up_proj": true, "down_proj": true, "c_fc": true,
	"fc1": true, "fc2": true, "w1": true, "w2": true, "w3": true, "gate_up_proj": true}

// module analyses one module, against its reference when there is one.
func (a *analysis) module(mt moduleTensors, refModules map[string]moduleTensors) error {
	f, nfA, nfB, err := a.c.loadFactor(mt)
	if err != nil {
		if _, ok := err.(*safetensors.FormatError); ok {
			return err
		}
		a.issues.global("malformed_module", events.Critical, err.Error())
		return nil
	}
	group, kind, layer := moduleName(mt.Path)
	m := Module{Name: mt.Path, Group: group, Kind: kind, Layer: layer, Rank: f.R, In: f.In, Out: f.Out, Scale: f.Scale,
		NormA: frobenius(f.A), NormB: frobenius(f.B), NormBA: updateNorm(f), NonFinite: nfA + nfB}
	if nf := nfA + nfB; nf > 0 {
		a.issues.module("non_finite", events.Critical, mt.Path, fmt.Sprintf("%d in A, %d in B", nfA, nfB))
	}
	if a.c.cfg != nil {
		if want := a.c.expectedRank(mt.Path); want != f.R {
			a.issues.module("config_mismatch", events.Warning, mt.Path, fmt.Sprintf("rank %d in the tensors, %d in %s", f.R, want, checkpoint.AdapterConfigFile))
		}
	}
	if rm, ok := refModules[mt.Path]; ok {
		if err := a.drift(&m, f, rm); err != nil {
			return err
		}
	}
	a.modules = append(a.modules, m)
	return nil
}

func (a *analysis) drift(m *Module, f *loraFactor, rm moduleTensors) error {
	f0, _, _, err := a.rc.loadFactor(rm)
	if err != nil {
		if _, ok := err.(*safetensors.FormatError); ok {
			return fmt.Errorf("reference: %w", err)
		}
		a.issues.module("reference_mismatch", events.Warning, m.Name, "unreadable in the reference: "+err.Error())
		return nil
	}
	if f0.In != f.In || f0.Out != f.Out {
		a.issues.module("reference_mismatch", events.Warning, m.Name, fmt.Sprintf("shape [%d×%d] in the reference, [%d×%d] here", f0.Out, f0.In, f.Out, f.In))
		return nil
	}
	d := &ModuleDrift{RefNormBA: updateNorm(f0), DeltaBA: updateDiffNorm(f, f0)}
	if f0.R == f.R {
		d.DeltaA, d.DeltaB = frobeniusDiff(f.A, f0.A), frobeniusDiff(f.B, f0.B)
		d.Frozen = d.DeltaA == 0 && d.DeltaB == 0 && f.Scale == f0.Scale
	} else {
		d.DeltaA, d.DeltaB = math.Abs(m.NormA-frobenius(f0.A)), math.Abs(m.NormB-frobenius(f0.B))
		a.issues.module("reference_config", events.Info, m.Name, fmt.Sprintf("rank %d here, %d in the reference (ΔA and ΔB are differences of norms)", f.R, f0.R))
	}
	if d.RefNormBA > 0 {
		rel := (m.NormBA - d.RefNormBA) / d.RefNormBA
		d.RelChange = &rel
	}
	m.Drift = d
	return nil
}

// referenceCoverage reports modules present on one side only.
func (a *analysis) referenceCoverage() {
	here := map[string]bool{}
	for _, m := range a.c.modules {
		here[m.Path] = true
	}
	there := map[string]bool{}
	for _, m := range a.rc.modules {
		there[m.Path] = true
		if !here[m.Path] {
			a.issues.module("reference_mismatch", events.Warning, m.Path, "only in the reference")
		}
	}
	for _, m := range a.c.modules {
		if !there[m.Path] {
			a.issues.module("reference_mismatch", events.Warning, m.Path, "not in the reference")
		}
	}
	if a.rc.cfg != nil && a.c.cfg != nil {
		x, y := a.c.cfg, a.rc.cfg
		if x.R != y.R || x.LoraAlpha != y.LoraAlpha || x.UseRSLoRA != y.UseRSLoRA {
			a.issues.global("reference_config", events.Info, fmt.Sprintf("r %d, alpha %g, rslora %v here; r %d, alpha %g, rslora %v in the reference", x.R, x.LoraAlpha, x.UseRSLoRA, y.R, y.LoraAlpha, y.UseRSLoRA))
		}
	}
}

// kindMedians is the median of a per-module quantity for each kind (over the modules without
// non-finite values); kinds with fewer than 3 modules share the median of all modules.
func kindMedians(mods []Module, val func(*Module) (float64, bool)) map[string]float64 {
	byKind := map[string][]float64{}
	var all []float64
	for i := range mods {
		if v, ok := val(&mods[i]); ok && mods[i].NonFinite == 0 {
			byKind[mods[i].Kind] = append(byKind[mods[i].Kind], v)
			all = append(all, v)
		}
	}
	out := map[string]float64{}
	allMed := math.NaN()
	if len(all) >= 3 {
		allMed = median(all)
	}
	for i := range mods {
		k := mods[i].Kind
		if _, done := out[k]; done {
			continue
		}
		if len(byKind[k]) >= 3 {
			out[k] = median(byKind[k])
		} else {
			out[k] = allMed
		}
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// moduleIssues finds the issues that compare modules with each other or with the reference.
func (a *analysis) moduleIssues() {
	mods := a.modules
	if len(mods) == 0 {
		return
	}
	type quantity struct {
		label string
		val   func(*Module) (float64, bool)
	}
	qs := []quantity{
		{"‖A‖", func(m *Module) (float64, bool) { return m.NormA, true }},
		{"‖B‖", func(m *Module) (float64, bool) { return m.NormB, true }},
		{"‖s·B·A‖", func(m *Module) (float64, bool) { return m.NormBA, true }},
	}
	details := make([][]string, len(mods))
	for _, q := range qs {
		med := kindMedians(mods, q.val)
		for i := range mods {
			v, _ := q.val(&mods[i])
			if m := med[mods[i].Kind]; m > 0 && v > OutlierFactor*m {
				details[i] = append(details[i], fmt.Sprintf("%s %.3g = %.0f× the %s median %.3g", q.label, v, v/m, mods[i].Kind, m))
			}
		}
	}
	for i := range mods {
		if len(details[i]) > 0 {
			a.issues.module("norm_outlier", events.Warning, mods[i].Name, strings.Join(details[i], ", "))
		}
	}

	// Modules whose B is all zero have not moved from PEFT's initialisation.
	var zero []int
	for i := range mods {
		if mods[i].NormB == 0 && mods[i].NonFinite == 0 {
			zero = append(zero, i)
		}
	}
	a.rep.Norms.ZeroB = len(zero)
	trained := a.rep.Step > 0
	switch {
	case len(zero) == len(mods) && !trained:
		a.issues.global("untrained", events.Info, "B is zero in every module: the adapter is at its initialisation (a no-op)")
	case len(zero) == len(mods):
		a.issues.global("untrained", events.Warning, fmt.Sprintf("B is zero in every module at step %d: training has not changed the adapter", a.rep.Step))
	default:
		for _, i := range zero {
			a.issues.module("untrained", events.Warning, mods[i].Name, "B is all zero")
		}
	}

	if a.rc == nil {
		return
	}
	var compared, frozen []int
	for i := range mods {
		if mods[i].Drift != nil {
			compared = append(compared, i)
			if mods[i].Drift.Frozen {
				frozen = append(frozen, i)
			}
		}
	}
	switch {
	case len(compared) > 0 && len(frozen) == len(compared):
		a.issues.global("unchanged", events.Warning, fmt.Sprintf("all %d modules are identical to the reference", len(compared)))
	default:
		for _, i := range frozen {
			a.issues.module("frozen", events.Warning, mods[i].Name, "")
		}
		med := kindMedians(mods, func(m *Module) (float64, bool) {
			if m.Drift == nil {
				return 0, false
			}
			return m.Drift.DeltaBA, true
		})
		for _, i := range compared {
			d := mods[i].Drift.DeltaBA
			if m := med[mods[i].Kind]; m > 0 && d > OutlierFactor*m {
				a.issues.module("drift_outlier", events.Warning, mods[i].Name, fmt.Sprintf("‖Δ(s·B·A)‖ %.3g = %.0f× the %s median %.3g", d, d/m, mods[i].Kind, m))
			}
		}
	}
}

// optimizer checks optimizer.safetensors against the adapter and the trainer state.
func (a *analysis) optimizer() error {
	f, err := safetensors.Open(a.c.optPath)
	if err != nil {
		a.issues.global("optimizer_unreadable", events.Critical, err.Error())
		return nil
	}
	defer f.Close()
	o := &OptimizerInfo{Metadata: f.Metadata}
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	a.rep.Optimizer = o

	var missingMeta []string
	if n, ok := parseIntMeta(f.Metadata, "step"); ok {
		o.Step = n
	} else {
		missingMeta = append(missingMeta, "step")
	}
	floats := []struct {
		key string
		dst *float64
	}{{"learning_rate", &o.LearningRate}, {"beta1", &o.Beta1}, {"beta2", &o.Beta2}, {"eps", &o.Eps}, {"weight_decay", &o.WeightDecay}}
	for _, fl := range floats {
		v, ok, err := parseFloatMeta(f.Metadata, fl.key)
		switch {
		case !ok:
			missingMeta = append(missingMeta, fl.key)
		case err != nil:
			a.issues.global("optimizer_hyperparameters", events.Warning, err.Error())
		case !finite(v):
			a.issues.global("optimizer_hyperparameters", events.Critical, fmt.Sprintf("%s is %v", fl.key, v))
		default:
			*fl.dst = v
		}
	}
	if len(missingMeta) > 0 {
		a.issues.global("optimizer_hyperparameters", events.Warning, "metadata lacks "+strings.Join(missingMeta, ", "))
	}
	if _, ok := f.Metadata["learning_rate"]; ok {
		a.checkLR("optimizer learning_rate", o.LearningRate)
	}
	if !(o.Beta1 >= 0 && o.Beta1 < 1) || !(o.Beta2 >= 0 && o.Beta2 < 1) || o.Eps <= 0 || o.WeightDecay < 0 {
		if len(missingMeta) == 0 {
			a.issues.global("optimizer_hyperparameters", events.Warning, fmt.Sprintf("beta1 %g, beta2 %g, eps %g, weight_decay %g: want betas in [0, 1), eps > 0, weight_decay ≥ 0", o.Beta1, o.Beta2, o.Eps, o.WeightDecay))
		}
	}
	if a.rep.StepFrom == "trainer_state" {
		if _, ok := f.Metadata["step"]; ok && o.Step != a.rep.Step {
			a.issues.global("optimizer_step", events.Warning, fmt.Sprintf("optimizer step %d, trainer_state global_step %d: the optimizer state belongs to another save, and resuming would use the wrong bias correction", o.Step, a.rep.Step))
		}
	} else if _, ok := f.Metadata["step"]; ok {
		a.rep.Step, a.rep.StepFrom = o.Step, "optimizer"
	}

	// Moments: N.exp_avg and N.exp_avg_sq for every factor N of the adapter (with or without
	// PEFT's base_model.model. prefix).
	names := map[string]bool{}
	for _, n := range f.Names() {
		names[n] = true
	}
	used := map[string]bool{}
	var sumM float64
	allZeroV := true
	for _, m := range a.c.modules {
		for _, tn := range []string{m.AName, m.BName} {
			want, _ := a.c.adapter.Info(tn)
			for _, suffix := range []string{".exp_avg", ".exp_avg_sq"} {
				name := tn + suffix
				if !names[name] {
					name = strings.TrimPrefix(tn, peftPrefix) + suffix
				}
				if !names[name] {
					a.issues.module("optimizer_missing_moments", events.Warning, m.Path, "no "+tn+suffix)
					continue
				}
				used[name] = true
				info, _ := f.Info(name)
				if info.NumElements() != want.NumElements() {
					a.issues.module("optimizer_missing_moments", events.Warning, m.Path, fmt.Sprintf("%s has shape %v, its tensor %v", name, info.Shape, want.Shape))
					continue
				}
				v, _, err := f.Float32(name)
				if err != nil {
					a.issues.global("optimizer_unreadable", events.Critical, err.Error())
					continue
				}
				o.Tensors++
				nf, neg := 0, 0
				for _, x := range v {
					xf := float64(x)
					if !finite(xf) {
						nf++
						continue
					}
					if suffix == ".exp_avg" {
						sumM += xf * xf
						continue
					}
					if xf < 0 {
						neg++
					}
					if xf != 0 {
						allZeroV = false
					}
					o.ExpAvgSqMax = max(o.ExpAvgSqMax, xf)
				}
				o.NonFinite += nf
				o.Negative += neg
				if nf > 0 {
					a.issues.module("optimizer_nonfinite", events.Critical, m.Path, fmt.Sprintf("%d non-finite values in %s", nf, name))
				}
				if neg > 0 {
					a.issues.module("optimizer_negative_second_moment", events.Critical, m.Path, fmt.Sprintf("%d negative values in %s", neg, name))
				}
			}
		}
	}
	o.ExpAvgNorm = math.Sqrt(sumM)
	if o.Step > 0 && o.Tensors > 0 && allZeroV {
		a.issues.global("optimizer_empty", events.Warning, fmt.Sprintf("every exp_avg_sq is zero at step %d: the optimizer never saw a gradient", o.Step))
	}
	var extra []string
	for n := range names {
		if !used[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		if len(extra) > 5 {
			extra = append(extra[:5], fmt.Sprintf("and %d more", len(extra)-5))
		}
		a.issues.global("optimizer_extra", events.Info, "tensors that match no adapter factor: "+strings.Join(extra, ", "))
	}
	return nil
}

// aggregate fills the norm summary, the groups (worst modules first), the layers and the drift
// summary.
func (a *analysis) aggregate() {
	rep, mods := a.rep, a.modules
	sev := a.issues.moduleSeverity()
	for i := range mods {
		mods[i].Issues = a.issues.codesFor(mods[i].Name)
		mods[i].severity = sev[mods[i].Name]
		rep.Norms.NonFinite += mods[i].NonFinite
	}
	rep.Norms.A = aggOf(mods, func(m *Module) (float64, bool) { return m.NormA, true })
	rep.Norms.B = aggOf(mods, func(m *Module) (float64, bool) { return m.NormB, true })
	rep.Norms.BA = aggOf(mods, func(m *Module) (float64, bool) { return m.NormBA, true })
	deltaBA := func(m *Module) (float64, bool) {
		if m.Drift == nil {
			return 0, false
		}
		return m.Drift.DeltaBA, true
	}

	medBA := kindMedians(mods, func(m *Module) (float64, bool) { return m.NormBA, true })
	ratio := func(m *Module) float64 {
		if med := medBA[m.Kind]; med > 0 {
			return m.NormBA / med
		}
		return 0
	}
	for _, g := range []string{"attention", "mlp", "other"} {
		var gm []Module
		for _, m := range mods {
			if m.Group == g {
				gm = append(gm, m)
			}
		}
		if len(gm) == 0 {
			continue
		}
		sort.SliceStable(gm, func(i, j int) bool {
			if gm[i].severity != gm[j].severity {
				return gm[i].severity > gm[j].severity
			}
			return ratio(&gm[i]) > ratio(&gm[j])
		})
		grp := Group{Name: g, Modules: gm}
		kinds := map[string][]Module{}
		var order []string
		for _, m := range gm {
			if kinds[m.Kind] == nil {
				order = append(order, m.Kind)
			}
			kinds[m.Kind] = append(kinds[m.Kind], m)
		}
		sort.Strings(order)
		for _, k := range order {
			km := kinds[k]
			ks := KindStats{Kind: k, Modules: len(km),
				A:  aggOf(km, func(m *Module) (float64, bool) { return m.NormA, true }),
				B:  aggOf(km, func(m *Module) (float64, bool) { return m.NormB, true }),
				BA: aggOf(km, func(m *Module) (float64, bool) { return m.NormBA, true })}
			if a.rc != nil {
				d := aggOf(km, deltaBA)
				ks.DeltaBA = &d
			}
			grp.Kinds = append(grp.Kinds, ks)
		}
		rep.Groups = append(rep.Groups, grp)
	}

	byLayer := map[int][]Module{}
	for _, m := range mods {
		byLayer[m.Layer] = append(byLayer[m.Layer], m)
	}
	var layers []int
	for l := range byLayer {
		layers = append(layers, l)
	}
	sort.Ints(layers)
	for _, l := range layers {
		lm := byLayer[l]
		ls := LayerStats{Layer: l, Modules: len(lm), BA: aggOf(lm, func(m *Module) (float64, bool) { return m.NormBA, true })}
		if a.rc != nil {
			d := aggOf(lm, deltaBA)
			ls.DeltaBA = &d
		}
		rep.Layers = append(rep.Layers, ls)
	}

	if a.rc != nil {
		d := &DriftSummary{
			DeltaA: aggOf(mods, func(m *Module) (float64, bool) {
				return driftField(m, func(d *ModuleDrift) float64 { return d.DeltaA })
			}),
			DeltaB: aggOf(mods, func(m *Module) (float64, bool) {
				return driftField(m, func(d *ModuleDrift) float64 { return d.DeltaB })
			}),
			DeltaBA: aggOf(mods, deltaBA),
		}
		for _, m := range mods {
			if m.Drift != nil {
				d.Compared++
				if m.Drift.Frozen {
					d.Frozen++
				}
			}
		}
		rel := aggOf(mods, func(m *Module) (float64, bool) {
			if m.Drift == nil || m.Drift.RelChange == nil {
				return 0, false
			}
			return *m.Drift.RelChange, true
		})
		if rel.MaxModule != "" {
			d.RelChange = &rel
		}
		if a.rc.trainer != nil {
			d.RefStep = a.rc.trainer.GlobalStep
		}
		rep.Drift = d
	}
}

func driftField(m *Module, f func(*ModuleDrift) float64) (float64, bool) {
	if m.Drift == nil {
		return 0, false
	}
	return f(m.Drift), true
}

// aggOf aggregates val over the modules for which it is defined.
func aggOf(mods []Module, val func(*Module) (float64, bool)) Agg {
	var w stats.Running
	var g Agg
	first := true
	for i := range mods {
		v, ok := val(&mods[i])
		if !ok || !finite(v) {
			continue
		}
		w.Add(v)
		if first || v > g.Max {
			g.Max, g.MaxModule, first = v, mods[i].Name, false
		}
	}
	g.Mean, g.Std = w.Mean, w.Std()
	return g
}

// Recommendations, by issue code.
var recommendations = map[string]string{
	"non_finite":                       "the adapter is broken from this save on: resume from an earlier checkpoint with a lower learning_rate or max_grad_norm, and check the rewards for NaN",
	"norm_outlier":                     "one module's update is out of scale with its peers: lower the learning_rate or max_grad_norm, keep the rewards bounded, and compare with an earlier checkpoint (--ref) to see when it started",
	"untrained":                        "these modules never moved: check target_modules, that their layers are used in the forward pass, and that training ran past step 0",
	"frozen":                           "no gradient reaches these modules: check that they are trainable and used in the forward pass, and that the two checkpoints are different steps",
	"unchanged":                        "the two checkpoints hold the same weights: the same step was saved twice, or training did not update the adapter (learning_rate 0, every reward equal)",
	"drift_outlier":                    "these modules moved far more than their peers since the reference: look at the KL and grad_norm over that interval and lower the learning_rate",
	"reference_mismatch":               "compare checkpoints of the same run (same target_modules and model)",
	"reference_config":                 "the reference was trained with other LoRA settings: drift mixes the change of settings with training",
	"config_mismatch":                  "adapter_config.json does not describe these tensors: rewrite it from the run config, or PEFT will load the adapter wrongly",
	"no_config":                        "save adapter_config.json beside the weights: PEFT needs it to load the adapter",
	"malformed_module":                 "the adapter file is damaged or was written by other code: re-save it from a good checkpoint",
	"trainer_state":                    "resume from another checkpoint, or start a new run from this adapter (for another tool's checkpoint: re-save trainer_state.json from the run)",
	"nonfinite_metrics":                "the run was already broken at this save: resume from an earlier checkpoint",
	"learning_rate":                    "set learning_rate to a usual LoRA value (1e-6 to 1e-4) in the run config",
	"optimizer_unreadable":             "resume with a fresh optimizer state (the moments restart from zero) or from an earlier checkpoint",
	"optimizer_step":                   "resume from a checkpoint whose files were written together, or reset the optimizer",
	"optimizer_hyperparameters":        "check the optimizer settings of the run config (betas in [0, 1), eps > 0)",
	"optimizer_missing_moments":        "the optimizer state does not cover every trainable tensor: those tensors will restart their moments from zero when resuming",
	"optimizer_extra":                  "the optimizer state holds tensors of another adapter: resume with the adapter it was saved with",
	"optimizer_nonfinite":              "the optimizer state is broken: resume with a fresh optimizer or from an earlier checkpoint",
	"optimizer_negative_second_moment": "exp_avg_sq can never be negative: the optimizer file is corrupt; resume with a fresh optimizer",
	"optimizer_empty":                  "the optimizer moments are all zero although steps were taken: the state was not saved properly",
}

// headlines start the message of the issues that list modules.
var headlines = map[string]string{
	"non_finite":                       "non-finite values (NaN/Inf) in %d module(s)",
	"norm_outlier":                     "%d module(s) with a norm over " + strconv.Itoa(OutlierFactor) + "× their kind's median",
	"untrained":                        "%d module(s) whose B is all zero",
	"frozen":                           "%d module(s) identical to the reference",
	"drift_outlier":                    "%d module(s) that moved over " + strconv.Itoa(OutlierFactor) + "× their kind's median since the reference",
	"reference_mismatch":               "%d module(s) that cannot be compared with the reference",
	"reference_config":                 "%d module(s) with another rank in the reference",
	"config_mismatch":                  "%d module(s) disagree with adapter_config.json",
	"optimizer_missing_moments":        "%d module(s) without their optimizer moments",
	"optimizer_nonfinite":              "non-finite optimizer moments in %d module(s)",
	"optimizer_negative_second_moment": "negative exp_avg_sq in %d module(s)",
}

// issueSet collects issues, one per code.
type issueSet struct {
	order   []string
	byCode  map[string]*issueAcc
	modules map[string]map[string]string // module → code → severity
}

type issueAcc struct {
	code     string
	severity string
	global   []string
	modules  []string
	details  []string
}

func newIssues() *issueSet {
	return &issueSet{byCode: map[string]*issueAcc{}, modules: map[string]map[string]string{}}
}

var severityRank = map[string]int{events.Info: 1, events.Warning: 2, events.Critical: 3}

func (s *issueSet) acc(code, severity string) *issueAcc {
	a := s.byCode[code]
	if a == nil {
		a = &issueAcc{code: code, severity: severity}
		s.byCode[code] = a
		s.order = append(s.order, code)
	}
	if severityRank[severity] > severityRank[a.severity] {
		a.severity = severity
	}
	return a
}

func (s *issueSet) global(code, severity, msg string) {
	a := s.acc(code, severity)
	a.global = append(a.global, msg)
}

func (s *issueSet) module(code, severity, module, detail string) {
	a := s.acc(code, severity)
	a.modules = append(a.modules, module)
	if s.modules[module] == nil {
		s.modules[module] = map[string]string{}
	}
	s.modules[module][code] = severity
	if detail != "" {
		module += " (" + detail + ")"
	}
	a.details = append(a.details, module)
}

func (s *issueSet) codesFor(module string) []string {
	var out []string
	for c := range s.modules[module] {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func (s *issueSet) moduleSeverity() map[string]int {
	out := map[string]int{}
	for m, codes := range s.modules {
		for _, sev := range codes {
			out[m] = max(out[m], severityRank[sev])
		}
	}
	return out
}

// list renders the issues, most severe first, then in the order found.
func (s *issueSet) list() []Issue {
	out := []Issue{}
	for _, code := range s.order {
		a := s.byCode[code]
		var parts []string
		parts = append(parts, a.global...)
		if len(a.modules) > 0 {
			d := a.details
			if len(d) > 5 {
				d = append(append([]string(nil), d[:5]...), fmt.Sprintf("and %d more", len(a.details)-5))
			}
			h := headlines[code]
			if h == "" {
				h = code + " in %d module(s)"
			}
			parts = append(parts, fmt.Sprintf(h, len(a.modules))+": "+strings.Join(d, ", "))
		}
		out = append(out, Issue{Code: code, Severity: a.severity, Message: strings.Join(parts, "; "),
			Recommendation: recommendations[code], Modules: a.modules})
	}
	sort.SliceStable(out, func(i, j int) bool { return severityRank[out[i].Severity] > severityRank[out[j].Severity] })
	return out
}
