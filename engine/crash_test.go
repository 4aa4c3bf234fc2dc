package engine

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/events"
	"rlhfstation/engine/tensorboard"
	"rlhfstation/internal/testref"
)

// TestHelperRun is not a test: TestKillNineNeverLeavesABadCheckpoint runs the test binary
// again with RLHFSTATION_CRASH_RUN set, and this function then trains until killed.
func TestHelperRun(t *testing.T) {
	out := os.Getenv("RLHFSTATION_CRASH_RUN")
	if out == "" {
		t.Skip("helper process for the kill -9 test")
	}
	c := tinyConfig(t, "story", 1000)
	c.OutputDir, c.SaveSteps, c.SaveTotalLimit = out, 1, 2
	if _, err := os.Stat(filepath.Join(out, "run")); err == nil {
		_, _, err := run(t, c, filepath.Join(out, "run"), "story")
		t.Log(err)
		return
	}
	_, _, err := run(t, c, "", "story")
	t.Log(err)
}

// A kill -9 at random moments, again and again, never leaves a checkpoint that fails to load,
// and every restart resumes from the newest one.
func TestKillNineNeverLeavesABadCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: -short")
	}
	tinyModelDir(t)
	out := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	resumed := 0
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRun$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RLHFSTATION_CRASH_RUN="+out)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(400+rng.IntN(900)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		list, err := checkpoint.List(filepath.Join(out, "run", "checkpoints"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			if _, err := checkpoint.Load(c.Path); err != nil {
				t.Fatalf("round %d: checkpoint %s does not load after kill -9: %v", round, c.Path, err)
			}
		}
		if len(list) > 0 {
			resumed = list[len(list)-1].Step
		}
	}
	if resumed == 0 {
		t.Fatal("no checkpoint was ever written: the test did not exercise saving")
	}
	// The log reads back whole, each step once: a resume drops what the killed run logged
	// past its checkpoint, torn last line included.
	evs, err := events.ReadFile(filepath.Join(out, "run", "events.jsonl"))
	if err != nil {
		t.Fatalf("events.jsonl after kills and resumes: %v", err)
	}
	last := 0
	for _, ev := range evs {
		if ev.Type != events.Step {
			continue
		}
		if ev.Step != last+1 {
			t.Fatalf("events.jsonl: step %d follows step %d", ev.Step, last)
		}
		last = ev.Step
	}
	t.Logf("after 6 kills the run stands at step %d", resumed)
}

// The run's TensorBoard file reads back with the independent Python reader, holding every
// step's scalars.
func TestTensorBoardFileOfARun(t *testing.T) {
	c := tinyConfig(t, "story", 2)
	_, e, err := run(t, c, "", "story")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(e.RunDir(), "tb", "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("tb files %v", files)
	}
	evs, err := tensorboard.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("Go reader: %d events, want file_version + 2 steps", len(evs))
	}
	py := testref.Python(t)
	outb, err := exec.Command(py, filepath.Join("tensorboard", "testdata", "read_events.py"), files[0]).Output()
	if err != nil {
		t.Fatalf("read_events.py: %v", err)
	}
	var doc struct {
		Events []struct {
			Step   int64 `json:"step"`
			Values []struct {
				Tag string `json:"tag"`
			} `json:"values"`
		} `json:"events"`
	}
	if err := json.Unmarshal(outb, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Events) != 3 || doc.Events[2].Step != 2 {
		t.Fatalf("python reader: %+v", doc.Events)
	}
	tags := map[string]bool{}
	for _, v := range doc.Events[2].Values {
		tags[v.Tag] = true
	}
	for _, want := range []string{"loss", "reward", "kl", "ppl/word", "grad_norm"} {
		if !tags[want] {
			t.Errorf("python reader finds no %s scalar at step 2", want)
		}
	}
}
