package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/runs/runstest"
	"rlhfstation/internal/testref"
)

// TestWatchCallbackRunInTmux: `rlhfstation watch` on the run folder that
// examples/rlhfstation_callback.py writes while a (stand-in) TRL trainer runs: space asks a
// pause, the trainer acknowledges it and holds (the step counter stops), space resumes it,
// and q then y stops it after a save; the trainer prints where it ended.
func TestWatchCallbackRunInTmux(t *testing.T) {
	bin := build(t)
	py := testref.Python3(t)
	tmp := t.TempDir()
	hist := filepath.Join(tmp, "trainer_state.json")
	if err := runstest.TrainerState(hist, runstest.Plan{Steps: 200, Seed: 5}, 200); err != nil {
		t.Fatal(err)
	}
	runDir, outDir := filepath.Join(tmp, "runs", "my-grpo"), filepath.Join(tmp, "out")
	trainer := exec.Command(py, filepath.Join(testref.RepoRoot(), "engine", "control", "testdata", "standin_trainer.py"),
		"--history", hist, "--run-dir", runDir, "--output-dir", outDir, "--max-steps", "200", "--step-seconds", "0.2",
		"--rlhfstation", bin)
	stdout, _ := trainer.StdoutPipe()
	trainer.Stderr = os.Stderr
	if err := trainer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trainer.Process.Kill(); trainer.Wait() })
	deadline := time.Now().Add(screenWait)
	for _, err := os.Stat(filepath.Join(runDir, "events.jsonl")); err != nil; _, err = os.Stat(filepath.Join(runDir, "events.jsonl")) {
		if time.Now().After(deadline) {
			t.Fatal("the callback wrote no events.jsonl")
		}
		time.Sleep(50 * time.Millisecond)
	}

	tm := newTmux(t, 120, 36, fmt.Sprintf("NO_COLOR=1 %s watch %s; echo EXIT=$?; sleep 60", bin, runDir))
	tm.waitFor("● running", "/200")
	tm.keys("Space")
	paused := tm.waitFor("paused after step", "❚❚ paused")
	t.Logf("after space:\n%s", paused)
	held := stepOf(t, paused)
	time.Sleep(time.Second)
	if now := stepOf(t, tm.screen(false)); now != held {
		t.Errorf("the trainer went on while paused: step %d, then %d", held, now)
	}
	tm.keys("Space")
	tm.waitFor("resumed after step", "● running")
	tm.waitGone(fmt.Sprintf("step %d/200", held))
	tm.keys("q")
	tm.waitFor("Stop the trainer?")
	tm.keys("y")
	tm.waitFor("EXIT=0")
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	trainer.Wait()
	last := lines[len(lines)-1]
	var end int
	if _, err := fmt.Sscanf(last, "ended at %d", &end); err != nil || end >= 200 || end <= held ||
		!strings.Contains(strings.Join(lines, "\n"), fmt.Sprintf("saved %d", end)) {
		t.Errorf("the trainer printed %q", lines)
	}
}

var stepRe = regexp.MustCompile(`step (\d+)/200`)

func stepOf(t *testing.T, screen string) int {
	t.Helper()
	m := stepRe.FindStringSubmatch(screen)
	if m == nil {
		t.Fatalf("no step counter on screen:\n%s", screen)
	}
	return atoi(m[1])
}
