package cli

import (
	"context"
	"errors"
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

The workstation: a setup screen (preset, model, data, steps, device), then the live dashboard
of the run (space pauses, s saves, c opens the checkpoints, ? lists every key, q stops the run
after saving). Every flag of --batch may be given to preset the choices (--config run.toml,
--preset, --model, --steps…). It needs a terminal; use --batch for scripts.`

func runWorkstation(s streams, args []string) error {
	fs := newFlagSet("", workstationUsage, s.stderr)
	theme := fs.String("theme", "auto", "palette: auto (ask the terminal), dark or light")
	flags := config.Bind(fs)
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
		for name, v := range map[string]string{"preset": set.Preset, "model": set.Model, "data": set.Data,
			"steps": strconv.Itoa(set.Steps), "device": set.Device} {
			if v != "" && v != "0" {
				if err := fs.Set(name, v); err != nil {
					return tui.Session{}, err
				}
			}
		}
		cfg, opts, err := engine.ResolveRun(flags)
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
	_, err = tui.Run(m, tuiStreams(s)...)
	mu.Lock()
	running := eng != nil
	mu.Unlock()
	var engErr error
	if running {
		// The TUI stops a live run before quitting; wait for the engine's last save.
		engErr = <-runErr
	}
	switch {
	case tui.Interrupted(err) || errors.Is(engErr, engine.ErrInterrupted):
		return exitError{code: exitInterrupted}
	case err != nil:
		return err
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
	ch := setup.Choices{Preset: c.Preset, Model: c.Model, Data: c.Data, Steps: c.MaxSteps,
		Devices: []string{"auto", "cpu", "cuda"}, Device: c.Device}
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
