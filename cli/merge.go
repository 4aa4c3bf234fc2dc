package cli

import (
	"rlhfstation/engine"
	"rlhfstation/safetensors"
)

func init() {
	register(command{name: "merge", summary: "merge a LoRA adapter into its base: a plain Hugging Face model folder", order: 85, run: runMerge})
}

const mergeHelp = `merge --model DIR --adapter CKPT --out DIR [--dtype bf16|f16|f32] [--json]

Writes the model with the adapter merged into its weights, W + s·B·A (PEFT's merge_and_unload),
as a plain Hugging Face folder: what transformers, vLLM and llama.cpp's converter load. A 4-bit
base (bitsandbytes layout, as quantize writes it) is dequantized first; config.json loses its
quantization_config and names the dtype written; the weights go into model.safetensors, or into
5 GB shards with model.safetensors.index.json; tokenizer and other small files are copied. The
adapter is checked against the model before anything is written, and the folder appears only
when complete (written beside it, then renamed).`

func runMerge(s streams, args []string) error {
	fs := newFlagSet("merge", mergeHelp, s.stderr)
	modelFlag := fs.String("model", "", modelFlagHelp)
	adapter := fs.String("adapter", "", "the LoRA adapter `CKPT`: a run's checkpoint or any PEFT LoRA adapter folder")
	out := fs.String("out", "", "output model folder `DIR` (must not exist, or be empty)")
	dtype := fs.String("dtype", "", "dtype of the weights written: bf16, f16 or f32 (default: the model's own torch_dtype, f32 when it has none)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON document")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("merge takes no arguments (got %q)", rest[0])
	}
	if *adapter == "" || *out == "" {
		return usagef("merge needs --adapter CKPT and --out DIR")
	}
	dt, ok := map[string]safetensors.DType{"": "", "bf16": safetensors.BF16, "f16": safetensors.F16, "f32": safetensors.F32}[*dtype]
	if !ok {
		return usagef("--dtype %q: bf16, f16 or f32", *dtype)
	}
	dir, err := engine.ModelDir(*modelFlag)
	if err != nil {
		return err
	}
	sum, err := engine.Merge(dir, *adapter, *out, engine.MergeOptions{DType: dt, Progress: s.stderr})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, sum)
	}
	return sum.WriteText(s.stdout)
}
