package engine

import (
	"strings"
	"testing"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
)

func TestMemoryEstimate(t *testing.T) {
	mc := &model.Config{ModelType: "llama", Vocab: 32000, Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, HeadDim: 128,
		Hidden: 14336, MaxPos: 8192}
	c := config.Default()
	est := EstimateMemory(mc, c, false)
	// An 8B-shaped model: about 7.5e9 parameters in float32 at load.
	if w := float64(est.Weights) / 4; w < 7e9 || w > 8e9 {
		t.Fatalf("parameters counted %.3g, want about 7.5e9", w)
	}
	if est.Quantized == 0 || est.Quantized > est.Weights/7 {
		t.Fatalf("the 4-bit copy %d should be about an eighth of the float32 weights %d", est.Quantized, est.Weights)
	}
	q := EstimateMemory(mc, c, true)
	if q.Weights > est.Weights/3 || q.Quantized != 0 {
		t.Fatalf("an already quantized folder: weights %d (float32 %d), copy %d", q.Weights, est.Weights, q.Quantized)
	}
	// The refusal says what to lower.
	c.PerDeviceTrainBatchSize, c.NumGenerations, c.MaxCompletionLength = 64, 64, 4096
	err := checkMemory(t.TempDir(), mc, c)
	if err == nil || !strings.Contains(err.Error(), "lower per_device_train_batch_size") {
		t.Fatalf("a run far beyond this machine's memory: %v", err)
	}
}
