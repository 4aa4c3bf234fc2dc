package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/safetensors"
)

// SaveAs writes the model as Save does, with the weights in dtype (F32, F16 or BF16,
// rounded to nearest even) and config.json's torch_dtype to match: F16 halves the folder,
// which is how the built-in model stays small.
func (m *Model) SaveAs(dir string, dtype safetensors.DType) error {
	var tensor func(name string, shape []int, v []float32) safetensors.Tensor
	torchDType := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.F16: "float16", safetensors.BF16: "bfloat16"}[dtype]
	switch dtype {
	case safetensors.F32:
		return m.Save(dir)
	case safetensors.F16:
		tensor = safetensors.F16Tensor
	case safetensors.BF16:
		tensor = safetensors.BF16Tensor
	default:
		return fmt.Errorf("save %s: dtype %s is not one of F32, F16, BF16", dir, dtype)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, l := range m.Linears() {
		if d, ok := l.W.(*Dense); !ok || l.weight == nil || &d.W[0] != &l.weight.Data[0] {
			return fmt.Errorf("save %s: %s has a non-dense weight", dir, l.Name)
		}
	}
	tensors := make([]safetensors.Tensor, 0, len(m.Params))
	for _, p := range m.Params {
		data, shape := p.Data, p.Shape
		if p.conv1D {
			out, in := p.Shape[0], p.Shape[1]
			data = make([]float32, len(p.Data))
			for o := 0; o < out; o++ {
				for i := 0; i < in; i++ {
					data[i*out+o] = p.Data[o*in+i]
				}
			}
			shape = []int{in, out}
		}
		tensors = append(tensors, tensor(p.Name, shape, data))
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := m.Config.hfJSON()
	cfg["torch_dtype"] = torchDType
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644)
}
