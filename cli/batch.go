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
)

func init() {
	register(command{name: "batch", summary: "headless GRPO run (rlhfstation --batch)", order: 1, run: runBatch})
}

const batchUsage = `--batch [--config run.toml] [--preset story] [--model DIR] [--data FILE] [--steps N] [--out DIR] [--resume RUNDIR] [--init-adapter CKPT] [flags]

Runs GRPO headless: the same engine as the workstation, writing the same run folder
(config.toml, events.jsonl, tb/, baselines.json, checkpoints/). Without --model it trains the
built-in model on the preset's built-in prompts. Settings come from, in order of precedence:
flags, the --config file (or RUNDIR/config.toml with --resume), the preset's [grpo] table,
the built-in model's run defaults (when it is the model), the defaults of DESIGN §5.
Below, "(default V)" is DESIGN §5's value, used with --model; "[built-in model: V]" is where a
run on the built-in model starts instead. SIGINT/SIGTERM save a checkpoint and exit with 130.`

func runBatch(s streams, args []string) error {
	fs := newFlagSet("batch", batchUsage, s.stderr)
	fs.Bool("batch", true, "run headless (this mode)")
	flags := config.Bind(fs)
	flags.AnnotateDefaults(engine.BuiltinRunDefaults(), "built-in model")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("--batch takes no positional arguments (got %q)", rest[0])
	}
	cfg, opts, err := engine.ResolveRun(flags)
	if err != nil {
		return err
	}
	if err := engine.CheckConfig(cfg); err != nil {
		return usagef("%v", err)
	}
	var setupLines atomic.Int64 // printed during New; the engine repeats them as log events
	opts.Log = func(format string, a ...any) {
		fmt.Fprintf(s.stderr, format+"\n", a...)
		setupLines.Add(1)
	}
	e, err := engine.New(cfg, opts)
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
	var alert *engine.AlertStopError
	switch {
	case errors.As(err, &alert):
		return fmt.Errorf("%s: checkpoint saved; resume with: rlhfstation --batch --resume %s", alert.Error(), e.RunDir())
	case errors.Is(err, engine.ErrInterrupted):
		return exitError{code: exitInterrupted, err: fmt.Errorf("interrupted: checkpoint saved; resume with: rlhfstation --batch --resume %s", e.RunDir())}
	case errors.Is(err, engine.ErrStopped):
		return nil
	}
	return err
}
