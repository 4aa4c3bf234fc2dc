// Package memory predicts the peak resident memory of a GRPO run on the CPU from the model's
// config.json and the run's configuration, before anything is loaded: the buffers are those
// the model's passes carve (model.FootprintOf), the weights those the loader and the
// quantizer hold at once, the tokenizer's tables, and the garbage the Go collector lets
// build up between collections (Collect sets how much). A run that would not fit is refused
// with the settings that would make it fit (Check).
package memory

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/internal/human"
	"rlhfstation/quant"
)

// Estimate is a run's peak resident memory by part, in bytes.
type Estimate struct {
	Fixed     int64 // the program and the Go runtime
	Tokenizer int64 // the tokenizer's tables (tokenizer.Footprint)
	// Load is the loader's peak: what it holds at once of the float32 weights, the 4-bit
	// linears it makes as it reads them, and the weight files' mapped pages.
	Load int64
	// Weights are what stays resident while training: the embeddings and head in float32
	// (bf16 over a 4-bit base when the folder is bf16: model.Param.BF16), the linears 4-bit
	// (or float32 with [quant] type "none").
	Weights int64
	LoRA    int64 // the adapters: weights, gradients, AdamW's two moments, and their [rows, r] activations
	model.Footprint
	// Garbage is what the heap holds at its peak besides the live bytes: the buffers of the
	// step's passes that are dead but not yet collected, up to gcPercent of the live heap.
	// Under the memory limit Collect sets it yields, at the cost of more collections.
	Garbage int64
}

// live is the heap a step holds at its peak: everything but the program and the garbage.
func (e Estimate) live() int64 {
	f := e.Footprint
	return e.Tokenizer + e.Weights + e.LoRA + f.Tape + f.Grads + f.Scratch + f.Logits + f.KVCache
}

// Run is the peak while training: the resident weights, every buffer of a step and the
// garbage beside them. The loader's float32 copy is freed by then, and the Go heap reuses
// its memory.
func (e Estimate) Run() int64 { return e.Fixed + e.live() + e.Garbage }

// loading is the peak while loading: the tokenizer is read before the weights.
func (e Estimate) loading() int64 { return e.Fixed + e.Tokenizer + e.Load }

// Total is the peak: loading or training, whichever is larger.
func (e Estimate) Total() int64 { return max(e.loading(), e.Run()) }

// Least is the peak with no garbage: what a run needs when memory is short and the collector
// works hardest under Collect's memory limit. A run is refused when even this does not fit.
func (e Estimate) Least() int64 { return max(e.loading(), e.Run()-e.Garbage) }

func (e Estimate) String() string {
	return fmt.Sprintf("loading %s; training: tokenizer %s, weights %s, LoRA %s, activations %s, backward %s, inference buffers %s, logits %s, KV cache %s, garbage before collection %s",
		human.Bytes(e.loading()), human.Bytes(e.Tokenizer), human.Bytes(e.Weights), human.Bytes(e.LoRA), human.Bytes(e.Tape), human.Bytes(e.Grads),
		human.Bytes(e.Scratch), human.Bytes(e.Logits), human.Bytes(e.KVCache), human.Bytes(e.Garbage))
}

// Model is what the estimate needs of a model folder: its config and how its weights are stored.
type Model struct {
	Config *model.Config
	// FileBytes is the size of the weight files; 0 = the parameters in config.json's
	// torch_dtype (DTypeBytes each).
	FileBytes  int64
	DTypeBytes int
	Quantized  bool // the linears are 4-bit in the folder (a bitsandbytes layout)
	// QuantizedHead: so is lm_head (its quantization_config lists the modules it skips
	// without naming lm_head, as Save writes a 4-bit head)
	QuantizedHead bool
	// BF16: the float weights are bfloat16 (config.json's torch_dtype), so that over a 4-bit
	// base the embedding and head are held as the bf16 they are.
	BF16 bool
	// Tokenizer is what the loaded tokenizer holds (tokenizer.Footprint); 0 = tokenizerBytes a
	// vocabulary entry.
	Tokenizer int64
}

