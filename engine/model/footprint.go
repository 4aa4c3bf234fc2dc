package model

import "rlhfstation/engine/backend"

// Footprint is what the passes of a model of config c allocate for one micro-batch, by
// buffer, in bytes: laid out by the very carving code the passes run (Tape.lay, layGrads,
// layScratch), so that the memory estimate (engine/memory) follows the run's allocations.
type Footprint struct {
	Tape    int64 // the training forward's activations of every block and the head's rows
	Grads   int64 // the backward's one-block scratch and the head's chunks of logits
	Scratch int64 // the inference passes' buffers (scoring, prefill), at most maxPassRows rows
	Logits  int64 // the scoring head's chunk of logits, or a decoding step's rows
	KVCache int64 // generation's keys and values for every sequence
}

// Precision32 is the CPU backend's precision: every buffer float32.
var Precision32 = backend.Precision{Act: backend.F32, Stream: backend.F32, Weight: backend.F32}

// FootprintOf lays out the buffers of one GRPO micro-batch, seqs sequences of seqLen tokens
// (prompt and completion) whose last completion tokens run through the training head, on a
// backend of precision p, allocating nothing. c must be valid (LoadConfig's).
func FootprintOf(c *Config, seqs, seqLen, completion int, p backend.Precision) Footprint {
	m := &Model{Config: *c, Layers: make([]Layer, c.Layers)}
	types := [kinds]backend.DType{p.Stream, p.Act, backend.F32}
	size := func(count *arena) int64 {
		var n int64
		for k := range count.off {
			n += int64(count.off[k]) * int64(types[k].Size())
		}
		return n
	}
	seqLen = min(seqLen, c.Context())
	rows := seqs * seqLen
	var f Footprint
	t := &Tape{m: m, sel: make([]int32, seqs*min(completion, seqLen))}
	var tape, grads, inference arena
	t.lay(&tape, rows)
	f.Tape = size(&tape) + int64(len(t.sel))*int64(c.Dim)*int64(p.Act.Size()) // hsel
	t.layGrads(&grads, rows)
	f.Grads = size(&grads)
	srows := min(rows, maxPassRows)
	m.layScratch(&scratch{}, &inference, srows)
	f.Scratch = size(&inference)
	f.Logits = int64(max(seqs, min(srows, m.headRows()))) * int64(c.Vocab) * 4
	f.KVCache = int64(rows) * int64(c.Layers) * 2 * int64(c.KVDim()) * int64(p.Act.Size())
	return f
}

// ParamCounts gives the number of parameters of a model of config c, and how many of them
// are the blocks' linear weights (what 4-bit quantization replaces), without building it.
func ParamCounts(c *Config) (total, linear int64) {
	for _, sp := range layout(c) {
		n := int64(numel(sp.shape))
		total += n
		if sp.linear {
			linear += n
		}
	}
	return total, linear
}

// LoRAShapes lists the (in, out) sizes of every linear a LoRA of targets would adapt ("all-linear"
// when targets is nil): what the adapters' parameters and activations scale with.
func LoRAShapes(c *Config, targets []string) [][2]int {
	var out [][2]int
	for _, sp := range layout(c) {
		if !sp.linear {
			continue
		}
		name := sp.name[:len(sp.name)-len(".weight")]
		if targets != nil && !targetsModule(targets, name) {
			continue
		}
		out = append(out, [2]int{sp.shape[1], sp.shape[0]}) // layout's shapes are [out, in]
	}
	return out
}

func targetsModule(targets []string, name string) bool {
	for _, t := range targets {
		if len(name) >= len(t) && name[len(name)-len(t):] == t {
			return true
		}
	}
	return false
}
