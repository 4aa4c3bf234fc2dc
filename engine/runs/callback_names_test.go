package runs

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"rlhfstation/internal/testref"
)

// TestCallbackNames: examples/rlhfstation_callback.py maps TRL's logged names as this
// package's TRL reader does (the Python side keeps its own copy of trlNames and the rules
// around it: this test keeps the two in step).
func TestCallbackNames(t *testing.T) {
	py := testref.Python3(t)
	raw := map[string]float64{"loss": 0.1, "grad_norm": 1, "learning_rate": 1e-5, "kl": 0.01, "epoch": 0.5,
		"num_tokens": 1000, "reward": 0.5, "reward_std": 0.2, "rewards/accuracy_reward/mean": 0.5,
		"rewards/format": 0.25, "frac_reward_zero_std": 0.1, "entropy": 1.1, "clip_ratio/low_mean": 0,
		"clip_ratio/region_mean": 0.01, "completions/mean_length": 60, "eval_loss": 1.5, "eval_reward": 0.4,
		"custom/thing": 3}
	// Older TRL releases' names (never logged beside their current equivalents).
	old := map[string]float64{"train/kl": 0.02}
	for _, r := range trlNames {
		old[r.from] = 7
	}
	summary := map[string]float64{"train_runtime": 12.5, "train_loss": 0.01, "total_flos": 0, "epoch": 1}
	for _, logs := range []map[string]float64{raw, old, summary} {
		in, _ := json.Marshal(logs)
		script := "import json,sys; sys.path.insert(0, sys.argv[1]); from rlhfstation_callback import map_names\n" +
			"m, ended = map_names(json.loads(sys.argv[2])); print(json.dumps({'metrics': m, 'ended': ended}))"
		out, err := exec.Command(py, "-c", script, filepath.Join(testref.RepoRoot(), "examples"), string(in)).Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var got struct {
			Metrics map[string]float64
			Ended   bool
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		want, ended := newMapper(KindTRL).apply(logs)
		if !reflect.DeepEqual(got.Metrics, want) || got.Ended != ended {
			t.Errorf("the callback maps\n%v\nto %v (ended %v);\nthe TRL reader: %v (ended %v)", logs, got.Metrics, got.Ended, want, ended)
		}
	}
}
