package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"rlhfstation/engine"
	"rlhfstation/presets"
	"rlhfstation/rewards"
)

func init() {
	register(command{name: "baseline", summary: "compute the perplexity baselines of a reference text set (baselines.json)", order: 55, run: runBaseline})
}

func runBaseline(s streams, args []string) error {
	fs := newFlagSet("baseline", "baseline --model DIR --data FILE [--preset P] [--out baselines.json] [--max-samples N] [--json]\n\n"+
		"Scores reference texts with the model (adapters off) and writes the baselines B_word, B_phrase,\n"+
		"B_sentence (geometric means over samples) that the perplexity reward compares completions with.\n"+
		"FILE: GSM8K JSONL (answers scored after their question), JSONL with \"prompt\" and \"answer\"\n"+
		"(answers after prompts; prompts alone when there is no answer), JSONL with \"text\", or plain text\n"+
		"(documents separated by blank lines). Documents longer than 256 tokens are cut into chunks, each\n"+
		"a sample scored after the text before it. With --preset, the samples are the text that preset's\n"+
		"perplexity reward measures: for math, the reasoning (each answer without its final `#### N` line,\n"+
		"and answers that are bare numbers left out).", s.stderr)
	modelFlag := fs.String("model", "", modelFlagHelp)
	dataPath := fs.String("data", "", "reference texts `FILE` (required)")
	out := fs.String("out", "baselines.json", "output `FILE`")
	maxSamples := fs.Int("max-samples", 0, "stop after `N` samples (0: all)")
	chunk := fs.Int("chunk-tokens", engine.BaselineChunkTokens, "largest sample in tokens")
	asJSON := fs.Bool("json", false, "print the baselines document on stdout too")
	presetName := fs.String("preset", "", "measure the text preset `P`'s perplexity reward measures (math: the reasoning); default every word")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("baseline takes no positional arguments (got %q)", rest[0])
	}
	if *dataPath == "" {
		return usagef("baseline needs --data FILE (reference texts)")
	}
	if *maxSamples < 0 || *chunk < 1 {
		return usagef("--max-samples must be ≥ 0 and --chunk-tokens ≥ 1")
	}
	dir, err := engine.ModelDir(*modelFlag)
	if err != nil {
		return err
	}
	text := rewards.CompletionText
	if *presetName != "" {
		p, err := presets.Load(*presetName)
		if err != nil {
			return usageError{err.Error()}
		}
		if p.PPL == nil {
			return usagef("preset %s has no perplexity reward: it needs no baselines", p.Name)
		}
		text = p.PPL.Text
	}
	b, err := engine.BaselinesOfFile(dir, *dataPath, engine.BaselineOptions{MaxSamples: *maxSamples, ChunkTokens: *chunk,
		Progress: newBaselineProgress(s.stderr, "scoring"), Text: text})
	if err != nil {
		return err
	}
	if err := b.Save(*out); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(s.stdout, true, b)
	}
	printBaselines(s.stdout, b)
	fmt.Fprintf(s.stdout, "wrote %s\n", *out)
	return nil
}

func printBaselines(w io.Writer, b rewards.Baselines) {
	fmt.Fprintf(w, "baselines over %d samples of %s\n", b.Samples, b.Source)
	if b.Text == rewards.ReasoningText {
		fmt.Fprintln(w, "measuring the reasoning: each text without its final `#### N` line")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "level\tB\tstd\tp5\tp25\tp50\tp75\tp95\t")
	row := func(name string, v, std float64, p rewards.Percentiles) {
		fmt.Fprintf(tw, "%s\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t\n", name, v, std, p.P5, p.P25, p.P50, p.P75, p.P95)
	}
	row("word", b.Levels.Word, b.Std.Word, b.Percentiles.Word)
	row("phrase", b.Levels.Phrase, b.Std.Phrase, b.Percentiles.Phrase)
	row("sentence", b.Levels.Sentence, b.Std.Sentence, b.Percentiles.Sentence)
	tw.Flush()
	fmt.Fprintf(w, "model %s, tokenizer %s\n", b.ModelHash, b.TokenizerHash)
}

// newBaselineProgress draws "label [#####.....] done/total, rate/s, ETA" in place on a terminal;
// elsewhere (a file, a pipe) it prints nothing.
func newBaselineProgress(w io.Writer, label string) func(done, total int) {
	if !isTerminal(w) {
		return nil
	}
	start := time.Now()
	return func(done, total int) {
		const width = 30
		fill := width * done / max(total, 1)
		el := time.Since(start).Seconds()
		rate := float64(done) / max(el, 1e-9)
		eta := ""
		if done < total && rate > 0 {
			eta = fmt.Sprintf(", ETA %s", time.Duration(float64(total-done)/rate*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprintf(w, "\r%s [%s%s] %d/%d samples, %.1f/s%s\x1b[K", label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total, rate, eta)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}
