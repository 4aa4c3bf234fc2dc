package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"rlhfstation/engine/chat"

	"rlhfstation/presets"
)

// Load reads a configuration file over the defaults and finishes it: what a run folder's
// config.toml gives back.
func Load(path string) (*Config, error) {
	c := Default()
	if err := c.ApplyFile(path); err != nil {
		return nil, err
	}
	if err := c.Finish(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Apply sets the keys of a preset's [grpo] table (already decoded, as the presets package
// gives it). Only GRPO keys are allowed; source names the table in errors ("preset math [grpo]").
func (c *Config) Apply(table map[string]any, source string) error {
	return c.apply(table, source, nil, true)
}

// ApplyFile reads the TOML file at path over c.
func (c *Config) ApplyFile(path string) error {
	raw, loc, err := readFile(path)
	if err != nil {
		return err
	}
	return c.apply(raw, path, loc, false)
}

// readFile parses a TOML file into its raw map and a locator of its keys' lines.
func readFile(path string) (map[string]any, locator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	raw := map[string]any{}
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, nil, fmt.Errorf("%s:%d: %s", path, pe.Position.Line, pe.Message)
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return raw, fileLocator(string(data)), nil
}

// locator gives the line that defines a key path, 0 when unknown.
type locator func(path []string) int

// fileLocator finds key lines by decoding doc into a struct holding only that key, of a type
// whose decoding always fails: BurntSushi/toml reports such a failure as a ParseError carrying
// the key's position, and exposes positions no other way.
func fileLocator(doc string) locator {
	return func(path []string) int {
		if len(path) == 3 && path[0] == "environments" {
			i, _ := strconv.Atoi(path[1])
			return presets.EnvironmentsLine(doc, i, path[2])
		}
		if len(path) == 3 && path[0] == "rewards" { // arrays of tables have no key positions
			i, _ := strconv.Atoi(path[1])
			return presets.RewardsLine(doc, i, path[2])
		}
		for n := len(path); n > 0; n-- { // implicit tables have no line: try the parents
			v := reflect.New(probeType(path[:n]))
			_, err := toml.Decode(doc, v.Interface())
			var pe toml.ParseError
			if errors.As(err, &pe) && pe.Position.Line > 0 {
				return pe.Position.Line
			}
		}
		return 0
	}
}

type probe struct{}

func (probe) UnmarshalTOML(any) error { return errors.New("probe") }

func probeType(path []string) reflect.Type {
	t := reflect.TypeOf(probe{})
	for i := len(path) - 1; i >= 0; i-- {
		tag := reflect.StructTag("toml:" + strconv.Quote(path[i]))
		t = reflect.StructOf([]reflect.StructField{{Name: "F", Type: t, Tag: tag}})
	}
	return t
}

// keyError is one problem with one key, sortable by line.
type keyError struct {
	line int
	msg  string
}

// apply sets every key of raw into c. grpoOnly restricts it to the GRPO keys (a preset table).
// All problems are reported together, in line order.
func (c *Config) apply(raw map[string]any, source string, loc locator, grpoOnly bool) error {
	byKey := map[string]leaf{}
	for _, l := range leaves(c) {
		byKey[l.key] = l
	}
	isTable := map[string]bool{}
	for _, t := range tables() {
		isTable[t] = true
	}
	var errs []keyError
	fail := func(path []string, format string, args ...any) {
		e := keyError{msg: fmt.Sprintf(format, args...)}
		if loc != nil {
			e.line = loc(path)
		}
		errs = append(errs, e)
	}
	var walk func(m map[string]any, prefix []string)
	walk = func(m map[string]any, prefix []string) {
		for _, k := range keys(m) {
			path := append(append([]string(nil), prefix...), k)
			key := strings.Join(path, ".")
			v := m[k]
			l, ok := byKey[key]
			switch {
			case !ok && len(prefix) == 0 && k == "rewards" && !grpoOnly:
				rs, lerrs := presets.DecodeRewards(v, func(i int, key string) int {
					if loc == nil {
						return 0
					}
					return loc([]string{"rewards", strconv.Itoa(i), key})
				})
				for _, e := range lerrs {
					errs = append(errs, keyError{line: e.Line, msg: e.Msg})
				}
				if lerrs == nil {
					c.Rewards = rs
					c.setOrigin(key, where(source, loc, path))
				}
			case !ok && len(prefix) == 0 && k == "environments" && !grpoOnly:
				envs, lerrs := presets.DecodeEnvironments(v, func(i int, key string) int {
					if loc == nil {
						return 0
					}
					return loc([]string{"environments", strconv.Itoa(i), key})
				})
				for _, e := range lerrs {
					errs = append(errs, keyError{line: e.Line, msg: e.Msg})
				}
				if lerrs == nil {
					c.Environments = envs
					c.setOrigin(key, where(source, loc, path))
				}
			case !ok && len(prefix) == 0 && k == "data" && !grpoOnly && isString(v):
				// data = "FILE": short for [data] path
				c.Data.Path = v.(string)
				c.setOrigin("data.path", where(source, loc, path))
			case !ok && len(prefix) == 0 && isTable[k] && !grpoOnly:
				sub, isMap := v.(map[string]any)
				if !isMap && k == "data" {
					fail(path, "data: want a file name or a table [data], got %s", describe(v))
				} else if !isMap {
					fail(path, "%s: want a table [%s], got %s", key, key, describe(v))
				} else if k == "monitor" {
					c.Monitor = mergeMaps(c.Monitor, sub)
					c.setOrigin(key, where(source, loc, path))
					for sk := range sub { // the monitor package checks these keys: say where each was set
						c.setOrigin(key+"."+sk, where(source, loc, append(path[:len(path):len(path)], sk)))
					}
				} else {
					walk(sub, path)
				}
			case !ok && key == "data.chat_template_kwargs" && !grpoOnly:
				c.applyChatKwargs(v, path, func(p []string) string { return where(source, loc, p) }, fail)
			case !ok:
				fail(path, "unknown key %q%s", key, suggest(key, byKey, grpoOnly))
			case grpoOnly && !l.grpo:
				fail(path, "key %q is not a GRPO setting and cannot be set here", key)
			default:
				if b, isBool := v.(bool); isBool && key == "scale_rewards" {
					v = map[bool]string{true: "group", false: "none"}[b] // TRL's boolean form
				}
				if err := set(l.v, v); err != nil {
					fail(path, "%s: %v", key, err)
				} else {
					c.setOrigin(key, where(source, loc, path))
				}
			}
		}
	}
	walk(raw, nil)
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].line < errs[j].line })
	msgs := make([]string, len(errs))
	for i, e := range errs {
		if e.line > 0 {
			msgs[i] = fmt.Sprintf("%s:%d: %s", source, e.line, e.msg)
		} else {
			msgs[i] = fmt.Sprintf("%s: %s", source, e.msg)
		}
	}
	return errors.New(strings.Join(msgs, "\n"))
}

