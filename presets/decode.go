package presets

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"rlhfstation/rewards"
)

// fileLayout is a preset file as written. Pointers tell "absent" from zero.
type fileLayout struct {
	Extends     string `toml:"extends"`
	Description string `toml:"description"`
	PPL         *struct {
		Weight     *float64            `toml:"weight"`
		Word       *float64            `toml:"word"`
		Phrase     *float64            `toml:"phrase"`
		Sentence   *float64            `toml:"sentence"`
		Shape      *string             `toml:"shape"`
		Thresholds *rewards.Thresholds `toml:"thresholds"`
		Text       *string             `toml:"text"`
	} `toml:"ppl"`
	NTL *struct {
		Weight              *float64 `toml:"weight"`
		Mode                *string  `toml:"mode"`
		Loss                *string  `toml:"loss"`
		Tau                 *float64 `toml:"tau"`
		TauEnd              *float64 `toml:"tau_end"`
		TemperatureSchedule *string  `toml:"temperature_schedule"`
		ConfidenceWeight    *float64 `toml:"confidence_weight"`
		LossWeight          *float64 `toml:"loss_weight"`
	} `toml:"ntl"`
	Correctness *struct {
		Weight     *float64 `toml:"weight"`
		Extraction *string  `toml:"extraction"`
	} `toml:"correctness"`
	Format *struct {
		Weight *float64 `toml:"weight"`
	} `toml:"format"`
	GRPO    map[string]any   `toml:"grpo"`
	Rewards []map[string]any `toml:"rewards"`
	// Environments are the [[environments]] entries.
	Environments []map[string]any `toml:"environments"`
}

// Defaults of keys a present section leaves out.
const (
	defaultWeight = 1.0
	defaultTau    = 1.0
	// defaultConfidence is hybrid NTL's weight of the completion's other digits: the answer
	// against the ground truth is what the reward is for, the worked digits' confidence a
	// smaller share.
	defaultConfidence = 0.2
)

// maxExtends bounds a chain of presets extending one another (a cycle would be endless).
const maxExtends = 8

// keyError is one problem at one key; errors are reported together, in line order.
type keyError struct {
	line int
	msg  string
}

// Decode parses and validates preset text. source names it in errors: the file's path, or
// SourceBuiltIn. Unknown keys and bad values are errors naming the key and its line. A preset
// with `extends = "NAME"` starts from preset NAME (the built-in one when NAME is its own
// name) and changes only the keys it sets.
func Decode(name, source string, data []byte) (Preset, error) {
	p, _, err := decode(name, source, data, 0)
	return p, err
}

