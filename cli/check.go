package cli

import (
	"fmt"
	"io"
	"strings"

	"rlhfstation/engine"
	"rlhfstation/engine/check"
	"rlhfstation/internal/human"
)

func init() {
	register(command{name: "check", summary: "what a run on a model folder would load, render and need, from headers only", order: 41, run: runCheck})
}

func runCheck(s streams, args []string) error {
	fs := newFlagSet("check", checkHelp, s.stderr)
	model := fs.String("model", "", modelFlagHelp)
	asJSON := fs.Bool("json", false, `print one JSON document {"dir", "model_type", "family", "sources", "weights", "tokenizer", "chat_template", "generation", "memory", "warnings"}`)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("check takes no arguments (got %q): the folder is --model DIR", strings.Join(rest, " "))
	}
	dir, err := engine.ModelDir(*model)
	if err != nil {
		return err
	}
	r, err := check.Folder(dir, check.HostMemory())
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, r)
	}
	return writeCheck(s.stdout, r)
}

func writeCheck(w io.Writer, r *check.Report) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("%s: %s (the %s family)\n", r.Dir, r.ModelType, r.Family)
	p("\nread from:\n")
	for _, s := range r.Sources {
		p("  %-42s %-24s %s\n", s.Name, fmt.Sprint(s.Value), s.From)
	}
	wt := r.Weights
	p("\nweights:\n  %s parameters in the config's layout", human.Count(wt.Params))
	switch {
	case len(wt.Absent) > 0:
		p("; absent: %s\n", strings.Join(wt.Absent, ", "))
	default:
		p("; %d tensors, %s in %d file(s), %s", wt.Count, human.Bytes(wt.Bytes), len(wt.Files), strings.Join(wt.DTypes, "/"))
		if wt.Quantized > 0 {
			p(", %d linears 4-bit", wt.Quantized)
		}
		if wt.QuantizedHead {
			p(", lm_head 4-bit")
		}
		p("\n")
	}
	if wt.TotalSize > 0 && wt.Params > 0 {
		p("  index total_size %s: %.2f bytes per parameter\n", human.Bytes(wt.TotalSize), float64(wt.TotalSize)/float64(wt.Params))
	}
	if len(wt.Unused) > 0 {
		p("  not read by the model: %s\n", strings.Join(wt.Unused, ", "))
	}
	if t := r.Tokenizer; t != nil {
		p("\ntokenizer:\n  %d tokens for vocab_size %d\n", t.Tokens, t.VocabSize)
		for _, k := range []string{"bos_token", "eos_token", "pad_token", "unk_token"} {
			if v, ok := t.Special[k]; ok {
				p("  %-10s %s\n", k, v)
			}
		}
		p("  encoding a text adds: %s\n", orNone(t.AddedByEncode))
	}
	if t := r.Template; t != nil {
		p("\nchat template (%s), one user message:\n", t.Source)
		for _, line := range strings.Split(strings.TrimRight(t.Example, "\n"), "\n") {
			p("  | %s\n", line)
		}
	}
	g := r.Generation
	temp, topP, topK := g.Sampling()
	from := g.Path
	if from == "" {
		from = "no generation_config.json: transformers' defaults"
	}
	p("\ngeneration defaults (generate, eval; a run uses its GRPO settings) from %s:\n  temperature %g, top_p %g, top_k %d, eos %v\n", from, temp, topP, topK, g.EOS)
	m := r.Memory
	p("\nmemory of a default run (%s): about %s\n", m.Settings, human.Bytes(m.Total))
	for _, f := range m.Fits {
		verdict := "fits"
		if !f.Fits {
			verdict = "does not fit; " + f.Advice
		}
		p("  %-10s %8s  %s\n", f.Device, human.Bytes(f.Capacity), verdict)
	}
	if len(r.Warnings) > 0 {
		p("\nwarnings:\n")
		for _, s := range r.Warnings {
			p("  - %s\n", s)
		}
	}
	return nil
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, " ")
}

const checkHelp = `check [--model DIR] [--json]

Says what a run on the model folder DIR would load, render and need, reading its metadata and
the safetensors headers only (no weight is read: an 8B folder takes well under a second):
  - the family, and which value was read from which file and key (transformers 4 and 5 forms);
  - the parameter count of the config's layout, against the index's total_size;
  - the tokenizer: its tokens against vocab_size, the special tokens, what encoding adds, and a
    warning when a rendered chat prompt would start with two BOS;
  - the chat template, rendering one user message;
  - the generation defaults of generation_config.json (those of generate and eval);
  - the memory of a default run (NF4 + LoRA r 16, the default batch), the estimate a run's
    precheck makes, on this machine's memory and on GPUs of 24, 48 and 80 GB, and what to
    lower where it does not fit.
A folder holding metadata only (no weights, no tokenizer.json) is described with warnings.
Exit 0 when a run could load the folder's files, 1 when not.
`
