package engine

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	steps := 1000
	if n, err := strconv.Atoi(os.Getenv("RLHFSTATION_CRASH_STEPS")); err == nil {
		steps = n
	}
	c := tinyConfig(t, "story", steps)
	c.OutputDir, c.SaveSteps, c.SaveTotalLimit = out, 1, 2
	if _, err := os.Stat(filepath.Join(out, "run")); err == nil {
		_, _, err := run(t, c, filepath.Join(out, "run"), "story")
		t.Log(err)
		return
	}
	_, _, err := run(t, c, "", "story")
	t.Log(err)
}

// A kill -9 at random moments — while a run starts, trains, saves, or resumes — 20 times
// over never leaves a checkpoint that fails to load; every restart resumes from the newest
// one and clears what the killed save left; a last resume runs to its end and leaves no
// temporary file or folder behind.
func TestKillNineNeverLeavesABadCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: -short")
	}
	tinyModelDir(t)
	out := t.TempDir()
	// The killed children cannot remove their temporary folders (their model folder, their
	// t.TempDir): they make them under this test's, which the test removes.
	tmp := "TMPDIR=" + t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	resumed := 0
	const kills = 20
	for round := 0; round < kills; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRun$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RLHFSTATION_CRASH_RUN="+out, tmp)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(150+rng.IntN(900)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		ckpts := filepath.Join(out, "run", "checkpoints")
		list, err := checkpoint.List(ckpts)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, c := range list {
			if _, err := checkpoint.Load(c.Path); err != nil {
				t.Fatalf("round %d: checkpoint %s does not load after kill -9: %v", round, c.Path, err)
			}
		}
		// A resume clears the leftovers of earlier kills: at most this round's save is half done.
		if left := leftovers(t, filepath.Join(out, "run")); len(left) > 1 {
			t.Fatalf("round %d: leftovers of earlier kills not cleared: %v", round, left)
		}
		if len(list) > 0 {
			resumed = list[len(list)-1].Step
		}
	}
	if resumed == 0 {
		t.Fatal("no checkpoint was ever written: the test did not exercise saving")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRun$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RLHFSTATION_CRASH_RUN="+out, "RLHFSTATION_CRASH_STEPS="+strconv.Itoa(resumed+2), tmp)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("last resume: %v\n%s", err, b)
	}
	if left := leftovers(t, filepath.Join(out, "run")); len(left) > 0 {
		t.Fatalf("after the last resume: %v", left)
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
	if last != resumed+2 {
		t.Errorf("the last resume ended at step %d, want %d", last, resumed+2)
	}
	t.Logf("after %d kills the run stood at step %d", kills, resumed)
}

// leftovers lists the temporary files and folders under a run folder: half-done checkpoint
// saves and atomic writes.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasPrefix(d.Name(), ".step-") || strings.Contains(d.Name(), ".tmp")) {
			out = append(out, path)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
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
