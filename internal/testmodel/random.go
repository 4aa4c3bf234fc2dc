package testmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"rlhfstation/engine/model"
	"rlhfstation/safetensors"
)

// WriteRandomFolder writes a random-weight folder of a published layout to dir: cfg as its
// config.json and bf16 weights under the family's tensor names and shapes (what
// model.Layout names: the published ones), in one model.safetensors as the small checkpoints
// are published, or in shards model-0000i-of-0000n.safetensors of about shardBytes with
// model.safetensors.index.json when shardBytes > 0. The values are streamed to the files as
// they are made, so a folder larger than memory can be written. Linear and embedding values
// have magnitudes in [1/64, 1/32) with random signs and mantissas; norms are 1. No tokenizer
// is written.
func WriteRandomFolder(dir string, cfg map[string]any, shardBytes int64, seed uint64) error {
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	c, err := model.ParseConfig(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return err
	}
	layout := model.Layout(c)
	var total int64
	for _, ts := range layout {
		total += 2 * numel(ts.Shape)
	}
	var shards [][]model.TensorShape
	if shardBytes <= 0 {
		shards = [][]model.TensorShape{layout}
	} else {
		var size int64
		for _, ts := range layout {
			if len(shards) == 0 || size >= shardBytes {
				shards, size = append(shards, nil), 0
			}
			shards[len(shards)-1] = append(shards[len(shards)-1], ts)
			size += 2 * numel(ts.Shape)
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	meta := map[string]string{"format": "pt"}
	weightMap := map[string]string{}
	for i, shard := range shards {
		file := safetensors.SingleFile
		if shardBytes > 0 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		streamed := make([]safetensors.Streamed, len(shard))
		for j, ts := range shard {
			weightMap[ts.Name] = file
			norm := strings.HasSuffix(ts.Name, "norm.weight")
			n := numel(ts.Shape)
			streamed[j] = safetensors.Streamed{Name: ts.Name, DType: safetensors.BF16, Shape: ts.Shape,
				Fill: func(w io.Writer) error { return randomBF16(w, n, norm, rng) }}
		}
		if err := safetensors.WriteStreamed(filepath.Join(dir, file), streamed, meta); err != nil {
			return err
		}
	}
	if shardBytes <= 0 {
		return nil
	}
	idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
}

// randomBF16 writes n bf16 values: 1.0 for a norm, else random sign and mantissa with the
// exponent of 2^-6, four values per 64-bit draw.
func randomBF16(w io.Writer, n int64, norm bool, rng *rand.Rand) error {
	const (
		signMantissa = 0x807f_807f_807f_807f
		exponent     = (127 - 6) << 7 * 0x0001_0001_0001_0001
		one          = 0x3f80_3f80_3f80_3f80
	)
	const chunk = 1 << 20
	buf := make([]byte, chunk+8) // room for the last 64-bit store past an uneven tail
	for n > 0 {
		k := min(chunk, 2*n)
		for i := int64(0); i < k; i += 8 {
			v := uint64(one)
			if !norm {
				v = rng.Uint64()&signMantissa | exponent
			}
			binary.LittleEndian.PutUint64(buf[i:], v) // k is even; a tail of 2, 4 or 6 bytes is cut below
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k / 2
	}
	return nil
}

func numel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}
