// Package checkpoint reads and writes a run's checkpoints (DESIGN §9): a folder
// checkpoints/step-000100/ holding the LoRA adapter in PEFT's layout (adapter_config.json,
// adapter_model.safetensors, loadable by peft), the AdamW state (optimizer.safetensors) and
// the trainer state (trainer_state.json). A checkpoint is written into a temporary folder and
// renamed into place, so a crash never leaves a half one.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/safetensors"
)

// File names inside a checkpoint folder.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
	OptimizerFile      = "optimizer.safetensors"
	TrainerStateFile   = "trainer_state.json"
	// GenerationFile holds a generation batch still being served when the checkpoint was
	// taken (num_iterations > 1 or steps_per_generation > gradient_accumulation_steps), so
	// that a resume trains on it as the uninterrupted run would. Its format is the engine's.
	GenerationFile = "generation.json"
)

// AdapterConfig is PEFT's adapter_config.json for a LoRA adapter.
type AdapterConfig struct {
	PeftType          string             `json:"peft_type"` // "LORA"
	TaskType          string             `json:"task_type"` // "CAUSAL_LM"
	BaseModel         string             `json:"base_model_name_or_path"`
	R                 int                `json:"r"`
	LoraAlpha         float64            `json:"lora_alpha"`
	LoraDropout       float64            `json:"lora_dropout"`
	TargetModules     []string           `json:"target_modules"`
	Bias              string             `json:"bias"` // "none"
	UseRSLoRA         bool               `json:"use_rslora"`
	FanInFanOut       bool               `json:"fan_in_fan_out"` // true for GPT-2's Conv1D
	InitLoraWeights   bool               `json:"init_lora_weights"`
	InferenceMode     bool               `json:"inference_mode"`
	UseDoRA           bool               `json:"use_dora"`
	ModulesToSave     []string           `json:"modules_to_save"`
	Revision          *string            `json:"revision"`
	LayersToTransform []int              `json:"layers_to_transform"`
	LayersPattern     *string            `json:"layers_pattern"`
	RankPattern       map[string]int     `json:"rank_pattern"`  // module pattern → r
	AlphaPattern      map[string]float64 `json:"alpha_pattern"` // module pattern → lora_alpha
}

