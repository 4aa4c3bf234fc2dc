package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/runs/runstest"
)

// TestWatchTRLFolderInTmux: `rlhfstation watch` (replay --follow) over a TRL output folder
// whose TensorBoard file is still being written. While the test appends steps (one record a
// scalar, as PyTorch's SummaryWriter writes them, the last record of a step sometimes cut in
// two writes), the step counter and the charts move, and the KL spike it plants raises the
// kl_high alert on screen.
func TestWatchTRLFolderInTmux(t *testing.T) {
	bin := build(t)
	dir := filepath.Join(t.TempDir(), "qwen-grpo")
	p := runstest.Plan{Steps: 60, Seed: 3, KLSpike: 32}
	// Wall times as a live run has them: steps 10 s apart, the 20th a moment ago.
	ef, err := runstest.CreateEventFile(filepath.Join(dir, "runs", "Jan01_00-00-00_host"), time.Now().Unix()-200, runstest.SimpleValue)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for s := 1; s <= 20; s++ {
		ef.Step(s, p.Metrics(s), "train/")
	}
	runstest.Checkpoint(dir, p, 20)

	tm := newTmux(t, 120, 36, fmt.Sprintf("NO_COLOR=1 %s watch %s; echo EXIT=$?; sleep 60", bin, dir))
	before := tm.waitFor("from TRL / Hugging Face Trainer", "step 20/60", "KL divergence", "replay (run in progress)")
	if strings.Contains(before, "kl_high") {
		t.Fatalf("an alert before the spike:\n%s", before)
	}
	// The script's part: append the next steps a few at a time, one with a torn record.
	for s := 21; s <= 40; s++ {
		if s == 30 {
			rec := runstest.Record(runstest.ScalarEvent(ef.Wall+10, int64(s), "train/aaa_first", 1, runstest.SimpleValue))
			ef.WriteRaw(rec[:9])
			time.Sleep(150 * time.Millisecond)
			ef.WriteRaw(rec[9:])
		}
		ef.Step(s, p.Metrics(s), "train/")
		if s%5 == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	after := tm.waitFor("step 40/60", "kl_high")
	if kl(before) == kl(after) {
		t.Errorf("the KL chart did not move:\n%s\n%s", before, after)
	}
	if !strings.Contains(after, "alerts · 1 warning") {
		t.Errorf("want exactly the KL alert:\n%s", after)
	}
	tm.keys("q")
	tm.waitFor("EXIT=0")
}

var klLine = regexp.MustCompile(`now [0-9.]+ · max [0-9.]+`)

// kl is the KL chart's caption (its latest and largest values).
func kl(screen string) string { return klLine.FindString(screen) }

// TestWatchSummaryInterrupted: verl logs no end of training, so `watch --summary` follows until
// interrupted; Ctrl-C prints the summary of what was read and exits with 130.
func TestWatchSummaryInterrupted(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	if err := runstest.WriteVerlLog(filepath.Join(dir, "gsm8k", "exp.jsonl"), runstest.Plan{Steps: 30, Seed: 4}, false); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "watch", dir, "--summary")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 130 || !strings.Contains(out.String(), "written by verl") || !strings.Contains(out.String(), "step 30") ||
		!strings.Contains(errb.String(), "interrupted while following") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
