package engine

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/config"
)

func resolveArgs(t *testing.T, args ...string) (*config.Config, Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	flags := config.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return ResolveRun(flags)
}

// Without a model the run is on the built-in model with its run defaults under the preset's
// table and the flags; with $RLHFSTATION_MODEL or --model, the defaults of DESIGN §5 apply.
func TestResolveRun(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("RLHFSTATION_MODEL", "")
	dir, err := builtin.Dir()
	if err != nil {
		t.Fatal(err)
	}
	cfg, opts, err := resolveArgs(t, "--steps", "7")
	if err != nil {
		t.Fatal(err)
	}
	if opts.ModelDir != dir || opts.ModelName != BuiltinModelName || cfg.Model != "" || cfg.MaxSteps != 7 ||
		cfg.NumGenerations != 8 || cfg.MaxCompletionLength != 48 || cfg.LearningRate != 5e-4 {
		t.Errorf("built-in: opts %+v, steps %d, G %d, completion %d, lr %g", opts, cfg.MaxSteps, cfg.NumGenerations, cfg.MaxCompletionLength, cfg.LearningRate)
	}
	t.Setenv("RLHFSTATION_MODEL", "/models/x")
	cfg, opts, err = resolveArgs(t)
	def := config.Default()
	if err != nil || opts.ModelDir != "/models/x" || opts.ModelName != "/models/x" || cfg.Model != "/models/x" ||
		cfg.NumGenerations != def.NumGenerations || cfg.MaxSteps != def.MaxSteps {
		t.Errorf("$RLHFSTATION_MODEL: %v, opts %+v, model %q, G %d, steps %d", err, opts, cfg.Model, cfg.NumGenerations, cfg.MaxSteps)
	}
	_, _, err = resolveArgs(t, "--preset", "no-such-preset")
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "no-such-preset") {
		t.Errorf("unknown preset: want a ConfigError naming it, got %v", err)
	}
}

func TestSelectDevice(t *testing.T) {
	if d, _, err := SelectDevice("cpu"); d != "cpu" || err != nil {
		t.Errorf("cpu: %q %v", d, err)
	}
	// This machine (and CI) has no usable GPU: auto says why in one line, cuda is a
	// configuration error with the reason in full.
	if d, note, err := SelectDevice("auto"); d != "cpu" || err != nil || !strings.HasPrefix(note, "device auto: using the CPU: ") || strings.Contains(note, "\n") {
		t.Errorf("auto: %q %q %v", d, note, err)
	}
	var ce *ConfigError
	if _, _, err := SelectDevice("cuda"); !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "--device cuda: ") {
		t.Errorf("cuda: %v", err)
	}
	if _, _, err := SelectDevice("tpu"); !errors.As(err, &ce) || !strings.Contains(err.Error(), `"tpu"`) {
		t.Errorf("tpu: %v", err)
	}
}