func where(source string, loc locator, path []string) string {
	if loc != nil {
		if line := loc(path); line > 0 {
			return fmt.Sprintf("%s:%d", source, line)
		}
	}
	return source
}

// set stores the decoded TOML value v into the field dst, converting only where no
// information is lost (an integer into a float field).
func set(dst reflect.Value, v any) error {
	switch dst.Interface().(type) {
	case Modules:
		switch v := v.(type) {
		case string:
			dst.Set(reflect.ValueOf(Modules{v}))
			return nil
		case []string:
			dst.Set(reflect.ValueOf(Modules(append([]string(nil), v...))))
			return nil
		case []any:
			m := make(Modules, len(v))
			for i, e := range v {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("want a list of module names, element %d is %s", i, describe(e))
				}
				m[i] = s
			}
			dst.Set(reflect.ValueOf(m))
			return nil
		}
		return fmt.Errorf(`want a list of module names or "all-linear", got %s`, describe(v))
	case []string:
		var out []string
		switch v := v.(type) {
		case string: // to = "wandb" is short for ["wandb"]
			out = []string{v}
		case []string:
			out = append(out, v...)
		case []any:
			for i, e := range v {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("want a list of strings, element %d is %s", i, describe(e))
				}
				out = append(out, s)
			}
		default:
			return fmt.Errorf("want a list of strings, got %s", describe(v))
		}
		dst.Set(reflect.ValueOf(out))
		return nil
	case []float64:
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("want a list of numbers, got %s", describe(v))
		}
		var f []float64 // an empty list is no list: nil, as the default
		for i, e := range list {
			x, ok := asFloat(e)
			if !ok {
				return fmt.Errorf("want a list of numbers, element %d is %s", i, describe(e))
			}
			f = append(f, x)
		}
		dst.Set(reflect.ValueOf(f))
		return nil
	}
	switch dst.Kind() {
	case reflect.String:
		if s, ok := v.(string); ok {
			dst.SetString(s)
			return nil
		}
		return fmt.Errorf("want a string, got %s", describe(v))
	case reflect.Bool:
		if b, ok := v.(bool); ok {
			dst.SetBool(b)
			return nil
		}
		return fmt.Errorf("want true or false, got %s", describe(v))
	case reflect.Int, reflect.Int64:
		if i, ok := asInt(v); ok {
			if dst.OverflowInt(i) {
				return fmt.Errorf("%d is out of range", i)
			}
			dst.SetInt(i)
			return nil
		}
		return fmt.Errorf("want an integer, got %s", describe(v))
	case reflect.Float64:
		if f, ok := asFloat(v); ok {
			dst.SetFloat(f)
			return nil
		}
		return fmt.Errorf("want a number, got %s", describe(v))
	}
	return fmt.Errorf("cannot set a %s", dst.Type())
}

