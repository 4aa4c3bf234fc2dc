package monitor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/checkpoint"
	"rlhfstation/engine/runs/runstest"
)

// A TRL checkpoint-N (PEFT adapter in bf16, trainer_state.json with a float epoch and Python's
// NaN, the Trainer's pickles) is healthy: no issue at all, health 1 as for our own, the pickles
// named and unread, and no word of resuming.
func TestInspectTRLCheckpoint(t *testing.T) {
	dir := t.TempDir()
	p := runstest.Plan{Steps: 40, Seed: 1}
	if err := runstest.Checkpoint(dir, p, 30); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "checkpoint-30")
	rep, err := Analyze(ck, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Score != 1 || len(rep.Issues) != 0 {
		t.Fatalf("score %.2f, issues %+v", rep.Score, rep.Issues)
	}
	if rep.Step != 30 || rep.StepFrom != "trainer_state" || !rep.Foreign || rep.Trainer.Epoch != 0.75 || rep.Trainer.Source != checkpoint.SourceTransformers {
		t.Errorf("step %d from %q, foreign %v, trainer %+v", rep.Step, rep.StepFrom, rep.Foreign, rep.Trainer)
	}
	if strings.Join(rep.Skipped, ",") != "optimizer.pt,rng_state.pth,scheduler.pt,training_args.bin" {
		t.Errorf("skipped %v", rep.Skipped)
	}
	if rep.Adapter.R != 8 || rep.Adapter.Modules != 4 || rep.Adapter.Scale != 2 || rep.Adapter.BaseModel != "Qwen/Qwen2.5-0.5B-Instruct" {
		t.Errorf("adapter %+v", rep.Adapter)
	}
	var b bytes.Buffer
	rep.WriteText(&b, 5, "--top 0 shows all")
	out := b.String()
	for _, want := range []string{"health 1.00 (no issues)", "Hugging Face Trainer state: global_step 30 of 40 · epoch 0.75",
		"skipped    optimizer.pt, rng_state.pth, scheduler.pt, training_args.bin (PyTorch pickles are not read"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "resume") {
		t.Errorf("the report talks of resuming:\n%s", out)
	}

	// Drift against an earlier checkpoint of the same run works as for ours.
	runstest.Checkpoint(dir, p, 10)
	rep, err = Analyze(ck, filepath.Join(dir, "checkpoint-10"))
	if err != nil || rep.Drift == nil || rep.Drift.Compared != 4 || rep.Drift.RefStep != 10 {
		t.Fatalf("drift %+v %v", rep.Drift, err)
	}

	// A damaged trainer_state.json of another tool's checkpoint is a warning (the step comes
	// from the folder name), not "cannot resume".
	os.WriteFile(filepath.Join(ck, "trainer_state.json"), []byte(`{"global_step": 3`), 0o644)
	rep, err = Analyze(ck, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Issues) != 1 || rep.Issues[0].Severity != "warning" || strings.Contains(rep.Issues[0].Message, "resume") || rep.Step != 30 || rep.StepFrom != "folder name" {
		t.Errorf("issues %+v, step %d from %s", rep.Issues, rep.Step, rep.StepFrom)
	}
}
