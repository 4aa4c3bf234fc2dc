package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/env"
	"rlhfstation/engine/events"
	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
)

// shimRun runs --batch with one environment, name, whose command is the shim and its
// arguments, on testmodel.ToolCaller (whose tool calls come from the model: it learned a
// transcript calling calc twice) and two examples asking its question: one played through,
// the other with a "broken" column that makes the stand-in environment raise. It returns the
// run's events.
func shimRun(t *testing.T, name, rewards string, command ...string) []events.Event {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	q, _ := json.Marshal(testmodel.ToolPrompt)
	data := fmt.Sprintf("{\"prompt\": %s, \"answer\": \"20\"}\n{\"prompt\": %s, \"answer\": \"20\", \"broken\": true, \"info\": {\"broken\": true}}\n", q, q)
	if err := os.WriteFile(filepath.Join(dir, "data.jsonl"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _ := json.Marshal(command)
	cfg := fmt.Sprintf("preset = \"math\"\nlogging_steps = 1\n\n[[environments]]\nname = %q\nkind = \"command\"\ncommand = %s\nrewards = %s\nmax_turns = 4\nmax_tokens = 100\ntimeout = 60\n", name, cmd, rewards)
	if err := os.WriteFile(filepath.Join(dir, "run.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	code, stdout, stderr := runCaptured(t, "--batch", "--config", filepath.Join(dir, "run.toml"), "--model", testmodel.ToolCaller(t),
		"--data", filepath.Join(dir, "data.jsonl"), "--out", out, "--run-name", "r", "--steps", "2", "--batch-size", "1",
		"--num-generations", "2", "--temperature", "0.3", "--save-steps", "0", "--max-completion-length", "100")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	evs, err := events.ReadFile(filepath.Join(out, "r", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkShimEpisodes asserts what both shims must show: an episode of two tool calls written by
// the model, answered by the environment (its turns masked) and rewarded by it (reward, 1 when
// the last tool result is the answer); the broken example's episodes reported as an anomaly
// and scored as not applicable.
func checkShimEpisodes(t *testing.T, evs []events.Event, reward string) {
	t.Helper()
	var played, failed, anomalies int
	var calls float64
	for _, ev := range evs {
		switch ev.Type {
		case events.Anomaly:
			if ev.Rule == "environment" && strings.Contains(ev.Message, "crashed") {
				anomalies++
			}
			if ev.Severity == events.Critical { // a step of failed episodes is no broken step
				t.Errorf("step %d: %s: %s", ev.Step, ev.Rule, ev.Message)
			}
		case events.Step:
			calls = max(calls, ev.Metrics["tools/call_frequency"])
		case events.Samples:
			for _, s := range ev.Samples {
				if s.Failed != "" {
					failed++
					if _, scored := s.Rewards[reward]; !strings.Contains(s.Failed, "crashed") || scored || s.Reward != 0 || s.Advantage != 0 {
						t.Errorf("failed episode: %q, rewards %v, reward %v, advantage %v (want not applicable)", s.Failed, s.Rewards, s.Reward, s.Advantage)
					}
					continue
				}
				var roles, tools, exprs []string
				for _, tu := range s.Turns {
					roles = append(roles, tu.Role)
					for _, c := range tu.Calls {
						exprs = append(exprs, fmt.Sprintf("%s(%v)", c.Name, c.Arguments["expression"]))
					}
					if tu.Masked != (tu.Role != "assistant") {
						t.Errorf("turn %s masked %v", tu.Role, tu.Masked)
					}
					if tu.Role == "tool" {
						tools = append(tools, tu.Content)
					}
				}
				if strings.Join(roles, ",") == "user,assistant,tool,assistant,tool,assistant" && strings.Join(tools, ",") == "5,20" &&
					strings.Join(exprs, ",") == "calc(2+3),calc(5*4)" {
					played++
					if s.Rewards[reward] != 1 {
						t.Errorf("a played episode's %s is %v, want 1: %+v", reward, s.Rewards[reward], s)
					}
				}
			}
		}
	}
	if played == 0 || failed == 0 || anomalies == 0 || calls <= 0 {
		t.Fatalf("episodes with two tool calls %d, failed episodes %d, anomalies %d, tools/call_frequency %v", played, failed, anomalies, calls)
	}
}

// TRL's environment_factory class, through examples/trl_environment_shim.py.
func TestBatchWithATRLEnvironment(t *testing.T) {
	py := testref.Python3(t)
	shim, _ := filepath.Abs("../examples/trl_environment_shim.py")
	env, _ := filepath.Abs("testdata/trl_calc_env.py")
	evs := shimRun(t, "trl", "{ reward = 1.0, calls = 0.0 }", py, shim, env+":CalcEnv", "--reward", env+":calls")
	checkShimEpisodes(t, evs, "trl.reward")
	for _, ev := range evs {
		for _, s := range ev.Samples {
			if s.Failed == "" && len(s.Turns) == 6 && s.Rewards["trl.calls"] != 2 {
				t.Errorf("the TRL reward function calls gives %v for an episode of two tool calls", s.Rewards["trl.calls"])
			}
		}
	}
}

// A verifiers MultiTurnEnv, through examples/verifiers_shim.py.
func TestBatchWithAVerifiersEnvironment(t *testing.T) {
	py := testref.Python3(t)
	shim, _ := filepath.Abs("../examples/verifiers_shim.py")
	env, _ := filepath.Abs("testdata/vf_calc_env.py")
	evs := shimRun(t, "vf", "{ correct_answer = 1.0, tool_calls = 0.0 }", py, shim, env, "max_turns=4")
	checkShimEpisodes(t, evs, "vf.correct_answer")
	for _, ev := range evs {
		for _, s := range ev.Samples {
			if s.Failed == "" && len(s.Turns) == 6 && s.Rewards["vf.tool_calls"] != 2 {
				t.Errorf("the rubric's tool_calls gives %v for an episode of two tool calls", s.Rewards["vf.tool_calls"])
			}
		}
	}
}

// The TRL shim, request by request: reset's string joins the prompt's last user message, the
// tools' schemas come from the signatures and docstrings (reset and get_reward are not tools),
// a tool's exception is an error tool message counted as a failed call, and get_reward and a
// reward function score the finished episodes.
func TestTRLEnvironmentShimProtocol(t *testing.T) {
	py := testref.Python3(t)
	dir := t.TempDir()
	src := `class Env:
    def reset(self, **kw):
        self.level = kw["level"]
        return " (level %d)" % kw["level"]

    def lookup(self, key: str, limit: int = 3) -> str:
        """Look a key up.

        Args:
            key: the key
                to find.
            limit (int): at most this many
        """
        raise KeyError(key)

    def get_reward(self):
        return self.level / 10

    def _private(self):
        pass


def turns(completions, level, **kw):
    return [len(c) + l for c, l in zip(completions, level)]
`
	if err := os.WriteFile(filepath.Join(dir, "e.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	shim, _ := filepath.Abs("../examples/trl_environment_shim.py")
	c, err := env.New("e", []string{py, shim, filepath.Join(dir, "e.py") + ":Env", "--reward", filepath.Join(dir, "e.py") + ":turns"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reps, err := c.Do([]env.Request{{Op: "reset", ID: "a", Example: map[string]any{"prompt": "Find it.", "level": 3}}})
	if err != nil {
		t.Fatal(err)
	}
	r := reps["a"]
	if r.Error != "" || len(r.Messages) != 1 || r.Messages[0]["content"] != "Find it. (level 3)" {
		t.Fatalf("reset: %+v", r)
	}
	js, _ := json.Marshal(r.Tools)
	want := `[{"function":{"description":"Look a key up.","name":"lookup","parameters":{"properties":{"key":{"description":"the key to find.","type":"string"},"limit":{"description":"at most this many","type":"integer"}},"required":["key"],"type":"object"}},"type":"function"}]`
	if string(js) != want {
		t.Errorf("tools\n%s\nwant\n%s", js, want)
	}
	call := map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
		"function": map[string]any{"name": "lookup", "arguments": map[string]any{"key": "x"}}}}}
	reps, err = c.Do([]env.Request{{Op: "step", ID: "a", Message: call}})
	if err != nil {
		t.Fatal(err)
	}
	r = reps["a"]
	if r.Done || len(r.Messages) != 1 || r.Messages[0]["content"] != "error: KeyError: 'x'" || r.Messages[0]["tool_call_id"] != "c1" || r.Metrics["tool_failures"] != 1 {
		t.Fatalf("step: %+v", r)
	}
	reps, err = c.Do([]env.Request{{Op: "step", ID: "a", Message: map[string]any{"role": "assistant", "content": "done"}}})
	if err != nil || !reps["a"].Done || len(reps["a"].Messages) != 0 {
		t.Fatalf("last step: %+v %v", reps["a"], err)
	}
	reps, err = c.Do([]env.Request{{Op: "reward", ID: "r", IDs: []string{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	rw := reps["r"].Rewards
	if len(rw["reward"]) != 1 || *rw["reward"][0] != 0.3 || len(rw["turns"]) != 1 || *rw["turns"][0] != 3+3 {
		t.Fatalf("rewards: %+v", reps["r"])
	}
}
