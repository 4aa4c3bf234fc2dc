package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/lora"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// MergeOptions say how Merge writes: the output dtype ("" for the model's own), the shard
// size (0 for transformers' 5 GB), and where progress lines go.
type MergeOptions struct {
	DType      safetensors.DType
	ShardBytes int64
	Progress   io.Writer
}

// MergeSummary is what Merge did: `rlhfstation merge --json`.
type MergeSummary struct {
	quant.ExportSummary
	Adapter string  `json:"adapter"`
	Modules int     `json:"modules_merged"`
	R       int     `json:"r"`
	Alpha   float64 `json:"lora_alpha"`
	RSLoRA  bool    `json:"use_rslora"`
	Scale   float64 `json:"scale"`
}

// WriteText writes the summary for people.
func (s MergeSummary) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, `merged %s into %s → %s
  adapter:  %d modules, r %d, lora_alpha %g, scale %g%s
  weights:  %d tensors in %s (%d dequantized from 4 bits), %d shard(s), %.1f MiB
  files:    %d other files copied
  time:     %.1f s
`, s.Adapter, s.Model, s.Out, s.Modules, s.R, s.Alpha, s.Scale, map[bool]string{true: " (rslora)"}[s.RSLoRA],
		s.Tensors, s.DType, s.Dequantized, s.Shards, float64(s.Bytes)/(1<<20), s.Files, s.Seconds)
	return err
}

// mergeDelta is one adapted module's factors.
type mergeDelta struct {
	module   string
	a, b     []float32
	r        int
	in, out  int
	weight   string // the base tensor it is added to
	transpos bool
}

// Merge writes the model folder modelDir with the PEFT LoRA adapter in adapterDir merged into
// its weights, W + s·B·A (lora.AddDelta), as a plain Hugging Face folder in out: what
// transformers, vLLM and llama.cpp's converter load. A 4-bit (bitsandbytes) base is
// dequantized first; config.json loses its quantization_config; tokenizer files are copied;
// out appears only when complete (quant.ExportFolder). The adapter is checked against the
// model before anything is written: every factor must be a LoRA A or B of a module the
// model has, with the shapes of its weight; DoRA, trained biases, modules_to_save and
// per-module rank or alpha patterns are refused.
func Merge(modelDir, adapterDir, out string, o MergeOptions) (MergeSummary, error) {
	sum := MergeSummary{Adapter: adapterDir}
	cfg, tensors, err := checkpoint.LoadAdapter(adapterDir)
	if err != nil {
		return sum, err
	}
	if err := plainLoRA(cfg, filepath.Join(adapterDir, checkpoint.AdapterConfigFile), "merged"); err != nil {
		return sum, err
	}
	scale := lora.Config{R: cfg.R, Alpha: cfg.LoraAlpha, RSLoRA: cfg.UseRSLoRA}.Scale()
	sum.R, sum.Alpha, sum.RSLoRA, sum.Scale = cfg.R, cfg.LoraAlpha, cfg.UseRSLoRA, scale
	weightsPath := filepath.Join(adapterDir, checkpoint.AdapterWeightsFile)
	deltas, err := groupFactors(weightsPath, tensors, cfg.R)
	if err != nil {
		return sum, err
	}

	modelType, err := readModelType(modelDir)
	if err != nil {
		return sum, err
	}
	set, err := safetensors.OpenSet(modelDir)
	if err != nil {
		return sum, err
	}
	byWeight := map[string]*mergeDelta{}
	for _, d := range deltas {
		d.transpos = modelType == "gpt2" // Conv1D weights are stored [in, out]
		for _, name := range weightNames(d.module) {
			if _, ok := set.Info(name); ok {
				d.weight = name
				break
			}
		}
		if d.weight == "" {
			set.Close()
			return sum, fmt.Errorf("%s: module %s has no weight %s.weight in %s", weightsPath, d.module, d.module, modelDir)
		}
		if info, _ := set.Info(d.weight); !quantizedWeight(set, d.weight) {
			if err := d.checkShape(info.Shape); err != nil {
				set.Close()
				return sum, fmt.Errorf("%s: %w", weightsPath, err)
			}
		}
		if other := byWeight[d.weight]; other != nil {
			set.Close()
			return sum, fmt.Errorf("%s: modules %s and %s both name the weight %s", weightsPath, other.module, d.module, d.weight)
		}
		byWeight[d.weight] = d
	}
	set.Close()

	bk, err := backend.Reference() // host tensors: the CPU's GEMM
	if err != nil {
		return sum, err
	}
	res, err := quant.ExportFolder(modelDir, out, quant.ExportOptions{
		DType: o.DType, ShardBytes: o.ShardBytes, Progress: o.Progress, Label: "merge",
		Wants: func(name string) bool { return byWeight[name] != nil },
		Update: func(name string, w []float32, shape []int) error {
			d := byWeight[name]
			if err := d.checkShape(shape); err != nil {
				return fmt.Errorf("%s: %w", weightsPath, err)
			}
			return lora.AddDelta(bk, w, d.out, d.in, d.r, float32(scale), d.a, d.b, d.transpos)
		},
	})
	sum.ExportSummary = res
	if err != nil {
		return sum, err
	}
	sum.Modules = len(deltas)
	return sum, nil
}

