package presets

// What the [[rewards]] and [[environments]] arrays of tables share: decoding the array, naming
// an entry's keys in errors, the command and timeout keys, finding lines, merging by name.

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// arrayOfTables is raw as BurntSushi/toml decodes an array of tables into `any`.
func arrayOfTables(raw any) ([]map[string]any, bool) {
	switch v := raw.(type) {
	case []map[string]any:
		return v, true
	case []any:
		tables := make([]map[string]any, 0, len(v))
		for _, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			tables = append(tables, m)
		}
		return tables, true
	}
	return nil, false
}

// entryErrors returns the error reporter of entry i of the array what: each problem names
// what[i].key and its line.
func entryErrors(errs *[]LineError, lineOf func(i int, key string) int, what string, i int) func(key, format string, a ...any) {
	at := fmt.Sprintf("%s[%d]", what, i)
	return func(key, format string, a ...any) {
		k := at
		if key != "" {
			k += "." + key
		}
		*errs = append(*errs, LineError{lineOf(i, key), k + ": " + fmt.Sprintf(format, a...)})
	}
}

// decodeCommand is the entry's command key: a program and its arguments, as a list.
func decodeCommand(t map[string]any, bad func(key, format string, a ...any)) []string {
	var cmd []string
	switch c := t["command"].(type) {
	case []any:
		for j, a := range c {
			s, ok := a.(string)
			if !ok {
				bad("command", "element %d is %s: want a list of strings", j, show(a))
				return nil
			}
			cmd = append(cmd, s)
		}
		if len(cmd) == 0 || cmd[0] == "" {
			bad("command", `names no program: want e.g. ["python3", "my_script.py"]`)
		}
	case string:
		bad("command", `want a list of the program and its arguments, e.g. [%s]`, quoteFields(c))
	default:
		bad(keyOr(t, "command"), `want the command as a list, e.g. ["python3", "my_script.py"], got %s`, show(t["command"]))
	}
	return cmd
}

// decodeTimeout is the entry's timeout key in seconds; ok is false when absent or bad.
func decodeTimeout(t map[string]any, bad func(key, format string, a ...any)) (time.Duration, bool) {
	v, ok := t["timeout"]
	if !ok {
		return 0, false
	}
	s, isNum := number(v)
	if !isNum || !(s >= 0.001) || s > maxTimeout.Seconds() {
		bad("timeout", "%s: want the seconds a batch may take, from 0.001 to %d", show(v), int(maxTimeout/time.Second))
		return 0, false
	}
	// Rounded, so that d.Seconds() written out reads back as d.
	return time.Duration(math.Round(s * float64(time.Second))), true
}

// entryLine is the line of key in the i-th entry (header matched by header) of doc: the
// header's line for key "" or when the key is not found; what's own line when there is no
// i-th entry; 0 when unknown.
func entryLine(doc string, header *regexp.Regexp, what string, i int, key string) int {
	n := 0
	for k, line := range strings.Split(doc, "\n") {
		if !header.MatchString(line) {
			continue
		}
		if n == i {
			if key == "" {
				return k + 1
			}
			if l := searchKey(doc, key, k+1); l > 0 {
				return l
			}
			return k + 1
		}
		n++
	}
	return searchKey(doc, what, 1)
}

// mergeByName is base with extra added, an entry of extra replacing base's of the same name.
func mergeByName[T any](base, extra []T, name func(T) string) []T {
	out := append([]T(nil), base...)
	for _, e := range extra {
		replaced := false
		for i := range out {
			if name(out[i]) == name(e) {
				out[i], replaced = e, true
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}
