package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"

	"rlhfstation/engine"
	"rlhfstation/engine/config"
	"rlhfstation/presets"
	"rlhfstation/tui"
	"rlhfstation/tui/setup"
	"rlhfstation/tui/styles"
)

func init() {
	register(command{name: "workstation", summary: "the workstation (TUI): setup screen, then the live dashboard", order: 0, run: runWorkstation})
}

const workstationUsage = `[flags]

The workstation: a setup screen (preset, model, data, adapter to start from, steps, device), then the live dashboard
of the run (space pauses, s saves, c opens the checkpoints, ? lists every key, q stops the run
after saving). Every flag of --batch may be given to preset the choices (--config run.toml,
--preset, --model, --steps…); "[built-in model: V]" marks where a run on the built-in model
starts instead of the default shown. It needs a terminal; use --batch for scripts.`

// workstationFlags are the workstation's flags: --theme and every flag of --batch.
func workstationFlags(stderr io.Writer) (*flag.FlagSet, *string, *config.Flags) {
	fs := newFlagSet("", workstationUsage, stderr)
	theme := fs.String("theme", "auto", "palette: auto (ask the terminal), dark or light")
	flags := config.Bind(fs)
	flags.AnnotateDefaults(engine.BuiltinRunDefaults(), "built-in model")
	runUsage(fs, workstationUsage, flags)
	return fs, theme, flags
}

func runWorkstation(s streams, args []string) error {
	fs, theme, flags := workstationFlags(s.stderr)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unknown command %q (rlhfstation help lists them)", rest[0])
	}
	th, ok := map[string]tui.Theme{"auto": tui.ThemeAuto, "dark": tui.ThemeDark, "light": tui.ThemeLight}[*theme]
	if !ok {
		return usagef("--theme: %q is not auto, dark or light", *theme)
	}
	if !isTerminal(s.stdout) || !isTerminal(s.stdin) {
		return usagef("the workstation needs a terminal; use rlhfstation --batch for a headless run")
	}
	defaults, _, err := engine.ResolveRun(flags)
	if err != nil {
		return err
	}
	choices, err := setupChoices(defaults)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		eng      *engine.Engine
		runErr   = make(chan error, 1)
		modelDir string
	)
	start := func(set setup.Settings) (tui.Session, error) {
		cfg, opts, err := resolveSetup(args, set, s.stderr)
		if err != nil {
			return tui.Session{}, err
		}
		e, err := engine.New(cfg, opts)
		if err != nil {
			return tui.Session{}, err
		}
		mu.Lock()
		eng, modelDir = e, opts.ModelDir
		mu.Unlock()
		go func() { runErr <- e.Run(ctx) }()
		return tui.Session{Events: e.Events(), Control: e, RunDir: e.RunDir()}, nil
	}
	var gen *engine.Policy
	generate := func(ckpt, prompt string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if gen == nil {
			if eng == nil {
				return "", errors.New("no run")
			}
			p, err := engine.LoadPolicy(modelDir, eng.Config().Quant)
			if err != nil {
				return "", err
			}
			gen = p
		}
		return gen.Generate(ckpt, prompt, 64, 0, 0)
	}
	m := tui.New(tui.Options{Setup: &choices, Start: start, Inspect: inspectCheckpoint, Generate: generate,
		Theme: th, NoColor: styles.NoColorEnv()})
	final, err := tui.Run(m, tuiStreams(s)...)
	mu.Lock()
	running := eng != nil
	mu.Unlock()
	var engErr error
	runDir := ""
	if running {
		// The TUI stops a live run before quitting; wait for the engine's last save.
		engErr = <-runErr
		runDir = eng.RunDir()
	}
	return workstationExit(s, final.Interrupted() || tui.Interrupted(err), err, engErr, runDir)
}

// resolveSetup resolves the run the setup screen chose: the command line's flags bound afresh
// each time, then the screen's non-empty fields over them. A field the user cleared after a
// failed start thus falls back to the command line or the built-in default, not to the
// value that failed.
func resolveSetup(args []string, set setup.Settings, stderr io.Writer) (*config.Config, engine.Options, error) {
	fs, _, flags := workstationFlags(stderr)
	if _, err := parseFlags(fs, args); err != nil {
		return nil, engine.Options{}, err
	}
	for name, v := range map[string]string{"preset": set.Preset, "model": set.Model, "data": set.Data,
		"init-adapter": set.Adapter, "steps": strconv.Itoa(set.Steps), "device": set.Device} {
		if v != "" && v != "0" {
			if err := fs.Set(name, v); err != nil {
				return nil, engine.Options{}, err
			}
		}
	}
	for key, v := range set.Changed { // the settings page: every other key, by its flag
		if err := fs.Set(key, v); err != nil {
			return nil, engine.Options{}, &engine.ConfigError{Err: fmt.Errorf("%s = %q: %v", key, v, err)}
		}
	}
	return engine.ResolveRun(flags)
}

// workstationExit says where the run is and how to go on with it once the terminal is back,
// and turns the way the session ended into the exit status: 130 for ctrl+c, as --batch does.
func workstationExit(s streams, interrupted bool, tuiErr, engErr error, runDir string) error {
	if runDir != "" {
		fmt.Fprintf(s.stderr, "run folder: %s\n", runDir)
		if errors.Is(engErr, engine.ErrStopped) || errors.Is(engErr, engine.ErrInterrupted) || interrupted {
			fmt.Fprintf(s.stderr, "resume with: rlhfstation --resume %s (add --batch to run it headless)\n", runDir)
		}
	}
	switch {
	case interrupted || errors.Is(engErr, engine.ErrInterrupted):
		return exitError{code: exitInterrupted}
	case tuiErr != nil:
		return tuiErr
	case engErr != nil && !errors.Is(engErr, engine.ErrStopped):
		return engErr
	}
	return nil
}

// setupChoices lists the presets and the run's defaults for the setup screen.
func setupChoices(c *config.Config) (setup.Choices, error) {
	infos, err := presets.List()
	if err != nil {
		return setup.Choices{}, err
	}
	ch := setup.Choices{Preset: c.Preset, Model: c.Model, Data: c.Data.Path, Adapter: c.InitAdapter, Steps: c.MaxSteps,
		Devices: []string{"auto", "cpu", "cuda"}, Device: c.Device}
	onForm := map[string]bool{"preset": true, "model": true, "data.path": true, "init_adapter": true, "max_steps": true, "device": true}
	for _, s := range c.Settings() {
		if !onForm[s.Key] {
			ch.Settings = append(ch.Settings, setup.Setting{Key: s.Key, Value: s.Value, Help: s.Help, Common: s.Common})
		}
	}
	for _, in := range infos {
		if in.Err != nil {
			continue
		}
		p := setup.Preset{Name: in.Name, Description: in.Preset.Description}
		if in.Preset.PPL != nil {
			w := in.Preset.PPL.Levels
			p.Weights = [3]float64{w.Word, w.Phrase, w.Sentence}
		}
		p.Other = otherRewards(in.Preset)
		ch.Presets = append(ch.Presets, p)
	}
	return ch, nil
}
