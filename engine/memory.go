package engine

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/internal/human"
	"rlhfstation/quant"
)

// Estimate is the memory a run needs at its peak, by part, in bytes.
type Estimate struct {
	Weights     int64 // the base in float32 as loaded (the quantized copy is made from it)
	Quantized   int64 // the 4-bit copy of the linears
	KVCache     int64 // generation's keys and values for every completion of a micro-batch
	Activations int64 // the training tape of one micro-batch
	Logits      int64 // rows of logits held at once
}

// Total adds the parts.
func (m Estimate) Total() int64 {
	return m.Weights + m.Quantized + m.KVCache + m.Activations + m.Logits
}

// EstimateMemory predicts a run's peak memory from the model's shape and the run's sizes.
// It is deliberately generous: activations count every per-row buffer the tape keeps (the
// block's inputs, norms, projections, attention weights over the sequence, MLP).
func EstimateMemory(mc *model.Config, c *config.Config, quantizedFolder bool) Estimate {
	params := int64(mc.Vocab)*int64(mc.Dim)*2 + int64(mc.Layers)*(int64(mc.Dim)*int64(mc.QDim()+2*mc.KVDim()+mc.QDim())+3*int64(mc.Dim)*int64(mc.Hidden))
	linears := int64(mc.Layers) * (int64(mc.Dim)*int64(mc.QDim()+2*mc.KVDim()+mc.QDim()) + 3*int64(mc.Dim)*int64(mc.Hidden))
	seq := int64(c.MaxCompletionLength)
	if c.MaxPromptLength > 0 {
		seq += int64(c.MaxPromptLength)
	} else {
		seq += 256
	}
	seq = min(seq, int64(mc.Context()))
	seqs := int64(c.PerDeviceTrainBatchSize) * int64(c.NumGenerations)
	rows := seqs * seq
	e := Estimate{Weights: params * 4}
	switch {
	case quantizedFolder: // the linears arrive 4-bit (≈4.13 bits each) and stay so
		e.Weights = (params-linears)*4 + linears*413/800
	case c.Quant.Type != "none": // the 4-bit copy is made from the loaded float32 weights
		e.Quantized = linears * 413 / 800
	}
	e.KVCache = seqs * seq * int64(mc.Layers) * 2 * int64(mc.KVDim()) * 4
	perRow := int64(12*mc.Dim+2*mc.QDim()+2*mc.KVDim()+4*mc.Hidden) + int64(mc.Heads)*seq
	e.Activations = rows * int64(mc.Layers) * perRow * 4
	e.Logits = min(rows, 1024) * int64(mc.Vocab) * 4
	return e
}

// checkMemory refuses a run whose estimate exceeds the memory available, saying what to lower.
func checkMemory(dir string, mc *model.Config, c *config.Config) error {
	quantized := false
	if b, err := os.ReadFile(filepath.Join(dir, "config.json")); err == nil {
		_, quantized, _ = quant.IsQuantized(b)
	}
	est := EstimateMemory(mc, c, quantized)
	avail, ok := availableMemory()
	if !ok || est.Total() < avail*9/10 {
		return nil
	}
	return fmt.Errorf("the run needs about %s of memory but %s is available (weights %s, 4-bit copy %s, KV cache %s, training activations %s, logits %s): lower per_device_train_batch_size (%d; raise gradient_accumulation_steps to keep the batch), num_generations (%d) or max_completion_length (%d), or use a smaller model",
		human.Bytes(est.Total()), human.Bytes(avail), human.Bytes(est.Weights), human.Bytes(est.Quantized), human.Bytes(est.KVCache),
		human.Bytes(est.Activations), human.Bytes(est.Logits), c.PerDeviceTrainBatchSize, c.NumGenerations, c.MaxCompletionLength)
}

// availableMemory reads MemAvailable from /proc/meminfo.
func availableMemory() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
