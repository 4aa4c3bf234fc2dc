package e2e

import (
	"fmt"
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
