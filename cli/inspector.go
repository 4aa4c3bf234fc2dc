package cli

// The checkpoint inspector's hooks, shared by the workstation and replay.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"rlhfstation/engine"
	"rlhfstation/engine/monitor"
)

// inspectorTop is the rows per module group the TUI's inspector shows.
var inspectorTop = 8

// inspectCheckpoint is the inspector's health report (the inspect command's text, laid out for
// the pane's width). The rows it leaves out are pointed to by the command that lists them: a
// flag means nothing in the TUI.
func inspectCheckpoint(ckpt, ref string) (func(width int) string, float64, error) {
	rep, err := monitor.Analyze(ckpt, ref)
	if err != nil {
		return nil, 0, err
	}
	more := "all of them: rlhfstation inspect " + ckpt + " --top 0"
	return func(width int) string {
		var b bytes.Buffer
		if err := rep.WriteTextFit(&b, inspectorTop, more, width); err != nil {
			return err.Error()
		}
		return b.String()
	}, rep.Health().Score, nil
}

// replayPolicies are the policies of replayed runs, loaded on first use per run folder.
var replayPolicies sync.Map // run folder → *engine.Policy

// generateFromRunCheckpoint generates from a checkpoint of a finished run
// (RUNDIR/checkpoints/step-N), with the policy of the run's model and quantization.
func generateFromRunCheckpoint(ckpt, prompt string) (string, error) {
	runDir := filepath.Dir(filepath.Dir(ckpt))
	v, ok := replayPolicies.Load(runDir)
	if !ok {
		if _, err := os.Stat(filepath.Join(runDir, "config.toml")); err != nil {
			// Another tool's checkpoint: its run names no model this tool can load.
			return "", fmt.Errorf("g generates from this tool's runs (their config.toml names the model); for this checkpoint run: rlhfstation generate --model BASE --adapter %s", ckpt)
		}
		p, err := engine.LoadRunPolicy(runDir)
		if err != nil {
			return "", err
		}
		v, _ = replayPolicies.LoadOrStore(runDir, p)
	}
	return v.(*engine.Policy).Generate(ckpt, prompt, 64, 0, 0)
}
