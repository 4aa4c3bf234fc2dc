package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/runs/runstest"
)

// replay --summary --json over a TRL output folder: one JSON document with the run, the
// planted anomalies at their steps, final metrics under DESIGN's names and the unmapped ones.
func TestReplaySummaryJSONOfTRLRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grpo-qwen")
	p := runstest.Plan{Steps: 80, Seed: 1, KLSpike: 40, Plateau: 45, NaNGrad: 25}
	if err := runstest.WriteTRL(dir, p, runstest.TRLOptions{TensorBoard: true, Encoding: runstest.TensorFloat,
		Checkpoints: []int{40, 80}, Completions: true}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCaptured(t, "replay", dir, "--summary", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "found TRL / Hugging Face Trainer run") {
		t.Errorf("stderr does not say what was found: %q", errs)
	}
	var doc struct {
		Kind string `json:"kind"`
		Run  struct {
			Name, Source, Status string
			Steps                int
			LastStep             int `json:"last_step"`
			TotalSteps           int `json:"total_steps"`
		} `json:"run"`
		Final     map[string]any `json:"final"`
		Unmapped  []string       `json:"unmapped"`
		Anomalies []struct {
			Step           int
			Rule, Severity string
		} `json:"anomalies"`
		Metrics map[string]struct {
			First  any `json:"first"`
			Last   any `json:"last"`
			Trend  struct{ Direction string }
			Recent *struct{ Direction string }
		} `json:"metrics"`
		Checkpoints  []struct{ Step int } `json:"checkpoints"`
		LatestSample *struct{ Step int }  `json:"latest_sample"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.Kind != "trl" || doc.Run.Name != "grpo-qwen" || doc.Run.Status != "completed" || doc.Run.LastStep != 80 || doc.Run.TotalSteps != 80 {
		t.Errorf("run %+v kind %s", doc.Run, doc.Kind)
	}
	var got []string
	for _, a := range doc.Anomalies {
		got = append(got, a.Rule)
	}
	if strings.Join(got, ",") != "non_finite,kl_high,reward_stall" || doc.Anomalies[0].Step != 25 || doc.Anomalies[1].Step != 41 || doc.Anomalies[2].Step != 74 {
		t.Errorf("anomalies %+v", doc.Anomalies)
	}
	if _, ok := doc.Final["reward"].(float64); !ok || doc.Metrics["reward"].Trend.Direction != "increasing" || doc.Metrics["reward"].Recent.Direction != "stable" {
		t.Errorf("reward final %v, trends %+v %+v", doc.Final["reward"], doc.Metrics["reward"].Trend, doc.Metrics["reward"].Recent)
	}
	if strings.Join(doc.Unmapped, ",") != "epoch,num_tokens" {
		t.Errorf("unmapped %v", doc.Unmapped)
	}
	if len(doc.Checkpoints) != 2 || doc.LatestSample == nil || doc.LatestSample.Step != 80 {
		t.Errorf("checkpoints %v, latest sample %+v", doc.Checkpoints, doc.LatestSample)
	}
}

func TestReplayPlainSummaryAndWatchAlias(t *testing.T) {
	dir := t.TempDir()
	runstest.WriteVerlLog(filepath.Join(dir, "proj", "exp.jsonl"), runstest.Plan{Steps: 30, Seed: 2}, false)
	code, out, errs := runCaptured(t, "replay", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"written by verl", "found verl run: metrics from proj/exp.jsonl", "status ended (the log ends at step 30",
		"run        last 30", "anomalies (0)", "own names (3): actor/ppo_kl, critic/score/max, training/epoch", "no completions logged"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// watch is replay --follow; with the output not a terminal it prints the summary once the
	// run ends, so a finished TRL run returns.
	trl := t.TempDir()
	runstest.WriteTRL(trl, runstest.Plan{Steps: 20, Seed: 3}, runstest.TRLOptions{TensorBoard: true})
	code, out, errs = runCaptured(t, "watch", trl, "--summary")
	if code != 0 || !strings.Contains(out, "status completed") {
		t.Errorf("watch: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("hi"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay", dir}, 1, "no run found. Looked for events.jsonl"},
		{[]string{"replay", filepath.Join(dir, "nope")}, 1, "does not exist"},
		{[]string{"replay"}, 2, "takes one run folder"},
		{[]string{"replay", dir, "--theme", "pink"}, 2, "--theme"},
	} {
		code, _, errs := runCaptured(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestInspectTRLCheckpointCommand(t *testing.T) {
	dir := t.TempDir()
	runstest.Checkpoint(dir, runstest.Plan{Steps: 20, Seed: 4}, 20)
	code, out, errs := runCaptured(t, "inspect", filepath.Join(dir, "checkpoint-20"))
	if code != 0 || !strings.Contains(out, "health 1.00 (no issues)") || !strings.Contains(out, "skipped    optimizer.pt") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
}
