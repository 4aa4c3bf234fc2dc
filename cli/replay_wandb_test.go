package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/runs/runstest"
)

// replay --summary --json over a folder as TRL leaves it with report_to="wandb"
// (wandb/run-*/run-*.wandb): the planted NaN, KL spike and plateau once each at their step;
// the same through wandb/latest-run and the .wandb file itself.
func TestReplaySummaryJSONOfWandbRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grpo-qwen")
	p := runstest.Plan{Steps: 80, Seed: 1, KLSpike: 40, Plateau: 45, NaNGrad: 25}
	file, err := runstest.WriteWandb(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{dir, filepath.Join(dir, "wandb", "latest-run"), file} {
		code, out, errs := runCaptured(t, "replay", arg, "--summary", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", arg, code, errs)
		}
		var doc struct {
			Kind string `json:"kind"`
			Run  struct {
				Status   string
				Steps    int
				LastStep int `json:"last_step"`
			} `json:"run"`
			Final     map[string]any `json:"final"`
			Unmapped  []string       `json:"unmapped"`
			Anomalies []struct {
				Step int
				Rule string
			} `json:"anomalies"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if doc.Kind != "trl" || doc.Run.Status != "completed" || doc.Run.Steps != 80 || doc.Run.LastStep != 80 {
			t.Errorf("%s: kind %s run %+v", arg, doc.Kind, doc.Run)
		}
		var got []string
		for _, a := range doc.Anomalies {
			got = append(got, a.Rule)
		}
		if strings.Join(got, ",") != "non_finite,kl_high,reward_stall" || doc.Anomalies[0].Step != 25 || doc.Anomalies[1].Step != 41 || doc.Anomalies[2].Step != 74 {
			t.Errorf("%s: anomalies %+v", arg, doc.Anomalies)
		}
		if r, ok := doc.Final["reward"].(float64); !ok || r != p.Metrics(80)["reward"] {
			t.Errorf("%s: final reward %v, want %v", arg, doc.Final["reward"], p.Metrics(80)["reward"])
		}
		if strings.Join(doc.Unmapped, ",") != "epoch,num_tokens" {
			t.Errorf("%s: unmapped %v", arg, doc.Unmapped)
		}
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
}