// groupFactors pairs the adapter's lora_A and lora_B tensors by module, checking that each is
// a 2-D factor of rank r and that nothing else is in the file.
func groupFactors(path string, tensors []checkpoint.Tensor, r int) ([]*mergeDelta, error) {
	const prefix = "base_model.model."
	byModule := map[string]*mergeDelta{}
	var order []*mergeDelta
	for _, t := range tensors {
		rest, ok := strings.CutPrefix(t.Name, prefix)
		module, isA := strings.CutSuffix(rest, ".lora_A.weight")
		module, isB := strings.CutSuffix(module, ".lora_B.weight")
		if !ok || !(isA || isB) || module == "" {
			return nil, fmt.Errorf("%s: tensor %s is not a LoRA factor (base_model.model.<module>.lora_A.weight or lora_B.weight)", path, t.Name)
		}
		if len(t.Shape) != 2 {
			return nil, fmt.Errorf("%s: tensor %s has shape %v, want 2 dimensions", path, t.Name, t.Shape)
		}
		d := byModule[module]
		if d == nil {
			d = &mergeDelta{module: module, r: r}
			byModule[module] = d
			order = append(order, d)
		}
		if isA {
			if t.Shape[0] != r {
				return nil, fmt.Errorf("%s: tensor %s has shape %v: rank %d, but adapter_config.json says r = %d", path, t.Name, t.Shape, t.Shape[0], r)
			}
			d.a, d.in = t.Data, t.Shape[1]
		} else {
			if t.Shape[1] != r {
				return nil, fmt.Errorf("%s: tensor %s has shape %v: rank %d, but adapter_config.json says r = %d", path, t.Name, t.Shape, t.Shape[1], r)
			}
			d.b, d.out = t.Data, t.Shape[0]
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: no LoRA factors", path)
	}
	for _, d := range order {
		if d.a == nil || d.b == nil {
			return nil, fmt.Errorf("%s: module %s has only one of lora_A and lora_B", path, d.module)
		}
	}
	return order, nil
}

// checkShape checks the base weight's shape (as stored) against the factors.
func (d *mergeDelta) checkShape(shape []int) error {
	want := []int{d.out, d.in}
	if d.transpos {
		want = []int{d.in, d.out}
	}
	if len(shape) != 2 || shape[0] != want[0] || shape[1] != want[1] {
		return fmt.Errorf("module %s: the factors make a [%d, %d] update (lora_B [%d, %d] · lora_A [%d, %d]) but the weight %s is %v",
			d.module, d.out, d.in, d.out, d.r, d.r, d.in, d.weight, shape)
	}
	return nil
}

// weightNames are the tensor names a module's weight may have: PEFT names GPT-2's modules
// from GPT2LMHeadModel (transformer.h.0…), while checkpoints saved from GPT2Model lack the
// prefix.
func weightNames(module string) []string {
	names := []string{module + ".weight"}
	if m, ok := strings.CutPrefix(module, "transformer."); ok {
		names = append(names, m+".weight")
	} else {
		names = append(names, "transformer."+module+".weight")
	}
	return names
}

// quantizedWeight reports whether name is a bitsandbytes 4-bit weight (its quant state beside it).
func quantizedWeight(set *safetensors.Set, name string) bool {
	for _, k := range quant.QuantStateKeys(strings.TrimSuffix(name, ".weight")) {
		if strings.Contains(k, ".quant_state.") {
			if _, ok := set.Info(k); ok {
				return true
			}
		}
	}
	return false
}

// readModelType is config.json's model_type.
func readModelType(dir string) (string, error) {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	var c struct {
		ModelType string `json:"model_type"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("%s: %v", p, err)
	}
	return c.ModelType, nil
}
