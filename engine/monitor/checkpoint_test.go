package monitor

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/safetensors"
)

// brute forms s·B·A ([out, in]) explicitly.
func brute(f *loraFactor) []float64 {
	m := make([]float64, f.Out*f.In)
	for o := 0; o < f.Out; o++ {
		for i := 0; i < f.In; i++ {
			var s float64
			for k := 0; k < f.R; k++ {
				s += float64(f.B[o*f.R+k]) * float64(f.A[k*f.In+i])
			}
			m[o*f.In+i] = f.Scale * s
		}
	}
	return m
}

func randFactor(r *rand.Rand, rank, in, out int, scale float64) *loraFactor {
	f := &loraFactor{A: make([]float32, rank*in), B: make([]float32, out*rank), R: rank, In: in, Out: out, Scale: scale}
	for i := range f.A {
		f.A[i] = float32(r.NormFloat64())
	}
	for i := range f.B {
		f.B[i] = float32(r.NormFloat64())
	}
	return f
}

func TestProductNormsMatchBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for trial := 0; trial < 20; trial++ {
		in, out := 1+r.IntN(9), 1+r.IntN(9)
		f1 := randFactor(r, 1+r.IntN(4), in, out, 0.5+r.Float64()*3)
		f0 := randFactor(r, 1+r.IntN(4), in, out, 0.5+r.Float64()*3)
		m1, m0 := brute(f1), brute(f0)
		var n1, d float64
		for i := range m1 {
			n1 += m1[i] * m1[i]
			d += (m1[i] - m0[i]) * (m1[i] - m0[i])
		}
		if got, want := updateNorm(f1), math.Sqrt(n1); !near(got, want, 1e-12) {
			t.Fatalf("trial %d: ‖sBA‖ %v, brute force %v", trial, got, want)
		}
		if got, want := updateDiffNorm(f1, f0), math.Sqrt(d); !near(got, want, 1e-9) {
			t.Fatalf("trial %d (r %d vs %d): ‖s1B1A1 − s0B0A0‖ %v, brute force %v", trial, f1.R, f0.R, got, want)
		}
		if got := updateDiffNorm(f1, f1); got != 0 {
			t.Fatalf("identical factors should differ by exactly 0, got %v", got)
		}
	}
	if loraScale(32, 16, false) != 2 || loraScale(32, 16, true) != 8 {
		t.Fatal("PEFT scaling: alpha/r = 2 and alpha/√r = 8 for alpha 32, r 16")
	}
}

// fakeCheckpoint is a small llama-shaped adapter: layers × (q, k, v, o, gate, up, down).
type fakeCheckpoint struct {
	hidden, inter, rank, layers int
	alpha                       float64
	tensors                     map[string][]float32
	shapes                      map[string][]int
	step                        int
}

var llamaKinds = []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}

func newFake(seed uint64) *fakeCheckpoint {
	f := &fakeCheckpoint{hidden: 16, inter: 24, rank: 4, layers: 4, alpha: 8, step: 200,
		tensors: map[string][]float32{}, shapes: map[string][]int{}}
	r := rand.New(rand.NewPCG(seed, 1))
	for l := 0; l < f.layers; l++ {
		for _, k := range llamaKinds {
			in, out := f.hidden, f.hidden
			switch k {
			case "mlp.gate_proj", "mlp.up_proj":
				out = f.inter
			case "mlp.down_proj":
				in = f.inter
			}
			base := fmt.Sprintf("%smodel.layers.%d.%s", peftPrefix, l, k)
			a := make([]float32, f.rank*in)
			bound := 1 / math.Sqrt(float64(in))
			for i := range a {
				a[i] = float32((2*r.Float64() - 1) * bound)
			}
			b := make([]float32, out*f.rank)
			for i := range b {
				b[i] = float32(0.01 * r.NormFloat64())
			}
			f.tensors[base+".lora_A.weight"], f.shapes[base+".lora_A.weight"] = a, []int{f.rank, in}
			f.tensors[base+".lora_B.weight"], f.shapes[base+".lora_B.weight"] = b, []int{out, f.rank}
		}
	}
	return f
}

func (f *fakeCheckpoint) module(layer int, kind string) string {
	return fmt.Sprintf("%smodel.layers.%d.%s", peftPrefix, layer, kind)
}

// clone copies the tensors, so that a reference and a checkpoint can differ.
func (f *fakeCheckpoint) clone() *fakeCheckpoint {
	g := *f
	g.tensors = map[string][]float32{}
	for k, v := range f.tensors {
		g.tensors[k] = append([]float32(nil), v...)
	}
	return &g
}

