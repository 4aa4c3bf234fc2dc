package checkpoint

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"rlhfstation/engine/events"
)

func sample() Checkpoint {
	a := Tensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}}
	b := Tensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", Shape: []int{3, 2}, Data: []float32{0.5, 0, 0, 0.5, 1, 1}}
	return Checkpoint{
		Config:  AdapterConfig{R: 2, LoraAlpha: 4, TargetModules: []string{"q_proj"}, InitLoraWeights: true},
		Tensors: []Tensor{a, b},
		Optimizer: &Optimizer{Step: 7, LearningRate: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
			ExpAvg:   map[string][]float32{a.Name: {1, 1, 1, 1, 1, 1}, b.Name: {2, 2, 2, 2, 2, 2}},
			ExpAvgSq: map[string][]float32{a.Name: {3, 3, 3, 3, 3, 3}, b.Name: {4, 4, 4, 4, 4, 4}}},
		State: &TrainerState{GlobalStep: 7, LearningRate: 1e-5, DataCursor: 12, RNGState: "abc",
			ConfigHash: "h", Metrics: events.Metrics{"reward": 0.5, "kl": math.NaN()}},
	}
}

func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints", Name(7))
	c := sample()
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.R != 2 || got.Config.PeftType != "LORA" || got.Config.Scale() != 2 {
		t.Fatalf("config: %+v", got.Config)
	}
	if !reflect.DeepEqual(got.Tensors, c.Tensors) {
		t.Fatalf("tensors: %+v", got.Tensors)
	}
	if got.Optimizer.Step != 7 || got.Optimizer.Beta2 != 0.999 || !reflect.DeepEqual(got.Optimizer.ExpAvgSq, c.Optimizer.ExpAvgSq) {
		t.Fatalf("optimizer: %+v", got.Optimizer)
	}
	if got.State.DataCursor != 12 || got.State.RNGState != "abc" || !math.IsNaN(got.State.Metrics["kl"]) {
		t.Fatalf("state: %+v", got.State)
	}
	// Saving again at the same step replaces the folder whole.
	c.State.DataCursor = 13
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := Load(dir); got.State.DataCursor != 13 {
		t.Fatal("re-save did not replace")
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 1 {
		t.Fatalf("leftovers beside the checkpoint: %v", ents)
	}
}

func TestRSLoRAScale(t *testing.T) {
	if s := (AdapterConfig{R: 16, LoraAlpha: 32, UseRSLoRA: true}).Scale(); s != 8 {
		t.Fatalf("alpha/sqrt(r) = %g", s)
	}
}

func TestListAndPrune(t *testing.T) {
	root := t.TempDir()
	for _, s := range []int{100, 20, 300} {
		if err := Save(filepath.Join(root, Name(s)), sample()); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(root, ".step-000400.tmp-123"), 0o755) // an interrupted save
	list, _ := List(root)
	if len(list) != 3 || list[0].Step != 20 || list[2].Step != 300 {
		t.Fatalf("list: %+v", list)
	}
	if err := Prune(root, 1, filepath.Join(root, Name(20))); err != nil {
		t.Fatal(err)
	}
	list, _ = List(root)
	if len(list) != 2 || list[0].Step != 20 || list[1].Step != 300 {
		t.Fatalf("after prune (keep 1, protect 20): %+v", list)
	}
	if _, err := os.Stat(filepath.Join(root, ".step-000400.tmp-123")); !os.IsNotExist(err) {
		t.Fatal("leftover of an interrupted save not removed")
	}
	// A deletion killed half way leaves only a hidden folder: never listed, removed next time.
	half := filepath.Join(root, ".step-000010.del")
	os.Mkdir(half, 0o755)
	os.WriteFile(filepath.Join(half, OptimizerFile), []byte("x"), 0o644)
	if list, _ = List(root); len(list) != 2 {
		t.Fatalf("a half-deleted checkpoint is listed: %+v", list)
	}
	Prune(root, 0, "")
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Fatal("leftover of an interrupted deletion not removed")
	}
}

func TestBadCheckpoints(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a checkpoint") {
		t.Fatalf("empty folder: %v", err)
	}
	os.WriteFile(filepath.Join(dir, AdapterConfigFile), []byte(`{"peft_type":"LORA","r":0}`), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "r must be positive") {
		t.Fatalf("r=0: %v", err)
	}
	os.WriteFile(filepath.Join(dir, AdapterConfigFile), []byte(`{"peft_type":"LORA","r":2}`), 0o644)
	os.WriteFile(filepath.Join(dir, AdapterWeightsFile), []byte("short"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), AdapterWeightsFile) {
		t.Fatalf("truncated weights should name the file: %v", err)
	}
}

// Another tool's adapter_config.json reads: target_modules as one string, rank and alpha
// patterns; ours writes the patterns as {} as PEFT does.
func TestAdapterConfigOfOtherTools(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, AdapterConfigFile)
	os.WriteFile(p, []byte(`{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear",
		"rank_pattern": {"q_proj": 4}, "alpha_pattern": {"down_proj": 2}, "layers_to_transform": null}`), 0o644)
	c, err := ReadAdapterConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.TargetModules) != 1 || c.TargetModules[0] != "all-linear" || c.RankPattern["q_proj"] != 4 || c.AlphaPattern["down_proj"] != 2 || c.LoraAlpha != 16 {
		t.Fatalf("read %+v", c)
	}
	os.WriteFile(p, []byte(`{"r": 8, "target_modules": 3}`), 0o644)
	if _, err := ReadAdapterConfig(p); err == nil || !strings.Contains(err.Error(), "target_modules") || !strings.Contains(err.Error(), p) {
		t.Fatalf("a number as target_modules: %v", err)
	}
	if err := SaveAdapter(dir, AdapterConfig{R: 2, LoraAlpha: 4, TargetModules: []string{"q_proj"}}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), `"rank_pattern": {}`) || !strings.Contains(string(b), `"alpha_pattern": {}`) || !strings.Contains(string(b), `"target_modules": [`) {
		t.Fatalf("written config:\n%s", b)
	}
}
