package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"rlhfstation/tui"
	"rlhfstation/tui/replay"
	"rlhfstation/tui/state"
	"rlhfstation/tui/styles"
)

func init() {
	register(command{name: "replay", summary: "the dashboard over a finished or running run's events", order: 20, run: runReplay})
}

// replayPoll is how often a followed events.jsonl is checked for new lines.
const replayPoll = 250 * time.Millisecond

func runReplay(s streams, args []string) error {
	fs := newFlagSet("replay", "replay RUNDIR [--follow] [--theme auto|dark|light]\n\n"+
		"Shows the dashboard over RUNDIR/events.jsonl. With --follow it keeps reading the file as a\n"+
		"live run appends to it, until run_end. When stdout is not a terminal it prints a plain-text\n"+
		"summary of the run instead (with --follow, once the run has ended). NO_COLOR is honoured.", s.stderr)
	follow := fs.Bool("follow", false, "keep reading events.jsonl as the run writes it, until run_end")
	theme := fs.String("theme", "auto", "palette: auto (ask the terminal), dark or light")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("replay takes one run folder (rlhfstation replay RUNDIR), got %d arguments", len(pos))
	}
	th, ok := map[string]tui.Theme{"auto": tui.ThemeAuto, "dark": tui.ThemeDark, "light": tui.ThemeLight}[*theme]
	if !ok {
		return usagef("--theme: %q is not auto, dark or light", *theme)
	}
	dir := pos[0]
	if err := replay.Check(dir); err != nil {
		return err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if !isTerminal(s.stdout) {
		return replaySummary(ctx, s.stdout, dir, *follow)
	}
	// The TUI handles SIGINT and SIGTERM itself.
	cancel()
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	m := tui.New(tui.Options{
		Session:  tui.Session{Events: replay.Stream(sctx, replay.EventsFile(dir), *follow, replayPoll), RunDir: dir},
		Inspect:  inspectCheckpoint,
		Generate: generateFromRunCheckpoint,
		Theme:    th,
		NoColor:  styles.NoColorEnv(),
	})
	_, err = tui.Run(m, tuiStreams(s)...)
	switch {
	case tui.Interrupted(err):
		return exitError{code: exitInterrupted}
	case err != nil:
		return fmt.Errorf("replay %s: %w", dir, err)
	}
	return nil
}

// replaySummary prints the plain-text summary; when following, it first waits for run_end.
func replaySummary(ctx context.Context, stdout io.Writer, dir string, follow bool) error {
	r := state.New()
	for e := range replay.Stream(ctx, replay.EventsFile(dir), follow, replayPoll) {
		r.Apply(e)
	}
	if ctx.Err() != nil {
		return exitError{code: exitInterrupted, err: errors.New("interrupted while following " + replay.EventsFile(dir))}
	}
	cps, err := replay.Checkpoints(dir)
	if err != nil {
		return err
	}
	for _, c := range cps {
		r.AddFolderCheckpoint(c.Path, c.Step)
	}
	return replay.Summary(stdout, r, time.Now())
}
