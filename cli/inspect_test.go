package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/safetensors"
)

// writeInspectFixture writes a small llama-shaped checkpoint as the engine saves one: 3 layers ×
// (q_proj, v_proj, up_proj, down_proj), r 4, alpha 8, with the optimizer and trainer state.
// keep names modules copied unchanged from base (a frozen module when base is the reference).
func writeInspectFixture(t *testing.T, dir string, seed uint64, step int, base map[string][]float32, keep ...string) map[string][]float32 {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 3))
	const hidden, inter, rank = 16, 24, 4
	var ts, opt []safetensors.Tensor
	values := map[string][]float32{}
	for l := 0; l < 3; l++ {
		for _, k := range []string{"self_attn.q_proj", "self_attn.v_proj", "mlp.up_proj", "mlp.down_proj"} {
			in, out := hidden, hidden
			if k == "mlp.up_proj" {
				out = inter
			}
			if k == "mlp.down_proj" {
				in = inter
			}
			mod := fmt.Sprintf("base_model.model.model.layers.%d.%s", l, k)
			for _, f := range []struct {
				suffix string
				shape  []int
				sd     float64
			}{{".lora_A.weight", []int{rank, in}, 0.2}, {".lora_B.weight", []int{out, rank}, 0.01}} {
				name := mod + f.suffix
				v := make([]float32, f.shape[0]*f.shape[1])
				for i := range v {
					v[i] = float32(f.sd * r.NormFloat64())
				}
				for _, kp := range keep {
					if strings.Contains(mod, kp) {
						v = append([]float32(nil), base[name]...)
					}
				}
				values[name] = v
				m, v2 := make([]float32, len(v)), make([]float32, len(v))
				for i := range m {
					m[i], v2[i] = float32(1e-4*r.NormFloat64()), float32(1e-8*r.Float64())
				}
				ts = append(ts, safetensors.F32Tensor(name, f.shape, v))
				opt = append(opt, safetensors.F32Tensor(name+".exp_avg", f.shape, m), safetensors.F32Tensor(name+".exp_avg_sq", f.shape, v2))
			}
		}
	}
	cfg := `{"peft_type": "LORA", "base_model_name_or_path": "builtin", "r": 4, "lora_alpha": 8, "use_rslora": false, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"], "lora_dropout": 0.05, "bias": "none", "task_type": "CAUSAL_LM"}`
	state := fmt.Sprintf(`{"global_step": %d, "learning_rate": 1e-05, "data_cursor": %d, "rng_state": "pcg:%d", "config_hash": "sha256:5d41402abc4b", "metrics": {"loss": 0.41, "reward": 0.62, "kl": 0.021}}`, step, 8*step, seed)
	meta := map[string]string{"step": fmt.Sprint(step), "learning_rate": "1e-05", "beta1": "0.9", "beta2": "0.999", "eps": "1e-08", "weight_decay": "0"}
	for _, err := range []error{
		os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644),
		os.WriteFile(filepath.Join(dir, "trainer_state.json"), []byte(state), 0o644),
		safetensors.Write(filepath.Join(dir, "adapter_model.safetensors"), ts, map[string]string{"format": "pt"}),
		safetensors.Write(filepath.Join(dir, "optimizer.safetensors"), opt, meta),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return values
}

