package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"rlhfstation/internal/human"
	"strings"
	"syscall"
	"time"

	"rlhfstation/engine/pretrain"
	"rlhfstation/safetensors"
)

func init() {
	register(command{name: "pretrain", summary: "train a small llama-family model from scratch (how the built-in one is made)", order: 90, run: runPretrain})
}

const pretrainHelp = `pretrain --out DIR [--corpus synthetic|FILE] [--layers N --dim D --heads H --kv-heads K --hidden F --vocab V --context T] [--steps N] [--batch B] [--lr X] [--seed S] [--corpus-bytes N] [--dtype f32|f16|bf16] [--json]

Trains a llama-family model from scratch, every parameter, on the built-in synthetic corpus
(stories, technical prose, code, arithmetic with "#### N" answers) or on a text FILE (documents
separated by blank lines, or one a line when there are none; JSONL "text" fields), and writes
a complete Hugging Face folder to DIR: config.json, generation_config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, and pretrain.json (the settings and figures).

First a byte-level BPE tokenizer of V entries is learned from the corpus (<|endoftext|> is id 0,
the EOS that ends every document; numbers are split digit by digit). Each step trains on B
windows of T tokens drawn with the seed, with AdamW (betas 0.9/0.95, weight decay on matrices
only), a linear warm-up then a cosine decay to zero, and the gradient clipped by global norm.
The validation loss is measured on held-out text: synthetic documents of another seed, or every
20th document of FILE. The same flags and seed give the same model on the same machine.

Progress: a bar on a terminal, otherwise one line every --log-every steps. The folder is built
beside DIR and renamed into place, replacing DIR. Ctrl-C stops after the step in flight and
still writes the model as it stands (pretrain.json marks it interrupted), then exits with 130;
a second Ctrl-C quits at once without writing.

The defaults are the built-in model's recipe.`

func runPretrain(s streams, args []string) error {
	d := pretrain.Defaults()
	c := &d.Config
	fs := newFlagSet("pretrain", pretrainHelp, s.stderr)
	out := fs.String("out", "", "write the model folder to `DIR` (required)")
	corpus := fs.String("corpus", d.Corpus, "`SOURCE`: synthetic for the built-in corpus, synthetic+tools for it with tool-call transcripts, or a text FILE")
	fs.StringVar(&d.From, "from", "", "continue training the model folder `DIR` (its shape and tokenizer) instead of a new one")
	fs.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks `N`")
	fs.IntVar(&c.Dim, "dim", c.Dim, "hidden size `D`")
	fs.IntVar(&c.Heads, "heads", c.Heads, "attention heads `H` (D/H is the head size)")
	fs.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads `K` (grouped-query attention; H must be a multiple)")
	fs.IntVar(&c.Hidden, "hidden", c.Hidden, "SwiGLU intermediate size `F`")
	fs.IntVar(&c.Vocab, "vocab", c.Vocab, "tokenizer vocabulary `V`, <|endoftext|> and the 256 bytes included")
	fs.IntVar(&c.MaxPos, "context", c.MaxPos, "context length `T`, also the training window")
	fs.IntVar(&d.Steps, "steps", d.Steps, "training steps `N`")
	fs.IntVar(&d.Batch, "batch", d.Batch, "windows `B` per step (B·T tokens a step)")
	fs.Float64Var(&d.LR, "lr", d.LR, "peak learning rate `X`")
	fs.IntVar(&d.Warmup, "warmup", d.Warmup, "warm-up steps `N` (linear from 0; a tenth of --steps when not below them), then cosine decay to 0")
	fs.Float64Var(&d.WeightDecay, "weight-decay", d.WeightDecay, "AdamW weight decay `X` on matrices (norm weights never decay)")
	fs.Float64Var(&d.Clip, "clip", d.Clip, "clip the gradient's global norm to `X`; negative for no clipping")
	fs.Uint64Var(&d.Seed, "seed", d.Seed, "random `seed`: corpus, initial weights, windows")
	fs.IntVar(&d.CorpusBytes, "corpus-bytes", d.CorpusBytes, "size in bytes `N` of the synthetic training corpus")
	fs.IntVar(&d.ValBytes, "val-bytes", d.ValBytes, "size in bytes `N` of the synthetic validation corpus")
	fs.IntVar(&d.TokenizerBytes, "tokenizer-bytes", d.TokenizerBytes, "the tokenizer learns from the first `N` bytes of the training corpus (0: all)")
	fs.IntVar(&d.EvalEvery, "eval-every", d.EvalEvery, "measure the validation loss every `N` steps (0: only at the end)")
	fs.IntVar(&d.EvalTokens, "eval-tokens", d.EvalTokens, "validation tokens `N` per measurement (0: the whole validation set)")
	dtype := fs.String("dtype", "f32", "weight `type` of model.safetensors: f32, f16 or bf16")
	logEvery := fs.Int("log-every", 50, "when the output is not a terminal, print a line every `N` steps")
	asJSON := fs.Bool("json", false, `print one JSON document at the end {"out", "params", "steps", "tokens", "seconds", "train_loss", "val_loss", "uniform_loss", "interrupted", "bytes"}; progress goes to standard error`)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	dt := map[string]safetensors.DType{"f32": safetensors.F32, "f16": safetensors.F16, "bf16": safetensors.BF16}[strings.ToLower(*dtype)]
	switch {
	case len(rest) > 0:
		return usagef("pretrain takes no positional arguments (got %q)", rest[0])
	case *out == "":
		return usagef("pretrain needs --out DIR")
	case dt == "":
		return usagef("pretrain: --dtype %q is not one of f32, f16, bf16", *dtype)
	case *logEvery < 1:
		return usagef("pretrain: --log-every must be at least 1")
	case d.Steps < 1 || d.Batch < 1 || d.LR <= 0 || d.CorpusBytes < 1 || d.ValBytes < 1:
		return usagef("pretrain: --steps, --batch, --lr, --corpus-bytes and --val-bytes must be positive")
	}
	d.Corpus = *corpus

	report := s.stdout
	if *asJSON {
		report = s.stderr
	}
	start := time.Now()
	tr, err := pretrain.New(d)
	var bad *pretrain.OptionsError
	if errors.As(err, &bad) {
		return usagef("%v", err)
	} else if err != nil {
		return err
	}
	o := tr.Opts
	trainTok, valTok := tr.Tokens()
	fmt.Fprintf(report, "corpus %s: %s training tokens, %s validation tokens; tokenizer of %d entries (%.1fs)\n",
		o.Corpus, human.Count(int64(trainTok)), human.Count(int64(valTok)), o.Config.Vocab, time.Since(start).Seconds())
	fmt.Fprintf(report, "model: llama, %d layers, dim %d, %d heads (%d kv), hidden %d, context %d: %s parameters; %d steps of %d×%d tokens\n",
		o.Config.Layers, o.Config.Dim, o.Config.Heads, o.Config.KVHeads, o.Config.Hidden, o.Config.MaxPos,
		human.Count(int64(tr.Model.NumParams())), o.Steps, o.Batch, o.Config.MaxPos)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the process
	}()
	term := !*asJSON && isTerminal(s.stdout)
	bar := &pretrainBar{out: report, terminal: term, every: *logEvery}
	res, err := tr.Run(ctx, bar.update)
	bar.clear()
	if err != nil {
		return err
	}
	if res.Interrupted {
		fmt.Fprintf(report, "interrupted after %d of %d steps: writing the model as it stands\n", res.Steps, o.Steps)
	}
	if err := tr.Save(*out, dt, res); err != nil {
		return err
	}
	size := folderSize(*out)
	if *asJSON {
		doc := map[string]any{"out": *out, "params": res.Params, "steps": res.Steps, "tokens": res.Tokens,
			"seconds": res.Elapsed.Seconds(), "train_loss": res.TrainLoss, "val_loss": res.ValLoss,
			"uniform_loss": res.UniformLoss, "interrupted": res.Interrupted, "bytes": size}
		if err := writeJSON(s.stdout, false, doc); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(s.stdout, "trained %d steps (%s tokens) in %s: train loss %.4f, validation loss %.4f nats/token (uniform guess ln %d = %.4f)\n",
			res.Steps, human.Count(int64(res.Tokens)), res.Elapsed.Round(time.Second), res.TrainLoss, res.ValLoss, o.Config.Vocab, res.UniformLoss)
		fmt.Fprintf(s.stdout, "wrote %s (%.1f MB)\n", *out, float64(size)/1e6)
	}
	if res.Interrupted {
		return exitError{code: exitInterrupted}
	}
	return nil
}

