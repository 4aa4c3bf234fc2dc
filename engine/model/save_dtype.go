package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"rlhfstation/internal/atomicfile"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// SaveAs writes the model as Save does, with the float weights in dtype (F32, F16 or BF16,
// rounded to nearest even) and config.json's torch_dtype to match: F16 halves the folder,
// which is how the built-in model stays small. 4-bit linears are written as they are held.
func (m *Model) SaveAs(dir string, dtype safetensors.DType) error {
	tensor, ok := map[safetensors.DType]func(string, []int, []float32) safetensors.Tensor{
		safetensors.F32: safetensors.F32Tensor, safetensors.F16: safetensors.F16Tensor, safetensors.BF16: safetensors.BF16Tensor,
	}[dtype]
	if !ok {
		return fmt.Errorf("save %s: dtype %s is not one of F32, F16, BF16", dir, dtype)
	}
	torchDType := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.F16: "float16", safetensors.BF16: "bfloat16"}[dtype]
	qcfg, qtensors, err := m.quantizedTensors(torchDType)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tensors := make([]safetensors.Tensor, 0, len(m.Params)+len(qtensors))
	for _, p := range m.Params {
		data, shape := p.Float32(), p.Shape
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
	if m.HeadQ != nil && m.Config.TieEmbed {
		// bitsandbytes has no 4-bit embedding: a tied 4-bit head is written expanded (it
		// loads back 16-bit; [quant] head quantizes it again).
		emb := make([]float32, m.HeadQ.W.Len())
		m.HeadQ.W.Dequantize(emb)
		tensors = append(tensors, tensor(m.HeadName(), []int{m.Config.Vocab, m.Config.Dim}, emb))
	}
	tensors = append(tensors, qtensors...)
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := m.Config.hfJSON()
	cfg["torch_dtype"] = torchDType
	if qcfg != nil {
		cfg["quantization_config"] = qcfg.JSON()
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(js, '\n'), 0o644)
}

// quantizedTensors lays out the 4-bit linears in bitsandbytes' layout with the
// quantization_config that declares them (nil when there are none). bitsandbytes has one
// quant type and double-quant setting per model: weights that differ are refused. Linears
// left dense among quantized ones are listed as skipped modules, with the LM head.
func (m *Model) quantizedTensors(computeDType string) (*quant.Config, []safetensors.Tensor, error) {
	var ts []safetensors.Tensor
	var first *quant.Weight
	var dense []string
	for _, l := range m.Linears() {
		switch w := l.W.(type) {
		case *Quantized:
			if first == nil {
				first = w.W
			} else if w.W.Type != first.Type || w.W.Nested() != first.Nested() {
				return nil, nil, fmt.Errorf("%s is %s (double quant %v) but other linears are %s (double quant %v): bitsandbytes' config holds one setting",
					l.Name, w.W.Type, w.W.Nested(), first.Type, first.Nested())
			}
			ts = append(ts, w.W.Tensors(l.Name)...)
		default:
			if !l.isDense() {
				return nil, nil, fmt.Errorf("%s has a weight that cannot be saved (%T)", l.Name, l.W)
			}
			dense = append(dense, l.Name)
		}
	}
	head := m.HeadQ != nil && !m.Config.TieEmbed // lm_head written 4-bit
	if head {
		w := m.HeadQ.W
		if first == nil {
			first = w
		} else if w.Type != first.Type || w.Nested() != first.Nested() {
			return nil, nil, fmt.Errorf("lm_head is %s (double quant %v) but the linears are %s (double quant %v): bitsandbytes' config holds one setting",
				w.Type, w.Nested(), first.Type, first.Nested())
		}
		ts = append(ts, w.Tensors("lm_head")...)
	}
	if first == nil {
		return nil, nil, nil
	}
	c := quant.NewConfig(quant.Options{Type: first.Type, BlockSize: first.BlockSize, DoubleQuant: first.Nested()}, computeDType)
	switch {
	case head:
		// an explicit list (even empty) is complete: the head, not named, is 4-bit
		c.SkipModules = append([]string{}, dense...)
	case len(dense) > 0:
		// transformers takes an explicit list as complete: the head must be named too.
		c.SkipModules = append(dense, "lm_head")
	}
	return &c, ts, nil
}
