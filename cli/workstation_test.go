package cli

import (
	"io"
	"testing"

	"rlhfstation/tui/setup"
)

// After a start that failed on a bad model path, clearing the field starts the run on the
// command line's model (here the built-in default), not on the path that failed.
func TestSetupFieldClearedFallsBackToTheDefault(t *testing.T) {
	args := []string{"--steps", "3"}
	bad, _, err := resolveSetup(args, setup.Settings{Model: "/no/such/model"}, io.Discard)
	if err != nil || bad.Model != "/no/such/model" {
		t.Fatalf("the screen's model is not used: %v %+v", err, bad)
	}
	cfg, _, err := resolveSetup(args, setup.Settings{Model: ""}, io.Discard)
	if err != nil {
		t.Fatalf("cleared field: %v", err)
	}
	def, _, err := resolveSetup(nil, setup.Settings{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model != def.Model || cfg.MaxSteps != 3 {
		t.Errorf("cleared field resolves to model %q, %d steps; want %q, 3", cfg.Model, cfg.MaxSteps, def.Model)
	}
}

// The settings page's changes are set by their keys' flags.
func TestSetupSettingsReachTheConfig(t *testing.T) {
	cfg, _, err := resolveSetup(nil, setup.Settings{Changed: map[string]string{"num_generations": "4", "lora.r": "8", "top_p": "0.9"}}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumGenerations != 4 || cfg.LoRA.R != 8 || cfg.TopP != 0.9 {
		t.Errorf("num_generations %d, lora.r %d, top_p %v", cfg.NumGenerations, cfg.LoRA.R, cfg.TopP)
	}
	if _, _, err := resolveSetup(nil, setup.Settings{Changed: map[string]string{"num_generations": "many"}}, io.Discard); err == nil {
		t.Error("a bad value accepted")
	}
}