// pretrainBar shows training progress: a bar redrawn in place on a terminal, or a line
// every `every` steps, with the mean loss since the last line.
type pretrainBar struct {
	out      io.Writer
	terminal bool
	every    int
	sum      float64
	n        int
	drawn    bool
}

func (b *pretrainBar) update(p pretrain.Progress) {
	b.sum += p.Loss
	b.n++
	if !math.IsNaN(p.ValLoss) {
		b.clear()
		fmt.Fprintf(b.out, "step %d: validation loss %.4f\n", p.Step, p.ValLoss)
	}
	if b.terminal {
		const width = 30
		filled := width * p.Step / max(1, p.Steps)
		fmt.Fprintf(b.out, "\r\x1b[2Kstep %d/%d %s%s loss %.4f %.0f tok/s ETA %s", p.Step, p.Steps,
			strings.Repeat("█", filled), strings.Repeat("░", width-filled), b.sum/float64(b.n), p.TokensPerSec, p.ETA.Round(time.Second))
		b.drawn = true
		if p.Step%b.every == 0 {
			b.sum, b.n = 0, 0
		}
		return
	}
	if p.Step%b.every == 0 || p.Step == p.Steps {
		fmt.Fprintf(b.out, "step %d/%d loss %.4f lr %.2e grad-norm %.3f %.0f tok/s elapsed %s ETA %s\n", p.Step, p.Steps,
			b.sum/float64(b.n), p.LR, p.GradNorm, p.TokensPerSec, p.Elapsed.Round(time.Second), p.ETA.Round(time.Second))
		b.sum, b.n = 0, 0
	}
}

func (b *pretrainBar) clear() {
	if b.drawn {
		fmt.Fprint(b.out, "\r\x1b[2K")
		b.drawn = false
	}
}

// folderSize is the total size of the files in dir.
func folderSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && !info.IsDir() {
			n += info.Size()
		}
	}
	return n
}