func decode(name, source string, data []byte, depth int) (Preset, *fileLayout, error) {
	label := source
	if source == SourceBuiltIn {
		label = "built-in preset " + name
	}
	doc := string(data)
	var f fileLayout
	root := name
	var head struct {
		Extends string `toml:"extends"`
	}
	if _, err := toml.Decode(doc, &head); err == nil && head.Extends != "" {
		if depth >= maxExtends {
			return Preset{}, nil, fmt.Errorf("%s: extends %q: more than %d presets extend one another (a cycle?)", label, head.Extends, maxExtends)
		}
		base, baseData, baseSource, err := find(head.Extends, head.Extends == name)
		if err == nil {
			var layout *fileLayout
			base, layout, err = decode(head.Extends, baseSource, baseData, depth+1)
			if err == nil {
				f, root = *layout, base.Root
			}
		}
		if err != nil {
			return Preset{}, nil, fmt.Errorf("%s: extends %q: %w", label, head.Extends, err)
		}
	}
	md, err := toml.Decode(doc, &f)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) && pe.Position.Line > 0 {
			return Preset{}, nil, fmt.Errorf("%s:%d: %s", label, pe.Position.Line, pe.Message)
		}
		if m := decodeErrorLine.FindStringSubmatch(err.Error()); m != nil {
			return Preset{}, nil, fmt.Errorf("%s:%s: %s: %s", label, m[1], m[2], m[3])
		}
		return Preset{}, nil, fmt.Errorf("%s: %v", label, err)
	}
	var errs []keyError
	bad := func(key string, format string, args ...any) {
		errs = append(errs, keyError{keyLine(doc, strings.Split(key, ".")), key + ": " + fmt.Sprintf(format, args...)})
	}
	unknown := map[string]bool{}
	for _, k := range md.Undecoded() {
		unknown[k.String()] = true
	}
	for _, k := range md.Undecoded() {
		if underUnknown(k, unknown) {
			continue // report an unknown table once, not each key in it
		}
		if len(k) > 1 && k[0] == "environments" {
			continue // an entry's keys (its rewards table's too) are DecodeEnvironments' to check
		}
		errs = append(errs, keyError{keyLine(doc, k), fmt.Sprintf("unknown key %q", k.String())})
	}

	p := Preset{Name: name, Source: source, Description: f.Description, GRPO: f.GRPO, Extends: f.Extends, Root: root}
	weight := func(key string, w *float64) float64 {
		if w == nil {
			return defaultWeight
		}
		if !validWeight(*w) {
			bad(key, "weight %v must be a finite number not below 0", *w)
		}
		return *w
	}
	if s := f.PPL; s != nil {
		p.PPL = &PPL{Weight: weight("ppl.weight", s.Weight), Shape: rewards.Step, Thresholds: rewards.DefaultThresholds, Text: rewards.CompletionText}
		if s.Text != nil {
			t, err := rewards.ParsePPLText(*s.Text)
			if err != nil {
				bad("ppl.text", "%v", err)
			}
			p.PPL.Text = t
		}
		for _, lv := range []struct {
			key string
			v   *float64
			dst *float64
		}{{"ppl.word", s.Word, &p.PPL.Levels.Word}, {"ppl.phrase", s.Phrase, &p.PPL.Levels.Phrase}, {"ppl.sentence", s.Sentence, &p.PPL.Levels.Sentence}} {
			if lv.v == nil {
				continue
			}
			if !validWeight(*lv.v) {
				bad(lv.key, "level weight %v must be a finite number not below 0", *lv.v)
			}
			*lv.dst = *lv.v
		}
		if err := p.PPL.Levels.Validate(); err != nil && validWeight(p.PPL.Levels.Word) && validWeight(p.PPL.Levels.Phrase) && validWeight(p.PPL.Levels.Sentence) {
			bad("ppl", "%v (set word, phrase and sentence)", err)
		}
		if s.Shape != nil {
			shape, err := rewards.ParseShape(*s.Shape)
			if err != nil {
				bad("ppl.shape", "%v", err)
			}
			p.PPL.Shape = shape
		}
		if s.Thresholds != nil {
			if err := s.Thresholds.Validate(); err != nil {
				bad("ppl.thresholds", "%v", err)
			}
			p.PPL.Thresholds = *s.Thresholds
		}
	}
	if s := f.NTL; s != nil {
		p.NTL = &NTL{Weight: weight("ntl.weight", s.Weight), Mode: rewards.FinalAnswerMode, Loss: rewards.Wasserstein, Tau: defaultTau}
		if s.Mode != nil {
			mode, err := rewards.ParseNTLMode(*s.Mode)
			if err != nil {
				bad("ntl.mode", "%v", err)
			}
			p.NTL.Mode = mode
		}
		if s.Loss != nil {
			loss, err := rewards.ParseNTLLoss(*s.Loss)
			if err != nil {
				bad("ntl.loss", "%v", err)
			}
			p.NTL.Loss = loss
		}
		if s.Tau != nil {
			if !(*s.Tau > 0) || *s.Tau > 1e300 {
				bad("ntl.tau", "tau %v must be a finite number above 0", *s.Tau)
			}
			p.NTL.Tau = *s.Tau
		}
		p.NTL.TauEnd, p.NTL.Schedule, p.NTL.ConfidenceWeight = p.NTL.Tau, rewards.ScheduleConstant, defaultConfidence
		if s.TauEnd != nil {
			if !(*s.TauEnd > 0) || *s.TauEnd > 1e300 {
				bad("ntl.tau_end", "tau_end %v must be a finite number above 0", *s.TauEnd)
			}
			p.NTL.TauEnd = *s.TauEnd
		}
		if s.TemperatureSchedule != nil {
			if err := rewards.ParseScheduleKind(*s.TemperatureSchedule); err != nil {
				bad("ntl.temperature_schedule", "%v", err)
			}
			p.NTL.Schedule = *s.TemperatureSchedule
		}
		if s.ConfidenceWeight != nil {
			if !(*s.ConfidenceWeight >= 0 && *s.ConfidenceWeight <= 1) {
				bad("ntl.confidence_weight", "confidence_weight %v must be in [0, 1]", *s.ConfidenceWeight)
			}
			p.NTL.ConfidenceWeight = *s.ConfidenceWeight
		}
		if s.LossWeight != nil {
			if !validWeight(*s.LossWeight) {
				bad("ntl.loss_weight", "loss_weight %v must be a finite number not below 0", *s.LossWeight)
			}
			p.NTL.LossWeight = *s.LossWeight
		}
	}
	if s := f.Correctness; s != nil {
		p.Correctness = &Correctness{Weight: weight("correctness.weight", s.Weight), Extraction: rewards.Flexible}
		if s.Extraction != nil {
			switch e := rewards.Extraction(*s.Extraction); e {
			case rewards.Strict, rewards.Flexible:
				p.Correctness.Extraction = e
			default:
				bad("correctness.extraction", "unknown extraction %q (want \"strict\" or \"flexible\")", *s.Extraction)
			}
		}
	}
	if s := f.Format; s != nil {
		p.Format = &Format{Weight: weight("format.weight", s.Weight)}
	}
	if f.Rewards != nil {
		cmds, lerrs := DecodeRewards(f.Rewards, func(i int, key string) int { return RewardsLine(doc, i, key) })
		for _, e := range lerrs {
			errs = append(errs, keyError{e.Line, e.Msg})
		}
		p.Commands = cmds
	}
	if f.Environments != nil {
		envs, lerrs := DecodeEnvironments(f.Environments, func(i int, key string) int { return EnvironmentsLine(doc, i, key) })
		for _, e := range lerrs {
			errs = append(errs, keyError{e.Line, e.Msg})
		}
		p.Environments = envs
	}
	if len(errs) == 0 && p.PPL == nil && p.NTL == nil && p.Correctness == nil && p.Format == nil && len(p.Commands) == 0 && len(p.Environments) == 0 {
		errs = append(errs, keyError{0, "no reward: give at least one of [ppl], [ntl], [correctness], [format], [[rewards]]"})
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].line < errs[j].line })
		msgs := make([]string, len(errs))
		for i, e := range errs {
			if e.line > 0 {
				msgs[i] = fmt.Sprintf("%s:%d: %s", label, e.line, e.msg)
			} else {
				msgs[i] = fmt.Sprintf("%s: %s", label, e.msg)
			}
		}
		return Preset{}, nil, errors.New(strings.Join(msgs, "\n"))
	}
	return p, &f, nil
}