// UnmarshalJSON reads another tool's adapter_config.json as well as ours: PEFT writes
// target_modules as one string when it is a regular expression or "all-linear".
func (c *AdapterConfig) UnmarshalJSON(b []byte) error {
	type plain AdapterConfig
	var raw struct {
		plain
		TargetModules json.RawMessage `json:"target_modules"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*c = AdapterConfig(raw.plain)
	c.TargetModules = nil
	if len(raw.TargetModules) == 0 || string(raw.TargetModules) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(raw.TargetModules, &one) == nil {
		c.TargetModules = []string{one}
		return nil
	}
	if err := json.Unmarshal(raw.TargetModules, &c.TargetModules); err != nil {
		return fmt.Errorf("target_modules: want a string or a list of strings: %v", err)
	}
	return nil
}

// ReadAdapterConfig reads a PEFT adapter_config.json; r must be positive.
func ReadAdapterConfig(path string) (AdapterConfig, error) {
	var c AdapterConfig
	if err := readJSON(path, &c); err != nil {
		return c, err
	}
	if c.R <= 0 {
		return c, fmt.Errorf("%s: r must be positive, got %d", path, c.R)
	}
	return c, nil
}

// readJSON decodes the JSON file at path into v; a decoding error names the file.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// Scale is LoRA's s: alpha/r, or alpha/√r with rslora.
func (c AdapterConfig) Scale() float64 {
	if c.R <= 0 {
		return 0
	}
	if c.UseRSLoRA {
		return c.LoraAlpha / math.Sqrt(float64(c.R))
	}
	return c.LoraAlpha / float64(c.R)
}

// Tensor is a named float32 tensor.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Optimizer is AdamW's state: per trainable tensor (by its PEFT name) the two moments.
type Optimizer struct {
	Step                                         int
	LearningRate, Beta1, Beta2, Eps, WeightDecay float64
	ExpAvg, ExpAvgSq                             map[string][]float32
}

// Checkpoint is everything a checkpoint folder holds. Optimizer and State are absent (nil)
// for a bare PEFT adapter folder.
type Checkpoint struct {
	Config    AdapterConfig
	Tensors   []Tensor // PEFT names: base_model.model.<module>.lora_A.weight …
	Optimizer *Optimizer
	State     *TrainerState
	// Generation is GenerationFile's content, nil when there is none.
	Generation []byte
}

// Name is the folder name of the checkpoint at step.
func Name(step int) string { return fmt.Sprintf("step-%06d", step) }

// Save writes c as the folder dir, atomically: the folder appears complete or not at all.
func Save(dir string, c Checkpoint) error {
	tmp, err := atomicfile.TempDir(dir)
	if err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // a no-op once moved into place
	if err := SaveAdapter(tmp, c.Config, c.Tensors); err != nil {
		return err
	}
	if c.Optimizer != nil {
		if err := saveOptimizer(filepath.Join(tmp, OptimizerFile), *c.Optimizer); err != nil {
			return err
		}
	}
	if c.State != nil {
		b, err := json.MarshalIndent(c.State, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, TrainerStateFile), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if c.Generation != nil {
		if err := atomicfile.WriteFile(filepath.Join(tmp, GenerationFile), c.Generation, 0o644); err != nil {
			return err
		}
	}
	if err := atomicfile.ReplaceDir(tmp, dir); err != nil {
		return fmt.Errorf("saving checkpoint %s: %w", dir, err)
	}
	return nil
}

// SaveAdapter writes the PEFT files (adapter_config.json, adapter_model.safetensors) into dir.
func SaveAdapter(dir string, cfg AdapterConfig, tensors []Tensor) error {
	if cfg.PeftType == "" {
		cfg.PeftType = "LORA"
	}
	if cfg.TaskType == "" {
		cfg.TaskType = "CAUSAL_LM"
	}
	if cfg.Bias == "" {
		cfg.Bias = "none"
	}
	if cfg.RankPattern == nil { // PEFT wants {} here, not null
		cfg.RankPattern = map[string]int{}
	}
	if cfg.AlphaPattern == nil {
		cfg.AlphaPattern = map[string]float64{}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, AdapterConfigFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	st := make([]safetensors.Tensor, len(tensors))
	for i, t := range tensors {
		st[i] = safetensors.F32Tensor(t.Name, t.Shape, t.Data)
	}
	return safetensors.Write(filepath.Join(dir, AdapterWeightsFile), st, map[string]string{"format": "pt"})
}

func saveOptimizer(path string, o Optimizer) error {
	names := make([]string, 0, len(o.ExpAvg))
	for n := range o.ExpAvg {
		names = append(names, n)
	}
	sort.Strings(names)
	var st []safetensors.Tensor
	for _, n := range names {
		m, v := o.ExpAvg[n], o.ExpAvgSq[n]
		if len(v) != len(m) {
			return fmt.Errorf("optimizer state of %s: moments differ in size", n)
		}
		st = append(st, safetensors.F32Tensor(n+".exp_avg", []int{len(m)}, m),
			safetensors.F32Tensor(n+".exp_avg_sq", []int{len(v)}, v))
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	meta := map[string]string{"step": strconv.Itoa(o.Step), "learning_rate": f(o.LearningRate),
		"beta1": f(o.Beta1), "beta2": f(o.Beta2), "eps": f(o.Eps), "weight_decay": f(o.WeightDecay)}
	return safetensors.Write(path, st, meta)
}

// Load reads a checkpoint folder. A bare PEFT adapter folder (no optimizer or trainer state)
// loads with those left nil.
func Load(dir string) (Checkpoint, error) {
	var c Checkpoint
	cfg, tensors, err := LoadAdapter(dir)
	if err != nil {
		return c, err
	}
	c.Config, c.Tensors = cfg, tensors
	if _, err := os.Stat(filepath.Join(dir, OptimizerFile)); err == nil {
		o, err := loadOptimizer(filepath.Join(dir, OptimizerFile))
		if err != nil {
			return c, err
		}
		c.Optimizer = &o
	}
	s, err := ReadTrainerState(filepath.Join(dir, TrainerStateFile))
	if err == nil {
		c.State = &s
	} else if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, GenerationFile)); err == nil {
		c.Generation = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	return c, nil
}

// LoadAdapter reads the PEFT files of dir.
func LoadAdapter(dir string) (AdapterConfig, []Tensor, error) {
	p := filepath.Join(dir, AdapterConfigFile)
	cfg, err := ReadAdapterConfig(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return cfg, nil, fmt.Errorf("%s is not a checkpoint: no %s", dir, AdapterConfigFile)
		}
		return cfg, nil, err
	}
	if cfg.PeftType != "" && cfg.PeftType != "LORA" {
		return cfg, nil, fmt.Errorf("%s: peft_type %q: only LORA adapters are supported", p, cfg.PeftType)
	}
	f, err := safetensors.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return cfg, nil, err
	}
	defer f.Close()
	var tensors []Tensor
	for _, n := range f.Names() {
		data, shape, err := f.Float32(n)
		if err != nil {
			return cfg, nil, err
		}
		tensors = append(tensors, Tensor{Name: n, Shape: shape, Data: data})
	}
	return cfg, tensors, nil
}

func loadOptimizer(path string) (Optimizer, error) {
	o := Optimizer{ExpAvg: map[string][]float32{}, ExpAvgSq: map[string][]float32{}}
	f, err := safetensors.Open(path)
	if err != nil {
		return o, err
	}
	defer f.Close()
	num := func(key string) (float64, error) {
		s, ok := f.Metadata[key]
		if !ok {
			return 0, fmt.Errorf("%s: metadata %q missing", path, key)
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: metadata %q: %v", path, key, err)
		}
		return v, nil
	}
	step, err := num("step")
	if err != nil {
		return o, err
	}
	o.Step = int(step)
	for key, dst := range map[string]*float64{"learning_rate": &o.LearningRate, "beta1": &o.Beta1,
		"beta2": &o.Beta2, "eps": &o.Eps, "weight_decay": &o.WeightDecay} {
		if *dst, err = num(key); err != nil {
			return o, err
		}
	}
	for _, n := range f.Names() {
		data, _, err := f.Float32(n)
		if err != nil {
			return o, err
		}
		switch {
		case strings.HasSuffix(n, ".exp_avg_sq"):
			o.ExpAvgSq[strings.TrimSuffix(n, ".exp_avg_sq")] = data
		case strings.HasSuffix(n, ".exp_avg"):
			o.ExpAvg[strings.TrimSuffix(n, ".exp_avg")] = data
		default:
			return o, fmt.Errorf("%s: unexpected tensor %q", path, n)
		}
	}
	for n, m := range o.ExpAvg {
		if v, ok := o.ExpAvgSq[n]; !ok || len(v) != len(m) {
			return o, fmt.Errorf("%s: %s.exp_avg_sq missing or of another size than exp_avg", path, n)
		}
	}
	return o, nil
}

// Entry is one checkpoint of a run.
type Entry struct {
	Step int
	Path string
}

// List returns the checkpoints under dir (a run's checkpoints/ folder), oldest first.
// Temporary folders of a save in progress or interrupted are not listed.
func List(dir string) ([]Entry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var out []Entry
	for _, e := range ents {
		var step int
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "step-") {
			continue
		}
		if _, err := fmt.Sscanf(e.Name(), "step-%d", &step); err != nil || Name(step) != e.Name() {
			continue
		}
		out = append(out, Entry{Step: step, Path: filepath.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// RemoveLeftovers deletes what interrupted saves and prunes left under dir: the hidden
// .step-N.tmp-*, .step-N.old and .step-N.del folders, which List never shows. Only the run
// folder's one writer may call it (a save in progress builds such a folder).
func RemoveLeftovers(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".step-") {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// Prune deletes the oldest checkpoints under dir so that at most keep remain (keep ≤ 0 keeps
// all), never deleting protect (the newest good checkpoint, say). It also removes leftovers of
// interrupted saves.
func Prune(dir string, keep int, protect string) error {
	RemoveLeftovers(dir)
	if keep <= 0 {
		return nil
	}
	list, err := List(dir)
	if err != nil {
		return err
	}
	for i := 0; i < len(list)-keep; i++ {
		if list[i].Path == protect {
			continue
		}
		// Rename first, atomically, then delete: a crash during the deletion leaves a hidden
		// folder that List ignores and the next Prune removes, never a half checkpoint.
		doomed := filepath.Join(dir, "."+filepath.Base(list[i].Path)+".del")
		os.RemoveAll(doomed)
		if err := os.Rename(list[i].Path, doomed); err != nil {
			return err
		}
		if err := os.RemoveAll(doomed); err != nil {
			return err
		}
	}
	return nil
}
