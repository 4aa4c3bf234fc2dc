package cli

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
	"rlhfstation/rewards"
)

// commandRunConfig writes a run configuration whose only reward is examples/short_answers.py
// run by examples/trl_reward_shim.py, as examples/short_answers.toml sets it up.
func commandRunConfig(t *testing.T, py, function string) string {
	t.Helper()
	shim, _ := filepath.Abs("../examples/trl_reward_shim.py")
	cfg := fmt.Sprintf(`preset = "story"
reward_weights = [0.0, 1.0]
save_steps = 1

[[rewards]]
kind = "command"
name = "short"
command = [%q, %q, %q]
timeout = 30
`, py, shim, function)
	path := filepath.Join(t.TempDir(), "run.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A --batch run with a TRL reward function behind the shim: its values are the run's rewards,
// logged and shown like a built-in function's, in the batch summary and in replay.
func TestBatchWithATRLRewardFunction(t *testing.T) {
	py := testref.Python3(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	short, _ := filepath.Abs("../examples/short_answers.py")
	cfg := commandRunConfig(t, py, short+":short_answers")
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--config", cfg, "--model", testmodel.Dir(t), "--out", out, "--run-name", "r",
		"--steps", "2", "--batch-size", "2", "--num-generations", "4", "--max-completion-length", "8")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "rewards/short/mean") {
		t.Errorf("the summary lacks the command reward:\n%s", stdout)
	}
	run := filepath.Join(out, "r")
	evs, err := events.ReadFile(filepath.Join(run, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	samples := 0
	for _, e := range evs {
		if e.Type == events.Step && (e.Metrics["reward"] != e.Metrics["rewards/short/mean"] || e.Metrics["reward"] <= 0) {
			t.Errorf("step %d: reward %v, rewards/short/mean %v", e.Step, e.Metrics["reward"], e.Metrics["rewards/short/mean"])
		}
		for _, s := range e.Samples {
			samples++
			if want := max(0, 1-float64(len([]rune(s.Completion)))/120); s.Rewards["short"] != want && !strings.ContainsRune(s.Completion, '\uFFFD') {
				t.Errorf("sample reward %v, short_answers gives %v for %q", s.Rewards["short"], want, s.Completion)
			}
		}
	}
	if samples == 0 {
		t.Error("no samples logged")
	}
	code, replay, _ := runCaptured(t, "replay", run)
	if code != 0 || !strings.Contains(replay, "rewards/short/mean") {
		t.Errorf("replay (exit %d) does not show the command reward:\n%s", code, replay)
	}
}

// A command that crashes twice in a row stops the run with its last step saved, exit 1 and a
// message saying how to go on.
func TestBatchStopsWhenACommandRewardFailsTwice(t *testing.T) {
	py := testref.Python3(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	crashing := filepath.Join(t.TempDir(), "crashing.py")
	src := "def reward(prompts, completions, trainer_state, **kw):\n" +
		"    if trainer_state.global_step >= 2:\n" +
		"        raise RuntimeError('the grader is down')\n" +
		"    return [1.0 if len(c) % 2 else 0.0 for c in completions]\n"
	if err := os.WriteFile(crashing, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := commandRunConfig(t, py, crashing+":reward")
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--config", cfg, "--model", testmodel.Dir(t), "--out", out, "--run-name", "r",
		"--steps", "4", "--batch-size", "2", "--num-generations", "4", "--max-completion-length", "8")
	run := filepath.Join(out, "r")
	if code != exitFailed || !strings.Contains(stderr, "reward command short failed twice in a row") || !strings.Contains(stderr, "--resume "+run) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// The traceback is in the anomaly alerts and in the run folder.
	if !strings.Contains(stdout, "RuntimeError: the grader is down") {
		t.Errorf("the alerts lack the command's stderr:\n%s", stdout)
	}
	if _, err := os.Stat(filepath.Join(run, "checkpoints", "step-000001", "adapter_model.safetensors")); err != nil {
		t.Errorf("no checkpoint of step 1: %v", err)
	}
	log, _ := os.ReadFile(filepath.Join(run, "rewards", "short.stderr"))
	if strings.Count(string(log), "RuntimeError: the grader is down") != 2 {
		t.Errorf("rewards/short.stderr:\n%s", log)
	}
}

// The shim passes TRL's arguments (the dataset's columns, answer, trainer_state), takes None
// as not applicable and {"rewards", "metrics"} replies, keeps the function's prints off its
// replies, and loads MODULE:FUNCTION as well as FILE.py:FUNCTION.
func TestTRLRewardShim(t *testing.T) {
	py := testref.Python3(t)
	dir := t.TempDir()
	src := `def scored(prompts, completions, completion_ids, answer, trainer_state, level, **kw):
    print("debug output the trainer must not see as a reply")
    rewards = [None if l is None else float(len(c) + len(ids)) for c, ids, l in zip(completions, completion_ids, level)]
    return {"rewards": rewards, "metrics": {"step": trainer_state.global_step, "answers": sum(a == "7" for a in answer)}}
`
	if err := os.WriteFile(filepath.Join(dir, "myrewards.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", dir)
	shim, _ := filepath.Abs("../examples/trl_reward_shim.py")
	samples := []rewards.Sample{
		{Prompt: "p", Completion: "abc", Answer: "7", CompletionIDs: []int{1, 2, 3, 0}, Step: 5, Columns: map[string]any{"level": "easy"}},
		{Prompt: "p", Completion: "de", Answer: "8", CompletionIDs: []int{4}, Step: 5},
	}
	for _, spec := range []string{filepath.Join(dir, "myrewards.py") + ":scored", "myrewards:scored"} {
		c, err := rewards.NewCommand("mine", []string{py, shim, spec}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		values, metrics, err := c.Score(samples)
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if values[0] != 7 || !math.IsNaN(values[1]) || metrics["rewards/mine/step"] != 5 || metrics["rewards/mine/answers"] != 1 {
			t.Errorf("%s: values %v, metrics %v", spec, values, metrics)
		}
	}
}