func TestInspectCommand(t *testing.T) {
	root := t.TempDir()
	ref := filepath.Join(root, "checkpoints", "step-000100")
	ck := filepath.Join(root, "checkpoints", "step-000200")
	base := writeInspectFixture(t, ref, 1, 100, nil)
	writeInspectFixture(t, ck, 2, 200, base, "layers.1.self_attn.v_proj")

	code, out, errs := runCaptured(t, "inspect", ck, "--ref", ref, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var doc struct {
		Path      string  `json:"path"`
		Reference string  `json:"reference"`
		Score     float64 `json:"score"`
		Step      int     `json:"step"`
		StepFrom  string  `json:"step_from"`
		Adapter   struct {
			R       int     `json:"r"`
			Alpha   float64 `json:"lora_alpha"`
			Scale   float64 `json:"scale"`
			Modules int     `json:"modules"`
		} `json:"adapter"`
		Norms struct {
			BA struct {
				Mean, Std, Max float64
				MaxModule      string `json:"max_module"`
			} `json:"norm_ba"`
		} `json:"norms"`
		Issues []struct {
			Code, Severity, Message, Recommendation string
			Modules                                 []string
		} `json:"issues"`
		Groups []struct {
			Name    string `json:"name"`
			Modules []struct {
				Name   string  `json:"name"`
				NormBA float64 `json:"norm_ba"`
				Drift  *struct {
					DeltaBA float64 `json:"delta_ba"`
					Frozen  bool    `json:"frozen"`
				} `json:"drift"`
			} `json:"modules"`
		} `json:"groups"`
		Layers    []map[string]any `json:"layers"`
		Drift     map[string]any   `json:"drift"`
		Optimizer map[string]any   `json:"optimizer"`
		Trainer   map[string]any   `json:"trainer_state"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("--json printed more than one document:\n%s", out)
	}
	if doc.Path != ck || doc.Reference != ref || doc.Step != 200 || doc.StepFrom != "trainer_state" ||
		doc.Adapter.R != 4 || doc.Adapter.Alpha != 8 || doc.Adapter.Scale != 2 || doc.Adapter.Modules != 12 ||
		doc.Norms.BA.Max <= 0 || doc.Norms.BA.MaxModule == "" || len(doc.Layers) != 3 ||
		doc.Drift["compared"] != 12.0 || doc.Drift["frozen"] != 1.0 || doc.Optimizer["step"] != 200.0 || doc.Trainer["global_step"] != 200.0 {
		t.Fatalf("document: %+v", doc)
	}
	if len(doc.Issues) != 1 || doc.Issues[0].Code != "frozen" || doc.Issues[0].Severity != "warning" ||
		doc.Issues[0].Modules[0] != "model.layers.1.self_attn.v_proj" || doc.Issues[0].Recommendation == "" || doc.Score != 0.85 {
		t.Fatalf("issues (score %v): %+v", doc.Score, doc.Issues)
	}
	if len(doc.Groups) != 2 || doc.Groups[0].Name != "attention" || doc.Groups[0].Modules[0].Name != "model.layers.1.self_attn.v_proj" ||
		doc.Groups[0].Modules[0].Drift == nil || !doc.Groups[0].Modules[0].Drift.Frozen {
		t.Fatalf("groups: the frozen module should lead the attention table: %+v", doc.Groups)
	}

	// The readable report.
	code, out, errs = runCaptured(t, "inspect", ck, "--ref", ref)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"health 0.85 (1 issue(s): 1 warning)", "WARNING   frozen: 1 module(s) identical to the reference",
		"→ no gradient reaches", "attention · 6 modules, worst first", "mlp · 6 modules", "layers.1.self_attn.v_proj", "optimizer  step 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if os.Getenv("RLHFSTATION_INSPECT_EXAMPLE") != "" {
		// Regenerates the README example: the fixture printed with folder names as in a run.
		_, js, _ := runCaptured(t, "inspect", ck, "--ref", ref, "--json")
		js = strings.ReplaceAll(js, root+"/", "runs/20260101-120000-math/")
		if err := os.WriteFile(os.Getenv("RLHFSTATION_INSPECT_EXAMPLE"), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInspectUsageAndErrors(t *testing.T) {
	if code, _, errs := runCaptured(t, "inspect"); code != exitUsage || !strings.Contains(errs, "one checkpoint folder") {
		t.Fatalf("no argument: exit %d, %q", code, errs)
	}
	if code, _, _ := runCaptured(t, "inspect", "-h"); code != exitOK {
		t.Fatalf("-h: exit %d", code)
	}
	missing := filepath.Join(t.TempDir(), "step-000300")
	if code, _, errs := runCaptured(t, "inspect", missing, "--json"); code != exitFailed || !strings.Contains(errs, missing) {
		t.Fatalf("missing checkpoint: exit %d, %q", code, errs)
	}
}

// The TUI's inspector names the command that shows the rows it leaves out, not a flag.
func TestInspectorPointsToTheCommandForAllRows(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "checkpoints", "step-000010")
	writeInspectFixture(t, ck, 5, 10, nil)
	defer func(n int) { inspectorTop = n }(inspectorTop)
	inspectorTop = 2
	report, _, err := inspectCheckpoint(ck, "")
	if err != nil {
		t.Fatal(err)
	}
	text := report(0)
	want := "more (all of them: rlhfstation inspect " + ck + " --top 0)"
	if !strings.Contains(text, want) || strings.Contains(text, "(--top 0 shows all)") {
		t.Fatalf("inspector text does not point to the command:\n%s", text)
	}
	_, out, _ := runCaptured(t, "inspect", ck, "--top", "2")
	if !strings.Contains(out, "more (--top 0 shows all)") {
		t.Fatalf("inspect --top 2 does not name its flag:\n%s", out)
	}
}