// decodeErrorLine picks apart BurntSushi/toml's type errors ("toml: line 10 (last key
// "ntl.tau"): incompatible types: …") to put them in this package's "file:line: key: …" form.
var decodeErrorLine = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// underUnknown reports whether a parent of k is itself an unknown key.
func underUnknown(k toml.Key, unknown map[string]bool) bool {
	for n := len(k) - 1; n > 0; n-- {
		if unknown[k[:n].String()] {
			return true
		}
	}
	return false
}

// keyLine is the line that defines key in doc, 0 when unknown. BurntSushi/toml keeps key
// positions private but puts them in the ParseError of a failed decode, so this decodes doc
// into a struct holding only key, typed to always fail. Keys inside arrays of tables have no
// position of their own: their parents are tried, then a plain search for "name =".
func keyLine(doc string, key []string) int {
	for n := len(key); n > 0; n-- {
		v := reflect.New(probeFor(key[:n]))
		_, err := toml.Decode(doc, v.Interface())
		var pe toml.ParseError
		if errors.As(err, &pe) && pe.Position.Line > 0 {
			if n == len(key) {
				return pe.Position.Line
			}
			if l := searchKey(doc, key[len(key)-1], pe.Position.Line); l > 0 {
				return l
			}
			return pe.Position.Line
		}
	}
	return searchKey(doc, key[len(key)-1], 1)
}

// searchKey finds the first line at or after from that assigns name ("name =" or
// "name=" after a space, brace or comma).
func searchKey(doc, name string, from int) int {
	for i, line := range strings.Split(doc, "\n") {
		if i+1 < from {
			continue
		}
		for _, q := range []string{name, strconv.Quote(name)} {
			for off := 0; ; {
				j := strings.Index(line[off:], q)
				if j < 0 {
					break
				}
				j += off
				before := strings.TrimRight(line[:j], " \t")
				after := strings.TrimLeft(line[j+len(q):], " \t")
				if (before == "" || strings.HasSuffix(before, "{") || strings.HasSuffix(before, ",") || strings.HasSuffix(before, ".")) && strings.HasPrefix(after, "=") {
					return i + 1
				}
				off = j + len(q)
			}
		}
	}
	return 0
}

// probeFailure decodes from nothing: any key given this type fails with its position.
type probeFailure struct{}

func (probeFailure) UnmarshalTOML(any) error { return errors.New("located") }

// probeFor is struct{ F struct{ ... probeFailure `toml:"key[n-1]"` } `toml:"key[0]"` }.
func probeFor(key []string) reflect.Type {
	t := reflect.TypeOf(probeFailure{})
	for i := len(key) - 1; i >= 0; i-- {
		t = reflect.StructOf([]reflect.StructField{{Name: "F", Type: t, Tag: reflect.StructTag(`toml:` + strconv.Quote(key[i]))}})
	}
	return t
}