// write stores the folder: adapter_config.json and adapter_model.safetensors always, the
// optimizer and trainer state when full.
func (f *fakeCheckpoint) write(t *testing.T, dir string, full bool, optMeta map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"peft_type": "LORA", "base_model_name_or_path": "tiny", "r": %d, "lora_alpha": %g, "use_rslora": false,
		"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "lora_dropout": 0.05, "bias": "none", "task_type": "CAUSAL_LM"}`, f.rank, f.alpha)
	if err := os.WriteFile(filepath.Join(dir, checkpoint.AdapterConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var ts, opt []safetensors.Tensor
	r := rand.New(rand.NewPCG(77, 1))
	for name, v := range f.tensors {
		ts = append(ts, safetensors.F32Tensor(name, f.shapes[name], v))
		m, v2 := make([]float32, len(v)), make([]float32, len(v))
		for i := range m {
			m[i] = float32(1e-4 * r.NormFloat64())
			v2[i] = float32(1e-8 * r.Float64())
		}
		opt = append(opt, safetensors.F32Tensor(name+".exp_avg", f.shapes[name], m), safetensors.F32Tensor(name+".exp_avg_sq", f.shapes[name], v2))
	}
	if err := safetensors.Write(filepath.Join(dir, checkpoint.AdapterWeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if !full {
		return dir
	}
	meta := map[string]string{"step": fmt.Sprint(f.step), "learning_rate": "1e-05", "beta1": "0.9", "beta2": "0.999", "eps": "1e-08", "weight_decay": "0"}
	for k, v := range optMeta {
		meta[k] = v
	}
	if err := safetensors.Write(filepath.Join(dir, checkpoint.OptimizerFile), opt, meta); err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"global_step": %d, "learning_rate": 1e-05, "data_cursor": %d, "rng_state": "pcg:1:2", "config_hash": "sha256:abc", "metrics": {"loss": 0.41, "reward": 0.62, "kl": 0.02}}`, f.step, 8*f.step)
	if err := os.WriteFile(filepath.Join(dir, checkpoint.TrainerStateFile), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func analyze(t *testing.T, dir, ref string) *Report {
	t.Helper()
	rep, err := Analyze(dir, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report must encode as JSON: %v", err)
	}
	var sb strings.Builder
	if err := rep.WriteText(&sb, 0, ""); err != nil {
		t.Fatal(err)
	}
	return rep
}

func issue(rep *Report, code string) *Issue {
	for i := range rep.Issues {
		if rep.Issues[i].Code == code {
			return &rep.Issues[i]
		}
	}
	return nil
}

func codes(rep *Report) string {
	var c []string
	for _, is := range rep.Issues {
		c = append(c, is.Severity+":"+is.Code+" "+is.Message)
	}
	return strings.Join(c, "\n  ")
}

func TestHealthyCheckpoint(t *testing.T) {
	dir := newFake(1).write(t, filepath.Join(t.TempDir(), "step-000200"), true, nil)
	rep := analyze(t, dir, "")
	if rep.Score != 1 || len(rep.Issues) != 0 {
		t.Fatalf("healthy checkpoint: score %v, issues:\n  %s", rep.Score, codes(rep))
	}
	if rep.Step != 200 || rep.StepFrom != "trainer_state" || rep.Adapter.Modules != 28 || rep.Adapter.Scale != 2 ||
		rep.Optimizer == nil || rep.Optimizer.Tensors != 2*2*28 || rep.Optimizer.LearningRate != 1e-5 || rep.Trainer == nil {
		t.Fatalf("report: %+v", rep)
	}
	if len(rep.Groups) != 2 || rep.Groups[0].Name != "attention" || len(rep.Groups[0].Modules) != 16 || len(rep.Groups[1].Modules) != 12 || len(rep.Layers) != 4 {
		t.Fatalf("groups/layers: %d groups, %d layers", len(rep.Groups), len(rep.Layers))
	}
	// The module table's ‖s·B·A‖ is the brute-force norm.
	f := newFake(1)
	name := f.module(2, "mlp.down_proj")
	lf := &loraFactor{A: f.tensors[name+".lora_A.weight"], B: f.tensors[name+".lora_B.weight"], R: 4, In: 24, Out: 16, Scale: 2}
	var n2 float64
	for _, x := range brute(lf) {
		n2 += x * x
	}
	for _, g := range rep.Groups {
		for _, m := range g.Modules {
			if m.Name == "model.layers.2.mlp.down_proj" {
				if !near(m.NormBA, math.Sqrt(n2), 1e-12) || m.In != 24 || m.Out != 16 || m.Layer != 2 || m.Kind != "down_proj" {
					t.Fatalf("module: %+v, brute ‖sBA‖ %v", m, math.Sqrt(n2))
				}
				return
			}
		}
	}
	t.Fatal("module model.layers.2.mlp.down_proj not in the report")
}

func TestBareAdapterFolder(t *testing.T) {
	dir := newFake(1).write(t, t.TempDir(), false, nil)
	rep := analyze(t, filepath.Join(dir, checkpoint.AdapterWeightsFile), "") // the file names its folder too
	if rep.Score != 1 || rep.Optimizer != nil || rep.Trainer != nil || rep.StepFrom != "" {
		t.Fatalf("bare adapter: score %v, issues:\n  %s", rep.Score, codes(rep))
	}
}

func TestBlownUpModule(t *testing.T) {
	f := newFake(1)
	bad := f.module(1, "mlp.down_proj")
	for i := range f.tensors[bad+".lora_B.weight"] {
		f.tensors[bad+".lora_B.weight"][i] *= 100
	}
	rep := analyze(t, f.write(t, t.TempDir(), true, nil), "")
	is := issue(rep, "norm_outlier")
	if is == nil || rep.Score >= 1 || len(is.Modules) != 1 || is.Modules[0] != "model.layers.1.mlp.down_proj" || is.Severity != "warning" {
		t.Fatalf("blown-up module: score %v, issues:\n  %s", rep.Score, codes(rep))
	}
	if !strings.Contains(is.Message, "‖s·B·A‖") || is.Recommendation == "" {
		t.Fatalf("issue: %+v", is)
	}
	mlp := rep.Groups[1]
	if mlp.Name != "mlp" || mlp.Modules[0].Name != "model.layers.1.mlp.down_proj" || rep.Norms.BA.MaxModule != "model.layers.1.mlp.down_proj" {
		t.Fatalf("the blown-up module should come first: %s", mlp.Modules[0].Name)
	}
}

func TestNaNModule(t *testing.T) {
	f := newFake(1)
	bad := f.module(3, "self_attn.v_proj")
	f.tensors[bad+".lora_B.weight"][5] = float32(math.NaN())
	f.tensors[bad+".lora_A.weight"][0] = float32(math.Inf(1))
	rep := analyze(t, f.write(t, t.TempDir(), true, nil), "")
	is := issue(rep, "non_finite")
	if is == nil || is.Severity != "critical" || len(is.Modules) != 1 || is.Modules[0] != "model.layers.3.self_attn.v_proj" ||
		rep.Score > 0.5 || rep.Norms.NonFinite != 2 || rep.Issues[0].Code != "non_finite" {
		t.Fatalf("NaN module: score %v, non-finite %d, issues:\n  %s", rep.Score, rep.Norms.NonFinite, codes(rep))
	}
	if !strings.Contains(is.Message, "1 in A, 1 in B") {
		t.Fatalf("message: %s", is.Message)
	}
}

func TestFrozenModuleAgainstReference(t *testing.T) {
	ref := newFake(1)
	ck := newFake(2) // every module different…
	frozen := ref.module(0, "self_attn.k_proj")
	for _, s := range []string{".lora_A.weight", ".lora_B.weight"} { // …but this one
		ck.tensors[frozen+s] = append([]float32(nil), ref.tensors[frozen+s]...)
	}
	root := t.TempDir()
	refDir := ref.write(t, filepath.Join(root, "step-000100"), true, nil)
	ckDir := ck.write(t, filepath.Join(root, "step-000200"), true, nil)
	rep := analyze(t, ckDir, refDir)
	is := issue(rep, "frozen")
	if is == nil || len(is.Modules) != 1 || is.Modules[0] != "model.layers.0.self_attn.k_proj" || rep.Score >= 1 {
		t.Fatalf("frozen module: score %v, issues:\n  %s", rep.Score, codes(rep))
	}
	if rep.Drift == nil || rep.Drift.Compared != 28 || rep.Drift.Frozen != 1 {
		t.Fatalf("drift: %+v", rep.Drift)
	}
	// Identical checkpoints: one "unchanged" issue, no per-module list.
	rep = analyze(t, refDir, refDir)
	if issue(rep, "unchanged") == nil || issue(rep, "frozen") != nil || rep.Drift.DeltaBA.Max != 0 {
		t.Fatalf("identical checkpoints: issues:\n  %s", codes(rep))
	}
}

func TestDriftNumbers(t *testing.T) {
	ref := newFake(1)
	ck := ref.clone()
	name := ref.module(2, "mlp.up_proj")
	for i := range ck.tensors[name+".lora_B.weight"] {
		ck.tensors[name+".lora_B.weight"][i] *= 3 // the update triples: rel change +200%
	}
	for _, other := range []string{ref.module(0, "mlp.up_proj"), ref.module(1, "mlp.up_proj"), ref.module(3, "mlp.up_proj")} {
		for i := range ck.tensors[other+".lora_B.weight"] {
			ck.tensors[other+".lora_B.weight"][i] *= 1.1
		}
	}
	root := t.TempDir()
	rep := analyze(t, ck.write(t, filepath.Join(root, "b"), false, nil), ref.write(t, filepath.Join(root, "a"), false, nil))
	var m *Module
	for _, g := range rep.Groups {
		for i := range g.Modules {
			if g.Modules[i].Name == "model.layers.2.mlp.up_proj" {
				m = &g.Modules[i]
			}
		}
	}
	if m == nil || m.Drift == nil || m.Drift.RelChange == nil || !near(*m.Drift.RelChange, 2, 1e-6) ||
		!near(m.Drift.DeltaBA, 2*m.Drift.RefNormBA, 1e-6) || m.Drift.DeltaA != 0 || !near(m.Drift.DeltaB, 2*m.NormB/3, 1e-6) {
		t.Fatalf("drift of a module whose B tripled: %+v %+v", m, m.Drift)
	}
	// 24 frozen modules of 28 get one issue listing them; the tripled one moved 20× its peers.
	if is := issue(rep, "frozen"); is == nil || len(is.Modules) != 24 {
		t.Fatalf("issues:\n  %s", codes(rep))
	}
	if is := issue(rep, "drift_outlier"); is == nil || len(is.Modules) != 1 || is.Modules[0] != "model.layers.2.mlp.up_proj" {
		t.Fatalf("issues:\n  %s", codes(rep))
	}
}

func TestOptimizerChecks(t *testing.T) {
	f := newFake(1)
	dir := f.write(t, t.TempDir(), true, map[string]string{"step": "150", "learning_rate": "0.5"})
	rep := analyze(t, dir, "")
	if issue(rep, "optimizer_step") == nil || issue(rep, "learning_rate") == nil || issue(rep, "learning_rate").Severity != "warning" {
		t.Fatalf("step mismatch and lr 0.5: issues:\n  %s", codes(rep))
	}

	// A corrupt second moment: negative and NaN values.
	name := f.module(0, "self_attn.q_proj") + ".lora_A.weight"
	opt, err := safetensors.Open(filepath.Join(dir, checkpoint.OptimizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, n := range opt.Names() {
		v, shape, _ := opt.Float32(n)
		if n == name+".exp_avg_sq" {
			v[0], v[1] = -1e-6, float32(math.NaN())
		}
		ts = append(ts, safetensors.F32Tensor(n, shape, v))
	}
	meta := opt.Metadata
	opt.Close()
	meta["step"], meta["learning_rate"] = "200", "1e-5"
	if err := safetensors.Write(filepath.Join(dir, checkpoint.OptimizerFile), ts, meta); err != nil {
		t.Fatal(err)
	}
	rep = analyze(t, dir, "")
	if issue(rep, "optimizer_negative_second_moment") == nil || issue(rep, "optimizer_nonfinite") == nil ||
		rep.Optimizer.Negative != 1 || rep.Optimizer.NonFinite != 1 || rep.Score > 0.25 || issue(rep, "optimizer_step") != nil {
		t.Fatalf("corrupt moments: score %v, issues:\n  %s", rep.Score, codes(rep))
	}
}

func TestUntrainedAndConfig(t *testing.T) {
	f := newFake(1)
	for name, v := range f.tensors {
		if strings.HasSuffix(name, "lora_B.weight") {
			clear(v)
		}
	}
	rep := analyze(t, f.write(t, t.TempDir(), true, nil), "")
	if is := issue(rep, "untrained"); is == nil || is.Severity != "warning" || rep.Norms.ZeroB != 28 {
		t.Fatalf("B zero at step 200: issues:\n  %s", codes(rep))
	}
	rep = analyze(t, f.write(t, t.TempDir(), false, nil), "")
	if is := issue(rep, "untrained"); is == nil || is.Severity != "info" {
		t.Fatalf("B zero, no step (fresh adapter): issues:\n  %s", codes(rep))
	}

	// rank_pattern, alpha_pattern and rslora.
	dir := newFake(1).write(t, t.TempDir(), false, nil)
	cfg := `{"r": 8, "lora_alpha": 16, "use_rslora": true, "rank_pattern": {"q_proj": 4, "k_proj": 4, "v_proj": 4, "o_proj": 4, "gate_proj": 4, "up_proj": 4, "layers.3.mlp.down_proj": 4}, "alpha_pattern": {"down_proj": 4}, "target_modules": "all-linear"}`
	os.WriteFile(filepath.Join(dir, checkpoint.AdapterConfigFile), []byte(cfg), 0o644)
	rep = analyze(t, dir, "")
	cm := issue(rep, "config_mismatch")
	if cm == nil || len(cm.Modules) != 3 || rep.Adapter.TargetModules[0] != "all-linear" || rep.Adapter.Scale != 16/math.Sqrt(8) {
		t.Fatalf("rank_pattern leaves down_proj of layers 0-2 at r 8 against 4 in the tensors: issues:\n  %s", codes(rep))
	}
	for _, g := range rep.Groups {
		for _, m := range g.Modules {
			want := 16 / 2.0 // alpha/√4
			if m.Kind == "down_proj" {
				want = 4 / 2.0
			}
			if m.Scale != want {
				t.Fatalf("%s: scale %v, want %v", m.Name, m.Scale, want)
			}
		}
	}
}

func TestAnalyzeErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := Analyze(filepath.Join(root, "nope"), ""); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing folder: %v", err)
	}
	if _, err := Analyze(root, ""); err == nil || !strings.Contains(err.Error(), checkpoint.AdapterWeightsFile) {
		t.Fatalf("empty folder: %v", err)
	}
	os.WriteFile(filepath.Join(root, "adapter_model.bin"), []byte("x"), 0o644)
	if _, err := Analyze(root, ""); err == nil || !strings.Contains(err.Error(), "safe_serialization") {
		t.Fatalf("pickle only: %v", err)
	}
	dir := newFake(1).write(t, filepath.Join(root, "ck"), false, nil)
	os.WriteFile(filepath.Join(dir, checkpoint.AdapterConfigFile), []byte(`{"r": 4, "lora_alpha": }`), 0o644)
	if _, err := Analyze(dir, ""); err == nil || !strings.Contains(err.Error(), checkpoint.AdapterConfigFile) {
		t.Fatalf("bad config: %v", err)
	}
	good := newFake(1).write(t, filepath.Join(root, "good"), false, nil)
	if _, err := Analyze(good, filepath.Join(root, "missing")); err == nil || !strings.HasPrefix(err.Error(), "reference:") {
		t.Fatalf("missing reference: %v", err)
	}
	os.WriteFile(filepath.Join(good, checkpoint.TrainerStateFile), []byte(`{"global_step": "x"}`), 0o644)
	rep := analyze(t, good, "")
	if is := issue(rep, "trainer_state"); is == nil || is.Severity != "critical" || !strings.Contains(is.Message, checkpoint.TrainerStateFile) {
		t.Fatalf("unreadable trainer state is an issue, not an error: %s", codes(rep))
	}
}

func TestModuleNames(t *testing.T) {
	cases := []struct {
		path, group, kind string
		layer             int
	}{
		{"model.layers.12.self_attn.q_proj", "attention", "q_proj", 12},
		{"model.layers.0.mlp.down_proj", "mlp", "down_proj", 0},
		{"transformer.h.3.attn.c_attn", "attention", "c_attn", 3},
		{"transformer.h.3.attn.c_proj", "attention", "c_proj", 3},
		{"transformer.h.3.mlp.c_proj", "mlp", "c_proj", 3},
		{"lm_head", "other", "lm_head", -1},
	}
	for _, c := range cases {
		g, k, l := moduleName(c.path)
		if g != c.group || k != c.kind || l != c.layer {
			t.Errorf("%s: %s %s %d", c.path, g, k, l)
		}
	}
	mod, factor, ok := splitLoRAName("base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight")
	if !ok || mod != "model.layers.0.self_attn.q_proj" || factor != "B" {
		t.Fatalf("split: %q %q %v", mod, factor, ok)
	}
	if !naturalLess("model.layers.2.mlp", "model.layers.10.mlp") {
		t.Fatal("layers should sort by number")
	}
}

// BenchmarkUpdateNorms: ‖s·B·A‖ and ‖Δ(s·B·A)‖ of one llama-7B MLP module (r 16, 4096 → 11008).
func BenchmarkUpdateNorms(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	f1 := randFactor(r, 16, 4096, 11008, 2)
	f0 := randFactor(r, 16, 4096, 11008, 2)
	for b.Loop() {
		f1.selfSet, f0.selfSet = false, false
		updateNorm(f1)
		updateDiffNorm(f1, f0)
	}
}
