package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/engine/data"
	"rlhfstation/engine/data/synth"
	"rlhfstation/presets"
)

func init() {
	register(command{name: "batch", summary: "headless GRPO run (rlhfstation --batch)", order: 1, run: runBatch})
}

const batchUsage = `--batch [--config run.toml] [--preset story] [--model DIR] [--data FILE] [--steps N] [--out DIR] [--resume RUNDIR] [flags]

Runs GRPO headless: the same engine as the workstation, writing the same run folder
(config.toml, events.jsonl, tb/, baselines.json, checkpoints/). Without --model it trains the
built-in model on the preset's built-in prompts. Settings come from, in order of precedence:
flags, the --config file (or RUNDIR/config.toml with --resume), the preset's [grpo] table,
the built-in model's run defaults (when it is the model), the defaults of DESIGN §5.
SIGINT/SIGTERM save a checkpoint and exit with 130.`

func runBatch(s streams, args []string) error {
	fs := newFlagSet("batch", batchUsage, s.stderr)
	fs.Bool("batch", true, "run headless (this mode)")
	flags := config.Bind(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("--batch takes no positional arguments (got %q)", rest[0])
	}
	cfg, modelDir, modelName, err := resolveRun(flags)
	if err != nil {
		return err
	}
	if err := engine.CheckConfig(cfg); err != nil {
		return usagef("%v", err)
	}
	var setupLines atomic.Int64 // printed during New; the engine repeats them as log events
	logf := func(format string, a ...any) {
		fmt.Fprintf(s.stderr, format+"\n", a...)
		setupLines.Add(1)
	}
	prompts, err := builtinPrompts(cfg)
	if err != nil {
		return err
	}
	e, err := engine.New(cfg, engine.Options{ModelDir: modelDir, ModelName: modelName, Prompts: prompts,
		Resume: flags.Resume(), Log: logf})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p := newBatchProgress(s.stdout, isTerminal(s.stdout))
	p.skipLogs = int(setupLines.Load())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	for ev := range e.Events() {
		p.Handle(ev)
	}
	err = <-done
	fmt.Fprintf(s.stdout, "run folder: %s\n", e.RunDir())
	switch {
	case errors.Is(err, engine.ErrInterrupted):
		return exitError{code: exitInterrupted, err: errors.New("interrupted: checkpoint saved")}
	case errors.Is(err, engine.ErrStopped):
		return nil
	}
	return err
}

// resolveRun builds the run configuration and picks the model folder. The built-in model
// brings run defaults of its own (small batches, a learning rate for its size), layered under
// the preset's [grpo] table.
func resolveRun(flags *config.Flags) (cfg *config.Config, modelDir, modelName string, err error) {
	presetTable := func(name string) (map[string]any, string, error) {
		p, err := presets.Load(name)
		if err != nil {
			return nil, "", err
		}
		return p.GRPO, "preset " + name + " [grpo]", nil
	}
	cfg, err = flags.Resolve(presetTable)
	if err != nil {
		return nil, "", "", usageError{err.Error()}
	}
	if cfg.Model != "" {
		return cfg, cfg.Model, cfg.Model, nil
	}
	if env := os.Getenv("RLHFSTATION_MODEL"); env != "" {
		cfg.Model = env
		return cfg, env, env, nil
	}
	dir, err := builtinModelDir()
	if err != nil {
		return nil, "", "", err
	}
	withBuiltin := func(name string) (map[string]any, string, error) {
		table, source, err := presetTable(name)
		if err != nil {
			return nil, "", err
		}
		merged := map[string]any{}
		for k, v := range builtinRunDefaults {
			merged[k] = v
		}
		for k, v := range table {
			merged[k] = v
		}
		return merged, "built-in model defaults + " + source, nil
	}
	if cfg, err = flags.Resolve(withBuiltin); err != nil {
		return nil, "", "", usageError{err.Error()}
	}
	return cfg, dir, "built-in", nil
}

// builtinPrompts are the prompts of a run without --data: the synthetic corpus's held-out
// prompts of the preset's domain (the preset it extends, for variants such as
// math-aggressive; story for presets of other names).
func builtinPrompts(cfg *config.Config) ([]data.Example, error) {
	if cfg.Data != "" {
		return nil, nil
	}
	name := cfg.Preset
	if p, err := presets.Load(name); err == nil {
		name = p.Root
	}
	domain := "story"
	for _, d := range synth.Domains() {
		if d == name {
			domain = d
		}
	}
	ps, err := synth.Prompts(domain, cfg.Seed, 512)
	if err != nil {
		return nil, err
	}
	out := make([]data.Example, len(ps))
	for i, p := range ps {
		// The reference continuation is what the baselines are computed on (DESIGN §6.1's
		// "reference answers where the data has them").
		out[i] = data.Example{Prompt: p.Prompt, Answer: p.Answer, Text: p.Reference}
	}
	return out, nil
}
