package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"rlhfstation/engine/control"
	"rlhfstation/engine/events"
	"rlhfstation/engine/monitor"
	"rlhfstation/engine/runs"
	"rlhfstation/tui"
	"rlhfstation/tui/replay"
	"rlhfstation/tui/styles"
)

func init() {
	register(command{name: "replay", summary: "the dashboard over a run: this tool's, or a TRL, verl, OpenRLHF or W&B run", order: 20,
		run: func(s streams, args []string) error { return runReplay(s, "replay", false, args) }})
	register(command{name: "watch", summary: "replay --follow: the dashboard over a live run as it writes", order: 21,
		run: func(s streams, args []string) error { return runReplay(s, "watch", true, args) }})
}

// replayPoll is how often followed files are checked for more.
const replayPoll = 250 * time.Millisecond

const replayUsage = ` DIR [--follow] [--summary] [--json] [--theme auto|dark|light] [--stop-on RULES]

Shows the dashboard over the run in DIR: a run folder of this tool (events.jsonl), a TRL /
Hugging Face Trainer output folder (TensorBoard events under runs/, else trainer_state.json of
the folder or its newest checkpoint-N/), verl's file-logger JSONL or TensorBoard folder, or
OpenRLHF's TensorBoard folder, or a W&B run (wandb/run-*/, offline-run-*/, latest-run, or a
folder holding wandb/: its run-<id>.wandb transaction log); DIR may also be one of those files. It says what it found. Other
tools' metrics are shown under this tool's names (the README has the table), and the alerts are
computed as the metrics arrive. With --follow it keeps reading as the run writes, until the run
ends (verl and OpenRLHF log no end: with --summary, Ctrl-C prints the summary of what was read,
then exits with 130). --summary prints a plain-text summary instead of the dashboard (the
default when stdout is not a terminal); --summary --json prints one JSON document: the run,
each metric's first/last/min/max and trends (over the whole run, and the recent window), the
anomalies, reward reliability and checkpoints. NO_COLOR is honoured.

Following a run in this tool's format (a --batch run, or a TRL run written by
examples/rlhfstation_callback.py), the keys steer it through its control file (control.json):
space pauses or resumes at the next step boundary, s saves a checkpoint, q then y stops it
after a save; the trainer acknowledges each request in its events. --stop-on nan,kl_spike
(or the run's own [monitor] stop_on) asks it to save and stop at the first such alert; the
names are nan, kl_spike, critical or a rule of the monitor.`

func runReplay(s streams, name string, follow bool, args []string) error {
	fs := newFlagSet(name, name+replayUsage, s.stderr)
	fl := fs.Bool("follow", follow, "keep reading as the run writes, until it ends")
	summary := fs.Bool("summary", false, "print a plain-text summary instead of the dashboard")
	asJSON := fs.Bool("json", false, "with --summary: print one JSON document")
	theme := fs.String("theme", "auto", "palette: auto (ask the terminal), dark or light")
	stopOnFlag := fs.String("stop-on", "", "comma-separated alerts that stop a followed run after a save (nan, kl_spike, critical, a rule)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	var stopOn []string
	if *stopOnFlag != "" {
		stopOn = strings.Split(*stopOnFlag, ",")
		if err := monitor.CheckStopOn(stopOn); err != nil {
			return usagef("--stop-on: %v", err)
		}
	}
	if len(pos) != 1 {
		return usagef("%s takes one run folder (rlhfstation %s DIR), got %d arguments", name, name, len(pos))
	}
	th, ok := map[string]tui.Theme{"auto": tui.ThemeAuto, "dark": tui.ThemeDark, "light": tui.ThemeLight}[*theme]
	if !ok {
		return usagef("--theme: %q is not auto, dark or light", *theme)
	}
	run, err := runs.Detect(pos[0])
	if err != nil {
		return err
	}
	if run.Kind != runs.KindOwn {
		fmt.Fprintln(s.stderr, "rlhfstation: found "+run.Describe())
	}
	opts := runs.Options{Follow: *fl, Poll: replayPoll}
	// A run in this tool's format reads its control file while it trains: a followed one can
	// be steered, and stopped on alerts.
	steer := *fl && run.Kind == runs.KindOwn
	if len(stopOn) > 0 && !steer {
		return usagef("--stop-on needs a live run in this tool's format (a --batch run, or one written by examples/rlhfstation_callback.py) followed with --follow")
	}
	stream := func(ctx context.Context) <-chan events.Event {
		ch := run.Stream(ctx, opts)
		if steer {
			ch = control.Guard(run.Dir, stopOn, ch)
		}
		return ch
	}

	if *summary || *asJSON || !isTerminal(s.stdout) {
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		return replaySummary(ctx, s.stdout, run, stream(ctx), *asJSON)
	}
	// The TUI handles SIGINT and SIGTERM itself.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sess := tui.Session{Events: stream(ctx), RunDir: run.Dir}
	if steer {
		sess.Control, sess.Detached = control.Controller{Dir: run.Dir, By: "watch"}, true
	}
	m := tui.New(tui.Options{
		Session:  sess,
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
		return fmt.Errorf("%s %s: %w", name, pos[0], err)
	}
	return nil
}

// replaySummary digests the run and prints the summary; when following, it waits for the run
// to end first.
func replaySummary(ctx context.Context, stdout io.Writer, run *runs.Run, stream <-chan events.Event, asJSON bool) error {
	d := monitor.NewDigest(monitor.DefaultThresholds())
	for e := range stream {
		d.Apply(e)
	}
	interrupted := ctx.Err() != nil // verl and OpenRLHF log no end: the summary of what was read
	cps, err := runs.Checkpoints(run.Dir)
	if err != nil {
		return err
	}
	for _, c := range cps {
		d.AddCheckpoint(c.Step, c.Path, nil)
	}
	rep := summaryDoc{RunReport: d.Report(), Path: run.Dir, Kind: string(run.Kind), Found: run.Describe(), Notes: run.Notes}
	if run.Kind != runs.KindOwn {
		for name := range rep.Metrics {
			if !runs.IsDesignName(name) {
				rep.Unmapped = append(rep.Unmapped, name)
			}
		}
		sort.Strings(rep.Unmapped)
	}
	if asJSON {
		err = writeJSON(stdout, true, rep)
	} else {
		err = replay.Summary(stdout, rep.RunReport, replay.Found{Description: rep.Found, Notes: rep.Notes,
			Unmapped: rep.Unmapped, Foreign: run.Kind != runs.KindOwn}, time.Now())
	}
	if err == nil && interrupted {
		err = exitError{code: exitInterrupted, err: errors.New("interrupted while following " + run.Source + " (the summary above covers what was read)")}
	}
	return err
}

// summaryDoc is the JSON document of replay --summary --json: monitor.RunReport with where the
// run was read from.
type summaryDoc struct {
	Path  string   `json:"path"`
	Kind  string   `json:"kind"`  // rlhfstation, trl, verl, openrlhf, tensorboard
	Found string   `json:"found"` // what was read, in words
	Notes []string `json:"notes,omitempty"`
	// Unmapped are, for another tool's run, the metrics without a DESIGN §5 name (kept as logged).
	Unmapped []string `json:"unmapped,omitempty"`
	monitor.RunReport
}
