package presets

import (
	"strings"
	"testing"
	"time"

	"rlhfstation/rewards"
)

func TestCommandRewardsInAPreset(t *testing.T) {
	doc := `description = "story with a length reward"
[ppl]
word = 0.1
phrase = 0.3
sentence = 0.6

[[rewards]]
kind = "command"
name = "short"
command = ["python3", "shim.py", "mine.py:short"]
weight = 0.5
timeout = 2.5

[[rewards]]
kind = "command"
name = "off"
command = ["true"]
weight = 0
`
	p, err := Decode("mine", "/x/mine.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []CommandReward{
		{Name: "short", Command: []string{"python3", "shim.py", "mine.py:short"}, Weight: 0.5, Timeout: 2500 * time.Millisecond},
		{Name: "off", Command: []string{"true"}, Weight: 0, Timeout: rewards.DefaultCommandTimeout},
	}
	if len(p.Commands) != 2 || p.Commands[0].Name != want[0].Name || strings.Join(p.Commands[0].Command, " ") != "python3 shim.py mine.py:short" ||
		p.Commands[0].Weight != 0.5 || p.Commands[0].Timeout != want[0].Timeout || p.Commands[1].Timeout != want[1].Timeout || p.Commands[1].Weight != 0 {
		t.Fatalf("commands %+v, want %+v", p.Commands, want)
	}
	fs, err := p.Funcs(rewards.Levels{Word: 10, Phrase: 10, Sentence: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Func.Name() != "ppl" || fs[1].Func.Name() != "short" || fs[1].Weight != 0.5 {
		t.Fatalf("functions %+v (weight 0 is left out)", fs)
	}
	if c, ok := fs[1].Func.(*rewards.Command); !ok || strings.Join(c.Argv(), " ") != "python3 shim.py mine.py:short" {
		t.Errorf("command function %+v", fs[1].Func)
	}

	// A run configuration's entry of the same name replaces the preset's; others add to it.
	q := p.WithCommands([]CommandReward{{Name: "short", Command: []string{"x"}, Weight: 2}, {Name: "more", Command: []string{"y"}, Weight: 1}})
	if len(q.Commands) != 3 || q.Commands[0].Weight != 2 || q.Commands[2].Name != "more" || p.Commands[0].Weight != 0.5 {
		t.Errorf("merged %+v (original %+v)", q.Commands, p.Commands)
	}

	// Commands alone make a preset.
	if _, err := Decode("only", "/x/only.toml", []byte("[[rewards]]\nkind = \"command\"\nname = \"a\"\ncommand = [\"true\"]\n")); err != nil {
		t.Errorf("a preset of one command reward: %v", err)
	}
}

func TestCommandRewardErrorsNameKeyAndLine(t *testing.T) {
	doc := `[ppl]
word = 1.0

[[rewards]]
kind = "command"
name = "ppl"
command = "python3 my.py"
timeout = -1

[[rewards]]
name = "b"
command = []
weight = "heavy"
colour = "red"

[[rewards]]
kind = "http"
name = "b"
command = ["python3", 3]
`
	_, err := Decode("bad", "/x/bad.toml", []byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`/x/bad.toml:6: rewards[0].name: reward name "ppl" is taken by the built-in reward function`,
		`/x/bad.toml:7: rewards[0].command: want a list of the program and its arguments, e.g. ["python3", "my.py"]`,
		`/x/bad.toml:8: rewards[0].timeout: -1: want the seconds a batch may take`,
		`/x/bad.toml:10: rewards[1]: missing kind: set kind = "command"`,
		`/x/bad.toml:12: rewards[1].command: names no program`,
		`/x/bad.toml:13: rewards[1].weight: "heavy": want a finite number not below 0`,
		`/x/bad.toml:14: rewards[1].colour: unknown key "colour"`,
		`/x/bad.toml:17: rewards[2].kind: unknown kind "http" (kinds: command)`,
		`/x/bad.toml:18: rewards[2].name: the name "b" is used by rewards[1] too`,
		`/x/bad.toml:19: rewards[2].command: element 1 is 3: want a list of strings`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TRL's reward_weights count command rewards too, after the built-in sections.
func TestRewardWeightsCoverCommands(t *testing.T) {
	p, err := Decode("m", "/x/m.toml", []byte("[ppl]\nword = 1.0\n[[rewards]]\nkind = \"command\"\nname = \"a\"\ncommand = [\"true\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p = p.WithCommands([]CommandReward{{Name: "b", Command: []string{"true"}, Weight: 1}})
	if got := strings.Join(p.RewardNames(), ","); got != "ppl,a,b" {
		t.Fatalf("reward names %s", got)
	}
	q, err := p.WithRewardWeights([]float64{1, 0.25, 0})
	if err != nil {
		t.Fatal(err)
	}
	if q.Commands[0].Weight != 0.25 || q.Commands[1].Weight != 0 || p.Commands[0].Weight != 1 {
		t.Errorf("weights %+v (original %+v)", q.Commands, p.Commands)
	}
}
