package cli

import (
	"fmt"
	"rlhfstation/engine"
	"rlhfstation/quant"
)

func init() {
	register(command{name: "quantize", summary: "write a 4-bit (NF4/FP4) copy of a model folder in bitsandbytes' layout", order: 80, run: runQuantize})
}

const quantizeHelp = `quantize --model DIR --out DIR [--quant nf4|fp4] [--blocksize 64] [--double-quant=true] [--head] [--json]

Writes a copy of the model folder with every linear weight of the transformer blocks quantized
to 4 bits as bitsandbytes does (llama family: q/k/v/o_proj, gate/up/down_proj; GPT-2: c_attn,
c_proj, c_fc, transposed to [out, in] first as transformers does for Conv1D), and everything
else (embeddings, LM head, norms, biases) as it was. config.json gains a quantization_config,
so transformers loads the folder with bitsandbytes; tokenizer and other small files are
copied. The folder appears only when complete (written beside it, then renamed). It loads in
every command (score, generate, --batch…) without the original, its linears staying 4-bit in
memory. --head quantizes an untied LM head too (llm_int8_skip_modules then lists none, so
transformers loads it 4-bit as well): a quarter of a bf16 head's bytes, read by every decoded
token; a tied head is refused (bitsandbytes has no 4-bit embedding: use [quant] head = true in a
run, which quantizes the tied tensor in memory).`

func runQuantize(s streams, args []string) error {
	fs := newFlagSet("quantize", quantizeHelp, s.stderr)
	modelFlag := fs.String("model", "", modelFlagHelp)
	out := fs.String("out", "", "output model folder `DIR` (must not exist, or be empty)")
	qtype := fs.String("quant", "nf4", "4-bit data type: nf4 or fp4")
	bs := fs.Int("blocksize", 64, fmt.Sprintf("values per absmax block: one of %v", quant.BlockSizes))
	dq := fs.Bool("double-quant", true, "quantize the absmax values too (8-bit, blocks of 256): about 4.13 instead of 4.5 bits per parameter")
	head := fs.Bool("head", false, "quantize the (untied) LM head too")
	asJSON := fs.Bool("json", false, "print the summary as one JSON document")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("quantize takes no arguments (got %q)", rest[0])
	}
	if *out == "" {
		return usagef("quantize needs --out DIR")
	}
	t, err := quant.ParseType(*qtype)
	if err != nil {
		return usagef("--quant %q: nf4 or fp4", *qtype)
	}
	opt := quant.Options{Type: t, BlockSize: *bs, DoubleQuant: *dq}
	if err := opt.Check(); err != nil {
		return usagef("--blocksize %d: one of %v", *bs, quant.BlockSizes)
	}
	dir, err := engine.ModelDir(*modelFlag)
	if err != nil {
		return err
	}
	sum, err := quant.QuantizeFolder(dir, *out, quant.FolderOptions{Options: opt, Progress: s.stderr, Head: *head})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, sum)
	}
	return sum.WriteText(s.stdout)
}
