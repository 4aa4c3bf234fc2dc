package presets

// The [[environments]] array of tables: multi-turn, tool-calling environments (DESIGN §17), in
// a preset or a run configuration:
//
//	[[environments]]
//	name = "calc"                      # metrics env/calc/…, rewards calc.<name>
//	kind = "command"                   # or "calculator", the built-in one
//	command = ["python3", "examples/trl_environment_shim.py", "my_env.py:MyEnv"]
//	rewards = { correct = 1.0 }        # the environment's rewards and their weights
//	max_turns = 4                      # assistant turns per episode
//	max_tokens = 192                   # completion tokens per episode, the environment's included
//	timeout = 60                       # seconds one batch of requests may take
//	tool_format = "hermes"             # "" = the chat template's own

import (
	"math"
	"regexp"
	"strings"
	"time"

	"rlhfstation/rewards"
)

// Environment is one [[environments]] entry.
type Environment struct {
	Name    string
	Kind    string // "command" or "calculator"
	Command []string
	// Rewards are the environment's rewards (those its reward op returns; "steps" is the sum
	// of its step rewards) with their weights, sorted by name. A reward not listed has weight 1.
	Rewards    []EnvReward
	MaxTurns   int
	MaxTokens  int // 0: max_completion_length
	Timeout    time.Duration
	ToolFormat string
}

// EnvReward is one of an environment's rewards and its weight.
type EnvReward struct {
	Name   string
	Weight float64
}

// Weight is the weight of the environment's reward name (1 when not listed).
func (e Environment) Weight(name string) float64 {
	for _, r := range e.Rewards {
		if r.Name == name {
			return r.Weight
		}
	}
	return 1
}

// EnvironmentKinds are the kinds an [[environments]] entry may have.
var EnvironmentKinds = []string{"command", "calculator"}

// DefaultMaxTurns is an episode's default number of assistant turns.
const DefaultMaxTurns = 4

// DecodeEnvironments checks and decodes the value of a document's "environments" key.
func DecodeEnvironments(raw any, lineOf func(i int, key string) int) ([]Environment, []LineError) {
	tables, ok := arrayOfTables(raw)
	if !ok {
		return nil, []LineError{{lineOf(0, ""), "environments: want [[environments]] tables"}}
	}
	var errs []LineError
	var out []Environment
	seen := map[string]int{}
	for i, t := range tables {
		bad := entryErrors(&errs, lineOf, "environments", i)
		env := Environment{Kind: "command", MaxTurns: DefaultMaxTurns, Timeout: rewards.DefaultCommandTimeout}
		for _, k := range sortedKeys(t) {
			switch k {
			case "name", "kind", "command", "rewards", "max_turns", "max_tokens", "timeout", "tool_format":
			default:
				bad(k, "unknown key %q (an [[environments]] entry has name, kind, command, rewards, max_turns, max_tokens, timeout, tool_format)", k)
			}
		}
		if name, ok := t["name"].(string); !ok {
			bad("name", "want a name (metrics env/NAME/…), got %s", show(t["name"]))
		} else if err := rewards.CheckCommandName(name); err != nil {
			bad("name", "%v", err)
		} else if j, dup := seen[name]; dup {
			bad("name", "the name %q is used by environments[%d] too", name, j)
		} else {
			seen[name], env.Name = i, name
		}
		if v, ok := t["kind"]; ok {
			k, isStr := v.(string)
			if !isStr || !contains(EnvironmentKinds, k) {
				bad("kind", "unknown kind %s (kinds: %s)", show(v), strings.Join(EnvironmentKinds, ", "))
			}
			env.Kind = k
		}
		if _, ok := t["command"]; ok || env.Kind == "command" {
			env.Command = decodeCommand(t, bad)
		}
		if v, ok := t["rewards"]; ok {
			m, isMap := v.(map[string]any)
			if !isMap {
				bad("rewards", "want a table of reward names and weights, e.g. { correct = 1.0 }, got %s", show(v))
			}
			for _, name := range sortedKeys(m) {
				w, isNum := number(m[name])
				if !isNum || !validWeight(w) {
					bad("rewards."+name, "%s: want a finite number not below 0", show(m[name]))
				}
				env.Rewards = append(env.Rewards, EnvReward{name, w})
			}
		}
		intKey := func(key string, min int, dst *int) {
			if v, ok := t[key]; ok {
				n, isNum := number(v)
				if !isNum || n != math.Trunc(n) || n < float64(min) {
					bad(key, "%s: want a whole number of at least %d", show(v), min)
				}
				*dst = int(n)
			}
		}
		intKey("max_turns", 1, &env.MaxTurns)
		intKey("max_tokens", 0, &env.MaxTokens)
		if d, ok := decodeTimeout(t, bad); ok {
			env.Timeout = d
		}
		if v, ok := t["tool_format"]; ok {
			s, isStr := v.(string)
			if !isStr || !(s == "" || s == "hermes" || s == "llama3_json" || s == "mistral") {
				bad("tool_format", `%s: want "hermes", "llama3_json" or "mistral" ("" for the chat template's own)`, show(v))
			}
			env.ToolFormat = s
		}
		out = append(out, env)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// RewardNames are the environment's reward names as the run logs them: NAME.REWARD.
func (e Environment) RewardNames() []string {
	var out []string
	for _, r := range e.Rewards {
		out = append(out, e.Name+"."+r.Name)
	}
	return out
}

// WithEnvironments is p with the environments extra added, one of the same name replacing p's.
func (p Preset) WithEnvironments(extra []Environment) Preset {
	p.Environments = mergeByName(p.Environments, extra, func(e Environment) string { return e.Name })
	return p
}

var environmentsHeader = regexp.MustCompile(`^\s*\[\[\s*environments\s*\]\]`)

// EnvironmentsLine is the line of key in the i-th [[environments]] entry of doc (the entry's
// header for key "", or when the key is not found), 0 when unknown.
func EnvironmentsLine(doc string, i int, key string) int {
	return entryLine(doc, environmentsHeader, "environments", i, key)
}
