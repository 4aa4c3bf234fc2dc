package config

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"rlhfstation/internal/atomicfile"
)

// Write saves the configuration as TOML at path, atomically.
func (c *Config) Write(path string) error {
	return atomicfile.WriteFile(path, c.Encode(), 0o644)
}

// Encode renders every setting explicitly as TOML, in a fixed order, so that loading the text
// gives identical values and equal configurations give equal bytes (Hash).
func (c *Config) Encode() []byte {
	var b bytes.Buffer
	b.WriteString("# rlhfstation run configuration (resolved: every value explicit)\n")
	table := ""
	for _, l := range leaves(c) {
		parts := strings.Split(l.key, ".")
		if t := strings.Join(parts[:len(parts)-1], "."); t != table {
			table = t
			fmt.Fprintf(&b, "\n[%s]\n", table)
		}
		fmt.Fprintf(&b, "%s = %s\n", parts[len(parts)-1], encodeValue(l.v))
	}
	if len(c.Data.ChatTemplateKwargs) > 0 {
		b.WriteString("\n[data.chat_template_kwargs]\n")
		for _, k := range keys(c.Data.ChatTemplateKwargs) {
			fmt.Fprintf(&b, "%s = %s\n", tomlKey(k), inlineValue(c.Data.ChatTemplateKwargs[k]))
		}
	}
	if len(c.Monitor) > 0 {
		b.WriteString("\n")
		// The monitor table is free-form: BurntSushi's encoder sorts its keys.
		if err := toml.NewEncoder(&b).Encode(struct {
			Monitor map[string]any `toml:"monitor"`
		}{c.Monitor}); err != nil {
			fmt.Fprintf(&b, "# monitor table not encodable: %v\n", err)
		}
	}
	for _, r := range c.Rewards {
		q := make([]string, len(r.Command))
		for i, a := range r.Command {
			q[i] = quote(a)
		}
		fmt.Fprintf(&b, "\n[[rewards]]\nkind = \"command\"\nname = %s\ncommand = [%s]\nweight = %s\ntimeout = %s\n",
			quote(r.Name), strings.Join(q, ", "), formatFloat(r.Weight), formatFloat(r.Timeout.Seconds()))
	}
	for _, e := range c.Environments {
		q := make([]string, len(e.Command))
		for i, a := range e.Command {
			q[i] = quote(a)
		}
		rw := make([]string, len(e.Rewards))
		for i, r := range e.Rewards {
			rw[i] = quote(r.Name) + " = " + formatFloat(r.Weight)
		}
		fmt.Fprintf(&b, "\n[[environments]]\nname = %s\nkind = %s\n", quote(e.Name), quote(e.Kind))
		if len(q) > 0 {
			fmt.Fprintf(&b, "command = [%s]\n", strings.Join(q, ", "))
		}
		fmt.Fprintf(&b, "rewards = { %s }\nmax_turns = %d\nmax_tokens = %d\ntimeout = %s\ntool_format = %s\n",
			strings.Join(rw, ", "), e.MaxTurns, e.MaxTokens, formatFloat(e.Timeout.Seconds()), quote(e.ToolFormat))
	}
	return b.Bytes()
}

func encodeValue(v reflect.Value) string {
	if m, ok := v.Interface().(Modules); ok {
		if m.AllLinear() {
			return quote(AllLinear)
		}
		q := make([]string, len(m))
		for i, s := range m {
			q[i] = quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	if l, ok := v.Interface().([]string); ok {
		q := make([]string, len(l))
		for i, s := range l {
			q[i] = quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	if f, ok := v.Interface().([]float64); ok {
		q := make([]string, len(f))
		for i, x := range f {
			q[i] = formatFloat(x)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	switch v.Kind() {
	case reflect.String:
		return quote(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return formatFloat(v.Float())
	}
	panic("config: no TOML form for " + v.Type().String())
}

// formatFloat writes f as a TOML float that parses back to the same bits.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		case r == utf8.RuneError:
			b.WriteString(`\uFFFD`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlKey writes k bare when TOML allows it, else quoted.
func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return quote(k)
		}
	}
	return k
}

// inlineValue writes a decoded TOML value (chat_template_kwargs) as an inline TOML value.
func inlineValue(v any) string {
	switch x := v.(type) {
	case string:
		return quote(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return formatFloat(x)
	case []any:
		q := make([]string, len(x))
		for i, e := range x {
			q[i] = inlineValue(e)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case []map[string]any:
		q := make([]string, len(x))
		for i, e := range x {
			q[i] = inlineTable(e)
		}
		return "[" + strings.Join(q, ", ") + "]"
	case map[string]any:
		return inlineTable(x)
	}
	return quote(fmt.Sprint(v)) // not reached: decoding admits only the kinds above
}

// inlineTable writes m as an inline TOML table, keys sorted.
func inlineTable(m map[string]any) string {
	q := make([]string, 0, len(m))
	for _, k := range keys(m) {
		q = append(q, tomlKey(k)+" = "+inlineValue(m[k]))
	}
	return "{" + strings.Join(q, ", ") + "}"
}