// ReadModel reads what the estimate needs from a model folder: config.json and the sizes of
// the weight files, when there are any (none is fine: the estimate then assumes config.json's
// torch_dtype, as `rlhfstation check` does before downloading weights).
func ReadModel(dir string) (Model, error) {
	mc, err := model.LoadConfig(dir)
	if err != nil {
		return Model{}, err
	}
	out := Model{Config: mc, DTypeBytes: 2}
	if raw, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		var qc quant.Config
		qc, out.Quantized, _ = quant.IsQuantized(raw)
		out.QuantizedHead = out.Quantized && !mc.TieEmbed && qc.SkipModules != nil && !slices.Contains(qc.SkipModules, "lm_head")
		var dt struct {
			TorchDType string `json:"torch_dtype"`
			DType      string `json:"dtype"` // transformers 4.56 and later
		}
		if json.Unmarshal(raw, &dt) == nil && (dt.TorchDType == "float32" || dt.DType == "float32") {
			out.DTypeBytes = 4
		}
		out.BF16 = dt.TorchDType == "bfloat16" || dt.DType == "bfloat16"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	if size > 0 {
		out.FileBytes = size
	}
	return out, nil
}

const (
	// fixed is the program with its runtime.
	fixed = 48 << 20
	// tokenizerBytes is what a tokenizer holds a vocabulary entry when it was not loaded: the
	// most measured of the published ones (Gemma 3's, with its 33 MB file and a million
	// merge slots: 86 MB for 262,145 entries; Qwen3's 250 bytes, GPT-2's 176, Mistral's 244).
	tokenizerBytes = 330
)

// For predicts the peak resident memory of a run of c on m on the CPU. promptTokens is the
// longest prompt in tokens when the prompts are known (0: max_prompt_length, the most a
// prompt keeps).
func For(m Model, c *config.Config, promptTokens int) Estimate {
	mc := m.Config
	total, linear := model.ParamCounts(mc)
	e := Estimate{Fixed: fixed, Tokenizer: m.Tokenizer}
	if e.Tokenizer <= 0 {
		e.Tokenizer = int64(mc.Vocab) * tokenizerBytes
	}
	file := m.FileBytes
	if file <= 0 {
		file = int64(max(m.DTypeBytes, 2)) * total
	}
	q4 := quantizedBytes(linear, c.Quant)
	embed := int64(mc.Vocab) * int64(mc.Dim)
	// rest is what the tensors other than the linears hold: float32, but for the embedding
	// and head of a bf16 folder over a 4-bit base, held and read as bf16.
	rest := 4 * (total - linear)
	if m.BF16 && (m.Quantized || c.Quant.Type != "none") {
		held := embed
		if !mc.TieEmbed {
			held *= 2
		}
		rest -= 2 * held
	}
	// A 4-bit head (a tied one with the embedding): stored so in a bitsandbytes folder, or
	// [quant] head quantizing it once loaded (the dense head, its 4-bit form and a staging
	// buffer held together then), saving the rest of its bytes.
	var headQ4, headSaving int64
	if m.Quantized && m.QuantizedHead || !m.Quantized && c.Quant.Head && c.Quant.Type != "none" {
		held := int64(4)
		if m.BF16 {
			held = 2
		}
		headQ4 = quantizedBytes(embed, c.Quant)
		headSaving = held*embed - headQ4
	}
	switch {
	case m.Quantized: // the linears arrive 4-bit and stay so
		rest -= headSaving
		e.Load = rest + q4 + file
		e.Weights = rest + q4
	case c.Quant.Type == "none":
		e.Load = 4*total + file
		e.Weights = 4 * total
	default:
		// The loader quantizes each linear as it reads it from the mapped file (model.LoadWith):
		// first the 4-bit linears, staging a chunk of rows in float32 with one linear's pages at
		// a time, then the float32 embeddings, head and norms with a chunk's pages at a time.
		var maxLinear int64
		for _, s := range model.LoRAShapes(mc, nil) {
			maxLinear = max(maxLinear, int64(s[0])*int64(s[1]))
		}
		perParam := float64(file) / float64(total) // bytes a parameter takes in the files
		e.Load = max(q4+4*quant.StagingLen+int64(float64(maxLinear)*perParam),
			rest+q4+int64(float64(min(embed, quant.StagingLen))*perParam))
		if headQ4 > 0 {
			e.Load = max(e.Load, rest+q4+headQ4+4*quant.StagingLen)
		}
		e.Weights = rest - headSaving + q4
	}
	prompt := c.MaxPromptLength
	if promptTokens > 0 {
		prompt = min(prompt, promptTokens)
	}
	seqs := c.PerDeviceTrainBatchSize * c.NumGenerations
	seqLen := min(prompt+c.MaxCompletionLength, mc.Context())
	e.Footprint = model.FootprintOf(mc, seqs, seqLen, c.MaxCompletionLength, model.Precision32)
	var targets []string
	if !c.LoRA.TargetModules.AllLinear() {
		targets = c.LoRA.TargetModules
	}
	rows := int64(seqs) * int64(seqLen)
	for _, s := range model.LoRAShapes(mc, targets) {
		params := int64(c.LoRA.R) * int64(s[0]+s[1])
		e.LoRA += 16*params + 4*rows*int64(c.LoRA.R) // A and B, their gradients, two moments; x·Aᵀ per row
	}
	e.Garbage = e.live() * int64(gcPercent()) / 100
	return e
}

