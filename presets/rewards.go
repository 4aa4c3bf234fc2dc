package presets

// The [[rewards]] array of tables: reward functions of kind "command" (DESIGN §17), in a
// preset or in a run configuration:
//
//	[[rewards]]
//	kind = "command"
//	name = "short"
//	command = ["python3", "examples/trl_reward_shim.py", "my_rewards.py:short_answers"]
//	weight = 1.0   # default 1
//	timeout = 60   # seconds the command may take over one batch; default 60

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"rlhfstation/rewards"
)

// CommandReward is a reward function of kind "command".
type CommandReward struct {
	Name    string
	Command []string
	Weight  float64
	Timeout time.Duration
}

// LineError is one problem with a key, at its line (0 when unknown).
type LineError struct {
	Line int
	Msg  string
}

// RewardKinds are the kinds a [[rewards]] entry may have.
var RewardKinds = []string{"command"}

// maxTimeout bounds a command's timeout (a day): anything longer is a typo.
const maxTimeout = 24 * time.Hour

// DecodeRewards checks and decodes the value of a TOML document's "rewards" key (an array
// of tables, as BurntSushi/toml decodes it into `any`). lineOf gives the line of entry i's
// key ("" for the entry itself). Every problem is returned, each naming the key.
func DecodeRewards(raw any, lineOf func(i int, key string) int) ([]CommandReward, []LineError) {
	tables, ok := arrayOfTables(raw)
	if !ok {
		return nil, []LineError{{lineOf(0, ""), "rewards: want [[rewards]] tables (kind, name, command, weight, timeout)"}}
	}
	var errs []LineError
	var out []CommandReward
	seen := map[string]int{}
	for i, t := range tables {
		bad := entryErrors(&errs, lineOf, "rewards", i)
		r := CommandReward{Weight: defaultWeight, Timeout: rewards.DefaultCommandTimeout}
		for _, k := range sortedKeys(t) {
			switch k {
			case "kind", "name", "command", "weight", "timeout":
			default:
				bad(k, "unknown key %q (a [[rewards]] entry has kind, name, command, weight and timeout)", k)
			}
		}
		kind, ok := t["kind"].(string)
		switch {
		case t["kind"] == nil:
			bad("", `missing kind: set kind = "command"`)
		case !ok || !contains(RewardKinds, kind):
			bad("kind", "unknown kind %s (kinds: %s)", show(t["kind"]), strings.Join(RewardKinds, ", "))
		}
		if name, ok := t["name"].(string); !ok {
			bad(keyOr(t, "name"), "want a name (the reward's metrics are logged as rewards/NAME/…), got %s", show(t["name"]))
		} else if err := rewards.CheckCommandName(name); err != nil {
			bad("name", "%v", err)
		} else if j, dup := seen[name]; dup {
			bad("name", "the name %q is used by rewards[%d] too", name, j)
		} else {
			seen[name] = i
			r.Name = name
		}
		r.Command = decodeCommand(t, bad)
		if v, ok := t["weight"]; ok {
			w, isNum := number(v)
			if !isNum || !validWeight(w) {
				bad("weight", "%s: want a finite number not below 0", show(v))
			}
			r.Weight = w
		}
		if d, ok := decodeTimeout(t, bad); ok {
			r.Timeout = d
		}
		out = append(out, r)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// number is v as a float64 when it is a TOML integer or float.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, !math.IsNaN(x)
	}
	return 0, false
}

// keyOr is key when the table has it, else "" (the entry itself, for missing keys).
func keyOr(t map[string]any, key string) string {
	if _, ok := t[key]; ok {
		return key
	}
	return ""
}

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprint(v)
}

func quoteFields(s string) string {
	f := strings.Fields(s)
	for i := range f {
		f[i] = strconv.Quote(f[i])
	}
	return strings.Join(f, ", ")
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// rewardsHeader matches a [[rewards]] table header.
var rewardsHeader = regexp.MustCompile(`^\s*\[\[\s*"?rewards"?\s*\]\]`)

// RewardsLine is the line of key in the i-th [[rewards]] table of doc (its header's line for
// key ""), 0 when it cannot be found.
func RewardsLine(doc string, i int, key string) int {
	return entryLine(doc, rewardsHeader, "rewards", i, key)
}

// WithCommands is p with the command rewards extra added: an entry with the name of one of
// p's replaces it (to change its weight or timeout; weight 0 turns it off).
func (p Preset) WithCommands(extra []CommandReward) Preset {
	p.Commands = mergeByName(p.Commands, extra, func(c CommandReward) string { return c.Name })
	return p
}
