package presets

import (
	"strings"
	"testing"
	"time"
)

func TestEnvironmentsInAPreset(t *testing.T) {
	doc := `description = "math with a calculator"
[[environments]]
name = "calc"
kind = "calculator"
max_turns = 3
timeout = 1.5

[[environments]]
name = "mine"
command = ["python3", "env.py"]
rewards = { correct = 2.0 }
`
	p, err := Decode("mine", "/x/mine.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Environments) != 2 {
		t.Fatalf("environments %+v", p.Environments)
	}
	calc, mine := p.Environments[0], p.Environments[1]
	if calc.Kind != "calculator" || calc.MaxTurns != 3 || calc.Timeout != 1500*time.Millisecond || calc.Command != nil {
		t.Errorf("calc %+v", calc)
	}
	if mine.Kind != "command" || strings.Join(mine.Command, " ") != "python3 env.py" || mine.Weight("correct") != 2 || mine.Weight("other") != 1 {
		t.Errorf("mine %+v", mine)
	}
	// An entry of the same name replaces the preset's.
	q := p.WithEnvironments([]Environment{{Name: "calc", Kind: "calculator", MaxTurns: 1}})
	if len(q.Environments) != 2 || q.Environments[0].MaxTurns != 1 || p.Environments[0].MaxTurns != 3 {
		t.Errorf("WithEnvironments: %+v (preset's now %+v)", q.Environments, p.Environments)
	}
}

func TestEnvironmentErrorsNameKeyAndLine(t *testing.T) {
	doc := `description = "bad"
[[environments]]
name = "a"
command = "python3 env.py"
timeout = 0

[[environments]]
name = "a"
kind = "shell"
max_turns = 0

[[environments]]
name = "c"
`
	_, err := Decode("bad", "/x/bad.toml", []byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`/x/bad.toml:4: environments[0].command: want a list of the program and its arguments, e.g. ["python3", "env.py"]`,
		`/x/bad.toml:5: environments[0].timeout: 0: want the seconds a batch may take`,
		`/x/bad.toml:8: environments[1].name: the name "a" is used by environments[0] too`,
		`/x/bad.toml:9: environments[1].kind: unknown kind "shell"`,
		`/x/bad.toml:10: environments[1].max_turns: 0: want a whole number of at least 1`,
		`/x/bad.toml:12: environments[2]: want the command as a list`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
