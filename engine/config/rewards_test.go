package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRewardsRoundTrip(t *testing.T) {
	path := writeTOML(t, `preset = "story"
max_steps = 60

[monitor]
kl_max = 0.5

[[rewards]]
kind = "command"
name = "short"
command = ["python3", "examples/trl_reward_shim.py", "short \"x\".py:f"]
weight = 0.5
timeout = 2.5

[[rewards]]
kind = "command"
name = "b"
command = ["./b"]
`)
	a, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Rewards) != 2 || a.Rewards[0].Name != "short" || a.Rewards[0].Command[2] != `short "x".py:f` ||
		a.Rewards[0].Weight != 0.5 || a.Rewards[0].Timeout != 2500*time.Millisecond || a.Rewards[1].Weight != 1 || a.Rewards[1].Timeout != time.Minute {
		t.Fatalf("rewards %+v", a.Rewards)
	}
	out := filepath.Join(t.TempDir(), "config.toml")
	if err := a.Write(out); err != nil {
		t.Fatal(err)
	}
	b, err := Load(out)
	if err != nil {
		text, _ := os.ReadFile(out)
		t.Fatalf("%v\n%s", err, text)
	}
	a.origin, b.origin = nil, nil
	if !reflect.DeepEqual(a, b) || a.Hash() != b.Hash() {
		t.Errorf("round trip differs:\n%s\n----\n%s", a.Encode(), b.Encode())
	}
	m := a.Map()["rewards"].([]any)
	if len(m) != 2 || m[0].(map[string]any)["timeout"] != 2.5 {
		t.Errorf("map %v", m)
	}
	c := *a
	c.Rewards = c.Rewards[:1]
	if c.Hash() == a.Hash() {
		t.Error("hash ignores rewards")
	}
}

func TestRewardsErrorsHaveLines(t *testing.T) {
	path := writeTOML(t, `preset = "story"

[[rewards]]
kind = "command"
name = "ok"
command = ["true"]

[[rewards]]
kind = "command"
name = "x"
command = ["true"]
timeout = "soon"
`)
	_, err := Load(path)
	want := path + `:12: rewards[1].timeout: "soon": want the seconds a batch may take`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
}