// quantizedBytes is the size of n linear weights in 4-bit: packed codes and the block scales
// (8-bit with a float32 scale per 256 blocks under double quantization).
func quantizedBytes(n int64, q config.Quant) int64 {
	bs := int64(max(q.BlockSize, 1))
	if q.DoubleQuant {
		return n/2 + n/bs + 4*n/(bs*256)
	}
	return n/2 + 4*n/bs
}

// Check refuses a run that does not fit Budget(avail) even with no garbage (Estimate.Least),
// naming every setting that would make it fit on its own, with a value that would (largest
// first), and the estimate's parts.
func Check(m Model, c *config.Config, promptTokens int, avail int64) error {
	est := For(m, c, promptTokens)
	if est.Least() <= Budget(avail) {
		return nil
	}
	fits := func(c *config.Config) bool { return For(m, c, promptTokens).Least() <= Budget(avail) }
	var ways []string
	// Each key on its own: the largest value below the current one that fits.
	try := func(key string, cur, floor int, set func(*config.Config, int), note func(v int) string) {
		best := 0
		for lo, hi := floor, cur-1; lo <= hi; {
			mid := (lo + hi) / 2
			cc := *c
			set(&cc, mid)
			if fits(&cc) {
				best, lo = mid, mid+1
			} else {
				hi = mid - 1
			}
		}
		if best > 0 {
			s := fmt.Sprintf("%s = %d (now %d)", key, best, cur)
			if note != nil {
				s += note(best)
			}
			ways = append(ways, s)
		}
	}
	try("per_device_train_batch_size", c.PerDeviceTrainBatchSize, 1, func(cc *config.Config, v int) { cc.PerDeviceTrainBatchSize = v },
		func(v int) string {
			ga := (c.PerDeviceTrainBatchSize*c.GradientAccumulationSteps + v - 1) / v
			return fmt.Sprintf(" with gradient_accumulation_steps = %d to keep the batch", ga)
		})
	try("num_generations", c.NumGenerations, 2, func(cc *config.Config, v int) { cc.NumGenerations = v }, nil)
	try("max_completion_length", c.MaxCompletionLength, 1, func(cc *config.Config, v int) { cc.MaxCompletionLength = v }, nil)
	prompt := c.MaxPromptLength
	if promptTokens > 0 {
		prompt = min(prompt, promptTokens)
	}
	try("max_prompt_length", prompt, 1, func(cc *config.Config, v int) { cc.MaxPromptLength = v }, func(int) string {
		return " (longer prompts are cut to their last tokens)"
	})
	if c.Quant.Type == "none" {
		cc := *c
		cc.Quant.Type = "nf4"
		if fits(&cc) {
			ways = append(ways, `quant.type = "nf4" (now "none")`)
		}
	}
	how := "lower one of: " + strings.Join(ways, "; ")
	if len(ways) == 0 {
		how = "no setting of this run fits it on its own: use a smaller model, or lower several of per_device_train_batch_size, num_generations, max_completion_length and max_prompt_length together"
		if est.loading() > Budget(avail) {
			how = "the model alone does not fit while loading: use a smaller model, or a 4-bit folder made elsewhere with `rlhfstation quantize`"
		}
	}
	return fmt.Errorf("the run needs at least %s of memory (about %s with the garbage between collections) but %s is available (%s): %s",
		human.Bytes(est.Least()), human.Bytes(est.Total()), human.Bytes(avail), est, how)
}
