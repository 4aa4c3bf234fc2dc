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
	LargestLinear                                  int64 // the largest one's: a 4-bit linear is expanded to bf16 for its product
	Quantized                                      bool  // linears held 4-bit (NF4/FP4, ≈4.13 bits with double quantization)
	LoRAParams                                     int64
	Seqs                                           int // completions of a micro-batch (prompts × num_generations)
	SeqLen                                         int // prompt + completion tokens of the longest
	Completion                                     int // completion tokens: the rows the heads of scoring and training run on
	// The model's own buffers for the micro-batch at this backend's precision, as its passes
	// carve them (model.FootprintOf): the training tape, the backward's scratch, the inference
	// passes' buffers, the KV cache. The caller fills them; the rest is this backend's own.
	Tape, Grads, Passes, KVCache int64
}

// Estimate is a run's peak device memory by part, in bytes.
type Estimate struct {
	Weights     int64 // embeddings and head (bf16), norms, the linears (4-bit or bf16)
	LoRA        int64 // float32 weights, gradients, two moments
	KVCache     int64 // keys and values of every completion
	Activations int64 // the training forward's tape and the backward's scratch
	Scratch     int64 // the inference passes' buffers, attention's index table and the largest transient: a chunk of the head's logits (or the attention backward's statistics) and a dequantized linear
	Fixed       int64 // the cuBLAS workspace and the upload staging buffer, outside the allocator
}

// Total adds the parts.
func (e Estimate) Total() int64 {
	return e.Buffers() + e.Fixed
}

// Buffers is what the allocator hands out at its peak (Backend.PeakBytes): all but Fixed.
func (e Estimate) Buffers() int64 {
	return e.Weights + e.LoRA + e.KVCache + e.Activations + e.Scratch
}

func (e Estimate) String() string {
	return fmt.Sprintf("weights %s, LoRA %s, KV cache %s, training activations %s, scratch %s", human.Bytes(e.Weights), human.Bytes(e.LoRA),
		human.Bytes(e.KVCache), human.Bytes(e.Activations), human.Bytes(e.Scratch+e.Fixed))
}

// EstimateMemory predicts a run's peak device memory on this backend: every buffer rounded
// to the allocator's size class, as it hands them out; the model's buffers all live at once
// (they are allocated once per run), with the largest transient of a pass beside them.
func EstimateMemory(s RunShape) Estimate {
	round := func(n int64) int64 {
		if n <= 0 {
			return 0
		}
		return int64(sizeClass(int(n)))
	}
	var e Estimate
	embed := int64(s.Vocab) * int64(s.Dim)
	e.Weights = round(2 * embed)
	if !s.TiedHead {
		e.Weights += round(2 * embed)
	}
	e.Weights += 4 * int64(s.Layers) * int64(4*s.Dim) // norm weights and biases in float32
	if s.Quantized {
		e.Weights += s.LinearParams * 413 / 800
	} else {
		e.Weights += 2 * s.LinearParams
	}
	e.LoRA = s.LoRAParams * (4 + 4 + 8)
	e.KVCache = round(s.KVCache)
	e.Activations = round(s.Tape) + round(s.Grads)
	// The head's float32 logits, a chunk of rows at a time: over every position when scoring,
	// over the completions' with their bf16 gradient when training.
	chunk := func(rows int) int64 { return int64(headChunk(rows, s.Vocab)) * int64(s.Vocab) }
	trained := chunk(s.Seqs * min(max(s.Completion, 1), max(s.SeqLen, 1)))
	logits := max(round(4*chunk(s.Seqs*s.SeqLen)), round(4*trained)+round(2*trained))
	table, attn := attentionScratch(s)
	e.Scratch = round(s.Passes) + round(table) + max(round(attn), logits) + round(2*s.LargestLinear)
	e.Fixed = blasWorkspaceBytes + stagingBytes
	return e
}

// attentionScratch is what attention allocates for a micro-batch's passes beside the
// model's buffers: the index table the ragged kernels keep between passes (ragged.go:
// kbase and position per row, 4 values a query tile and 6 a key tile, tcTile rows each, per
// sequence), and the largest transient, the backward's log-sum-exp and D per row and head
// (float32 each). Flash-style, no [T×T] is held. Heads wider than the ragged kernels take
// (HeadDim > 256) go through cuBLAS a span at a time (attention.go), whose backward holds a
// span's scores and their gradient (float32, heads × T × T) and its keys' and values'
// gradients expanded to every head (bf16).
func attentionScratch(s RunShape) (table, transient int64) {
	rows := int64(s.Seqs) * int64(s.SeqLen)
	heads, T := int64(s.Heads), int64(s.SeqLen)
	if s.Heads > 0 && s.QDim/s.Heads > maxRaggedHeadDim {
		return 0, heads*T*T*(4+4) + 2*2*T*int64(s.QDim)
	}
	tiles := int64(s.Seqs) * int64(ceilDiv(s.SeqLen, tcTile))
	return 4 * (2*rows + (4+6)*tiles), 8 * rows * heads
}

// maxRaggedHeadDim is the widest head the ragged kernels take (raggedPlanOf).
const maxRaggedHeadDim = 256

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
