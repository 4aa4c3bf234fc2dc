package testmodel

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"rlhfstation/engine/model"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// The on-disk form of a bitsandbytes 4-bit folder (what transformers' save_pretrained writes
// for a model loaded with load_in_4bit, and so unsloth's *-bnb-4bit folders), written here
// from the published facts, independently of the project's quant writer, so that tests can
// hold both against it:
//
//   - bitsandbytes 0.50.2.dev0 (bitsandbytes-foundation/bitsandbytes at 95f9af30):
//     quantize_4bit packs the codes as uint8 of shape ((n+1)//2, 1) and keeps one float32
//     absmax per block; with compress_statistics the absmax becomes uint8 codes of
//     quantize_blockwise(absmax − mean, blocksize=256) with a float32 absmax per 256 blocks and
//     the 256-value dynamic code (functional.py). QuantState.as_dict(packed=True) keeps the
//     tensors (absmax, quant_map, nested_absmax, nested_quant_map) and packs the rest
//     (quant_type, blocksize, dtype, shape, nested_blocksize, nested_dtype, nested_offset, in
//     that order, dtype as str(torch dtype).strip("torch.")) into a uint8 tensor
//     "quant_state.bitsandbytes__<type>" holding json.dumps of them (utils.py
//     pack_dict_to_tensor); Linear4bit._save_to_state_dict stores each as
//     <module>.weight.<key> beside <module>.weight (nn/modules.py).
//   - transformers (4.46 prints it so in a saved 4-bit model's config): quantization_config
//     holds _load_in_4bit, _load_in_8bit, bnb_4bit_compute_dtype, bnb_4bit_quant_storage,
//     bnb_4bit_quant_type, bnb_4bit_use_double_quant, llm_int8_enable_fp32_cpu_offload,
//     llm_int8_has_fp16_weight, llm_int8_skip_modules, llm_int8_threshold, load_in_4bit,
//     load_in_8bit, quant_method. A module whose path equals a skip entry, or contains the
//     entry followed by ".", is not converted and stays in the checkpoint's dtype.
//   - safetensors files as torch writes them: metadata {"format": "pt"}.
//   - unsloth (unsloth_zoo peft_utils.SKIP_QUANTIZATION_MODULES) skips "lm_head",
//     "multi_modal_projector", "merger", "modality_projection", "router", "mlp.gate",
//     "vision_tower", …: names most text models lack; its dynamic 4-bit folders add whole
//     blocks' modules ("model.layers.1.mlp").

// Bnb4bitConfig is quantization_config as transformers saves an NF4, double-quantized model
// computing in bfloat16 with the given skipped modules (nil writes null).
func Bnb4bitConfig(skip []string) map[string]any {
	var s any
	if skip != nil {
		s = skip
	}
	return map[string]any{"_load_in_4bit": true, "_load_in_8bit": false, "bnb_4bit_compute_dtype": "bfloat16",
		"bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true,
		"llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false, "llm_int8_skip_modules": s,
		"llm_int8_threshold": 6.0, "load_in_4bit": true, "load_in_8bit": false, "quant_method": "bitsandbytes"}
}

// blockLinear matches the linear weights of a block that bitsandbytes converts.
var blockLinear = regexp.MustCompile(`\.layers\.\d+\.(self_attn|mlp)\.[a-z_]+_proj\.weight$`)

// skipped reports whether transformers leaves the module at path unconverted.
func skipped(path string, skip []string) bool {
	for _, k := range skip {
		if path == k || strings.Contains(path, k+".") {
			return true
		}
	}
	return false
}

// WriteBnb4bitFolder writes a random-weight folder of a published layout as a bitsandbytes
// NF4 folder (blocks of 64, double quantization, from bfloat16) is on disk: config.json is
// cfg with Bnb4bitConfig(skip); model.safetensors holds every block linear not skipped as
// packed codes and its quant state, everything else in bf16 (as WriteRandomFolder makes it).
// An untied lm_head is a linear too when skip is a list (transformers' default skips it only
// for null): listed, it stays bf16; not listed, it is 4-bit.
// The codes and scales are random; a block's scale comes out in [0.02, 0.03]. It returns the
// names of the 4-bit weights.
func WriteBnb4bitFolder(dir string, cfg map[string]any, skip []string, seed uint64) ([]string, error) {
	cfg = maps.Clone(cfg)
	cfg["quantization_config"] = Bnb4bitConfig(skip)
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	c, err := model.ParseConfig(raw)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	var tensors []safetensors.Streamed
	var fourBit []string
	for _, ts := range model.Layout(c) {
		n := numel(ts.Shape)
		linear := blockLinear.MatchString(ts.Name) || ts.Name == "lm_head.weight" && skip != nil
		if !linear || skipped(strings.TrimSuffix(ts.Name, ".weight"), skip) {
			norm := strings.HasSuffix(ts.Name, "norm.weight")
			tensors = append(tensors, safetensors.Streamed{Name: ts.Name, DType: safetensors.BF16, Shape: ts.Shape,
				Fill: func(w io.Writer) error { return randomBF16(w, n, norm, rng) }})
			continue
		}
		fourBit = append(fourBit, ts.Name)
		blocks := (n + 63) / 64
		nested := (blocks + 255) / 256
		// a multiple of 2^-12, whose shortest digits (Python's repr of offset.item()) are exact
		offset := float64(100+rng.IntN(10)) / 4096
		state := fmt.Sprintf(`{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [%d, %d], `+
			`"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": %s}`,
			ts.Shape[0], ts.Shape[1], strconv.FormatFloat(offset, 'f', -1, 64))
		nf4, dyn := quant.NF4.Code(), quant.DynamicCode
		nestedAbsmax := make([]float32, nested)
		for i := range nestedAbsmax {
			nestedAbsmax[i] = float32(0.005 * (0.9 + 0.1*rng.Float64()))
		}
		tensors = append(tensors,
			safetensors.Streamed{Name: ts.Name, DType: safetensors.U8, Shape: []int{int((n + 1) / 2), 1},
				Fill: func(w io.Writer) error { return randomBytes(w, (n+1)/2, rng) }},
			safetensors.Streamed{Name: ts.Name + ".absmax", DType: safetensors.U8, Shape: []int{int(blocks)},
				Fill: func(w io.Writer) error { return randomBytes(w, blocks, rng) }},
			f32Streamed(ts.Name+".nested_absmax", nestedAbsmax),
			f32Streamed(ts.Name+".nested_quant_map", dyn[:]),
			f32Streamed(ts.Name+".quant_map", nf4[:]),
			safetensors.Streamed{Name: ts.Name + ".quant_state.bitsandbytes__nf4", DType: safetensors.U8, Shape: []int{len(state)},
				Fill: func(w io.Writer) error { _, err := io.WriteString(w, state); return err }},
		)
	}
	return fourBit, safetensors.WriteStreamed(filepath.Join(dir, safetensors.SingleFile), tensors, map[string]string{"format": "pt"})
}

func f32Streamed(name string, v []float32) safetensors.Streamed {
	return safetensors.Streamed{Name: name, DType: safetensors.F32, Shape: []int{len(v)}, Fill: func(w io.Writer) error {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		_, err := w.Write(b)
		return err
	}}
}

func randomBytes(w io.Writer, n int64, rng *rand.Rand) error {
	buf := make([]byte, 1<<20+8)
	for n > 0 {
		k := min(1<<20, n)
		for i := int64(0); i < k; i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
