package checkpoint

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hfState is a trainer_state.json as transformers' TrainerState.save_to_json writes it
// (json.dumps(..., indent=2, sort_keys=True)): a float epoch, non-finite floats as bare NaN and
// Infinity, an evaluation entry and the end-of-training summary in log_history.
const hfState = `{
  "best_global_step": null,
  "best_metric": null,
  "best_model_checkpoint": null,
  "epoch": 0.03,
  "eval_steps": 500,
  "global_step": 3,
  "is_hyper_param_search": false,
  "is_local_process_zero": true,
  "is_world_process_zero": true,
  "log_history": [
    {"epoch": 0.01, "grad_norm": 0.5, "kl": 0.0, "learning_rate": 1e-05, "loss": 0.0, "reward": 0.25, "step": 1},
    {"epoch": 0.02, "grad_norm": NaN, "kl": Infinity, "learning_rate": 9e-06, "loss": -0.01, "reward": 0.5, "step": 2},
    {"epoch": 0.02, "eval_loss": 1.5, "eval_runtime": 2.0, "step": 2},
    {"epoch": 0.03, "grad_norm": 0.75, "kl": 0.01, "learning_rate": 8e-06, "loss": 0.02, "reward": 0.625, "step": 3, "note": "text"},
    {"epoch": 0.03, "step": 3, "total_flos": 0.0, "train_loss": 0.01, "train_runtime": 12.5}
  ],
  "logging_steps": 1,
  "max_steps": 100,
  "num_input_tokens_seen": 0,
  "num_train_epochs": 1,
  "save_steps": 3,
  "stateful_callbacks": {"TrainerControl": {"args": {"should_save": true}, "attributes": {}}},
  "total_flos": 0.0,
  "train_batch_size": 8,
  "trial_name": null,
  "trial_params": null
}
`

func TestHuggingFaceTrainerState(t *testing.T) {
	p := filepath.Join(t.TempDir(), TrainerStateFile)
	os.WriteFile(p, []byte(hfState), 0o644)
	var entries []LogEntry
	s, err := ReadTrainerStateFunc(p, func(e LogEntry) error { entries = append(entries, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != SourceTransformers || s.Own() || s.GlobalStep != 3 || s.Epoch != 0.03 || s.MaxSteps != 100 || s.LogEntries != 5 {
		t.Fatalf("state %+v", s)
	}
	if len(entries) != 5 || !math.IsNaN(entries[1]["grad_norm"]) || !math.IsInf(entries[1]["kl"], 1) || entries[1]["step"] != 2 {
		t.Fatalf("entries %v", entries)
	}
	if _, ok := entries[3]["note"]; ok {
		t.Error("a string field was kept as a number")
	}
	if entries[2].IsTraining() || entries[4].IsTraining() || !entries[3].IsTraining() {
		t.Error("IsTraining")
	}
	s, err = ReadTrainerState(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Metrics["reward"] != 0.625 || s.LearningRate != 8e-06 || s.Metrics["step"] != 0 {
		t.Fatalf("last training entry: lr %g metrics %v", s.LearningRate, s.Metrics)
	}
}

func TestTrainerStateErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"truncated": hfState[:len(hfState)/2],
		"type":      `{"global_step": "three"}`,
		"history":   `{"log_history": {"step": 1}}`,
		"list":      `[1, 2]`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o644)
		_, err := ReadTrainerState(p)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Our own files keep reading as before (an integer epoch, no log_history).
func TestOwnTrainerState(t *testing.T) {
	p := filepath.Join(t.TempDir(), TrainerStateFile)
	os.WriteFile(p, []byte(`{"global_step": 7, "learning_rate": 1e-5, "data_cursor": 12, "epoch": 1, "rng_state": "x", "config_hash": "h", "metrics": {"kl": "NaN"}}`), 0o644)
	s, err := ReadTrainerState(p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Own() || s.Epoch != 1 || s.DataCursor != 12 || !math.IsNaN(s.Metrics["kl"]) {
		t.Fatalf("%+v", s)
	}
}
