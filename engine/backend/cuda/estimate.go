package cuda

import (
	"fmt"

	"rlhfstation/internal/human"
)

// RunShape is what the device memory of a GRPO run depends on.
type RunShape struct {
	Vocab, Dim, Layers, Heads, QDim, KVDim, Hidden int
	TiedHead                                       bool
	LinearParams                                   int64 // the blocks' linear weights
	Quantized                                      bool  // linears held 4-bit (NF4/FP4, ≈4.13 bits with double quantization)
	LoRAParams                                     int64
	Seqs                                           int // completions of a micro-batch (prompts × num_generations)
	SeqLen                                         int // prompt + completion tokens of the longest
}

// Estimate is a run's peak device memory by part, in bytes.
type Estimate struct {
	Weights     int64 // embeddings and head (bf16), norms, the linears (4-bit or bf16)
	LoRA        int64 // float32 masters, gradients, two moments
	KVCache     int64 // bf16 keys and values of every completion
	Activations int64 // the training forward's tape: float32 residual stream, bf16 products' inputs
	Scratch     int64 // the largest transient: attention's scores of a sequence, a chunk of logits, a dequantized linear
	Fixed       int64 // cuBLAS workspace
}

// Total adds the parts.
func (e Estimate) Total() int64 {
	return e.Weights + e.LoRA + e.KVCache + e.Activations + e.Scratch + e.Fixed
}

func (e Estimate) String() string {
	return fmt.Sprintf("weights %s, LoRA %s, KV cache %s, training activations %s, scratch %s", human.Bytes(e.Weights), human.Bytes(e.LoRA),
		human.Bytes(e.KVCache), human.Bytes(e.Activations), human.Bytes(e.Scratch+e.Fixed))
}

// EstimateMemory predicts a run's peak device memory on this backend, generously (every
// buffer of the tape counted, attention's scratch at the longest sequence).
func EstimateMemory(s RunShape) Estimate {
	var e Estimate
	embed := int64(s.Vocab) * int64(s.Dim)
	heads := embed
	if !s.TiedHead {
		heads *= 2
	}
	e.Weights = 2*heads + 4*int64(s.Layers)*int64(4*s.Dim) // bf16 tables; norm weights and biases in float32
	if s.Quantized {
		e.Weights += s.LinearParams * 413 / 800
	} else {
		e.Weights += 2 * s.LinearParams
	}
	e.LoRA = s.LoRAParams * (4 + 4 + 8)
	rows := int64(s.Seqs) * int64(s.SeqLen)
	e.KVCache = rows * int64(s.Layers) * 2 * int64(s.KVDim) * 2
	perRow := int64(4*s.Dim+2*s.Dim+4*s.Dim+2*s.Dim) + int64(2*(2*s.QDim+2*s.KVDim)) + int64(6*s.Hidden) + 4*4
	e.Activations = rows*int64(s.Layers)*perRow + rows*int64(4*s.Dim+2*s.Dim)
	attn := int64(s.Heads) * int64(s.SeqLen) * int64(s.SeqLen) * (4 + 4 + 2 + 2)
	logits := int64(headChunk(int(rows), s.Vocab)) * int64(s.Vocab) * (4 + 2)
	linear := int64(max(s.Hidden, s.QDim)) * int64(s.Dim) * 2
	e.Scratch = max(attn, logits) + linear + rows*int64(4*s.Dim)*2 // plus the backward's gradient buffers
	e.Fixed = 32<<20 + 64<<20
	return e
}

// CheckFits refuses a run whose estimate exceeds 90% of the device's free memory, saying
// what to lower.
func (d *Device) CheckFits(s RunShape) error {
	m, err := d.MemStats()
	if err != nil {
		return err
	}
	e := EstimateMemory(s)
	if e.Total() <= m.Free*9/10 {
		return nil
	}
	return fmt.Errorf("the run needs about %s of GPU memory but %s is free on %s (%s): lower per_device_train_batch_size, num_generations or max_completion_length, or use a smaller model",
		human.Bytes(e.Total()), human.Bytes(m.Free), d.Info.Name, e)
}
