package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/internal/testmodel"
)

// TestLiveRunInTmux starts the workstation on a small model in a real terminal, starts a run
// from the setup screen, pauses and resumes it, saves a checkpoint with s, opens the
// checkpoints with c, and stops the live run with q (confirmed): the run saves and the program
// exits, leaving checkpoints that load.
func TestLiveRunInTmux(t *testing.T) {
	bin := build(t)
	modelDir := testmodel.Dir(t)
	out := t.TempDir()
	cmd := fmt.Sprintf("NO_COLOR=1 XDG_CONFIG_HOME=%s %s --model %s --out %s --run-name live --steps 400 --batch-size 2 --num-generations 4 --max-completion-length 24 --save-steps 0; sleep 30",
		t.TempDir(), bin, modelDir, out)
	tm := newTmux(t, 120, 36, cmd)
	tm.waitFor("preset", "start")
	// enter moves field by field to the start button, then starts.
	for i := 0; i < 8 && !strings.Contains(tm.screen(false), "run live"); i++ {
		tm.keys("Enter")
		time.Sleep(300 * time.Millisecond)
	}
	tm.waitFor("run live", "step ")
	tm.waitFor("● running")
	tm.keys("Space")
	tm.waitFor("paused")
	tm.keys("Space")
	tm.waitFor("● running")
	tm.keys("s")
	waitForFile(t, filepath.Join(out, "live", "checkpoints"))
	tm.keys("c")
	tm.waitFor("checkpoints · ", "esc back")
	tm.keys("Escape")
	tm.waitGone("esc back")
	tm.keys("q")
	tm.waitFor("Stop the run?")
	tm.keys("y")
	// The run saves and the program exits: the shell's sleep leaves a blank screen.
	deadline := time.Now().Add(screenWait)
	for strings.Contains(tm.screen(false), "rlhfstation ·") {
		if time.Now().After(deadline) {
			t.Fatalf("the workstation did not exit after q, y:\n%s", tm.screen(false))
		}
		time.Sleep(100 * time.Millisecond)
	}
	list, err := checkpoint.List(filepath.Join(out, "live", "checkpoints"))
	if err != nil || len(list) < 2 {
		t.Fatalf("checkpoints after s and the stop: %v %v", list, err)
	}
	for _, c := range list {
		if _, err := checkpoint.Load(c.Path); err != nil {
			t.Errorf("%s: %v", c.Path, err)
		}
	}
}

func waitForFile(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(screenWait)
	for {
		if list, _ := checkpoint.List(dir); len(list) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint appeared in %s", dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