// applyChatKwargs merges a [data.chat_template_kwargs] table into c: free-form template
// variables, each checked for a value a template can take and a name the trainer does not set.
func (c *Config) applyChatKwargs(v any, path []string, at func([]string) string, fail func([]string, string, ...any)) {
	sub, isMap := v.(map[string]any)
	if !isMap {
		fail(path, "data.chat_template_kwargs: want a table of template variables, got %s", describe(v))
		return
	}
	for _, k := range keys(sub) {
		p := append(path[:len(path):len(path)], k)
		if slices.Contains(chat.Reserved, k) {
			fail(p, "data.chat_template_kwargs.%s: the trainer sets %q itself", k, k)
			continue
		}
		if _, err := chat.Value(sub[k]); err != nil {
			fail(p, "data.chat_template_kwargs.%s: %v", k, err)
			continue
		}
		if c.Data.ChatTemplateKwargs == nil {
			c.Data.ChatTemplateKwargs = map[string]any{}
		}
		c.Data.ChatTemplateKwargs[k] = sub[k]
		c.setOrigin("data.chat_template_kwargs."+k, at(p))
	}
}

func isString(v any) bool { _, ok := v.(string); return ok }

func asFloat(v any) (float64, bool) {
	if i, ok := asInt(v); ok {
		return float64(i), true
	}
	switch v := v.(type) {
	case float64:
		return v, true
	case float32:
		return float64(v), true
	}
	return 0, false
}

func asInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), true
		}
	}
	return 0, false
}

// describe names a decoded TOML value's type and shows it, for messages.
func describe(v any) string {
	switch v := v.(type) {
	case string:
		return "the string " + quote(v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case int64, int, int32:
		return fmt.Sprintf("the integer %v", v)
	case float64:
		return "the float " + formatFloat(v)
	case []any, []string:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

func mergeMaps(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeMaps(dm, sm)
				continue
			}
			v = mergeMaps(nil, sm)
		}
		dst[k] = v
	}
	return dst
}

// hints names the right key for names that users of other tools write.
var hints = map[string]string{
	"batch_size":           "per_device_train_batch_size",
	"lr":                   "learning_rate",
	"steps":                "max_steps",
	"num_train_steps":      "max_steps",
	"kl_coef":              "beta",
	"output":               "output_dir",
	"out":                  "output_dir",
	"lora.alpha":           "lora.lora_alpha",
	"lora.dropout":         "lora.lora_dropout",
	"lora_r":               "lora.r",
	"lora_alpha":           "lora.lora_alpha",
	"prompt_key":           "data.prompt_key", // verl's data.prompt_key
	"answer_key":           "data.answer_key",
	"input_key":            "data.prompt_key", // OpenRLHF
	"label_key":            "data.answer_key",
	"train_files":          "data.path", // verl's data.train_files
	"dataset":              "data.path",
	"chat_template":        "data.chat_template", // TRL's GRPOConfig.chat_template_kwargs lives here too
	"chat_template_kwargs": "data.chat_template_kwargs",
}

// suggest returns `; did you mean "x"?` for a near miss, else "".
func suggest(key string, byKey map[string]leaf, grpoOnly bool) string {
	if key == "grpo" {
		return "; GRPO settings go at the top level of a run configuration"
	}
	if h, ok := hints[key]; ok {
		return fmt.Sprintf("; did you mean %q?", h)
	}
	best, bestD := "", 3
	for k, l := range byKey {
		if grpoOnly && !l.grpo {
			continue
		}
		if d := distance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein edit distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
