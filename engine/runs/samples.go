package runs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"rlhfstation/engine/events"
	"rlhfstation/internal/pyjson"
)

// Completions other tools log, read as samples events:
//
//   - TRL's log_completions: completions/completions_<step>.parquet in the output folder
//     (columns step, prompt, completion, one per reward function, advantage), and the same
//     table as Weights & Biases saves it, wandb/…/media/table/completions_<n>_<hash>.table.json
//     ({"columns": [...], "data": [[...], ...]});
//   - verl's trainer.rollout_data_dir dumps: <step>.jsonl, one {"input", "output", "gts",
//     "score", "step", …} a line;
//   - OpenRLHF's TensorBoard text "train/generated_samples" ("Sample:\n<text>\n\nReward: <r>").

// sampleFile is one file of completions, with the step it holds (from its name until read).
type sampleFile struct {
	path string
	step int
	kind string // "parquet", "wandb", "rollout"
}

// batch is one step's completions.
type batch struct {
	step    int
	samples []events.Sample
}

// sampleSet tracks a run's completion files: those sent, those waiting for their step.
type sampleSet struct {
	dirs  map[string]bool // folders to look in again when following
	files []sampleFile    // not sent yet, by step
	seen  map[string]bool
}

var (
	parquetName = regexp.MustCompile(`^completions_(\d+)\.parquet$`)
	wandbName   = regexp.MustCompile(`^completions_(\d+)_[0-9a-f]+\.table\.json$`)
	rolloutName = regexp.MustCompile(`^(\d+)\.jsonl$`)
)

func newSampleSet(dir string, tables, rollouts []string) *sampleSet {
	s := &sampleSet{dirs: map[string]bool{filepath.Join(dir, "completions"): true}, seen: map[string]bool{}}
	for _, p := range append(append([]string(nil), tables...), rollouts...) {
		s.dirs[filepath.Dir(p)] = true
	}
	s.rescan()
	return s
}

// rescan looks for files not seen yet in the known folders.
func (s *sampleSet) rescan() {
	for d := range s.dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if e.IsDir() || s.seen[p] {
				continue
			}
			var f sampleFile
			switch name := e.Name(); {
			case parquetName.MatchString(name):
				f = sampleFile{path: p, kind: "parquet"}
				f.step, _ = strconv.Atoi(parquetName.FindStringSubmatch(name)[1])
			case wandbName.MatchString(name):
				f = sampleFile{path: p, kind: "wandb"}
				f.step, _ = strconv.Atoi(wandbName.FindStringSubmatch(name)[1])
			case rolloutName.MatchString(name) && sniffJSONL(p) == "rollout":
				f = sampleFile{path: p, kind: "rollout"}
				f.step, _ = strconv.Atoi(rolloutName.FindStringSubmatch(name)[1])
			default:
				continue
			}
			s.seen[p] = true
			s.files = append(s.files, f)
		}
	}
	sort.SliceStable(s.files, func(i, j int) bool { return s.files[i].step < s.files[j].step })
}

// describe says where completions were found, or "" when none were.
func (s *sampleSet) describe(dir string) string {
	if len(s.files) == 0 {
		return ""
	}
	count := map[string]int{}
	folders := map[string]bool{}
	for _, f := range s.files {
		count[f.kind]++
		folders[relTo(dir, filepath.Dir(f.path))] = true
	}
	var parts []string
	for _, k := range sortedKeys(count) {
		what := map[string]string{"parquet": "TRL parquet tables", "wandb": "W&B completions tables", "rollout": "verl rollout dumps"}[k]
		parts = append(parts, fmt.Sprintf("%d %s", count[k], what))
	}
	return strings.Join(sortedKeys(folders), ", ") + " (" + strings.Join(parts, ", ") + ")"
}

// upTo reads and returns the files whose step is at most step, in order. Unreadable files are
// reported through warn and skipped.
func (s *sampleSet) upTo(step int, warn func(key, msg string)) []batch {
	var out []batch
	n := 0
	for n < len(s.files) && s.files[n].step <= step {
		f := s.files[n]
		n++
		b, err := readSamples(f)
		if err != nil {
			warn("completions", fmt.Sprintf("%s: %v (skipped)", f.path, err))
			continue
		}
		if len(b.samples) > 0 {
			out = append(out, b)
		}
	}
	s.files = s.files[n:]
	return out
}

func readSamples(f sampleFile) (batch, error) {
	b := batch{step: f.step}
	var err error
	switch f.kind {
	case "parquet":
		b.samples, err = readParquetTable(f.path, &b.step)
	case "wandb":
		b.samples, err = readWandbTable(f.path, &b.step)
	case "rollout":
		b.samples, err = readRollout(f.path, &b.step)
	}
	if len(b.samples) > maxSamples {
		b.samples = b.samples[:maxSamples]
	}
	return b, err
}

// tableSamples turns rows of TRL's completions table into samples. Columns other than step,
// prompt, completion, advantage and the ones holding text are the reward functions'.
func tableSamples(cols []string, row func(i int) []any, rows int, step *int) []events.Sample {
	var out []events.Sample
	for i := 0; i < rows && len(out) < maxSamples; i++ {
		vals := row(i)
		s := events.Sample{Advantage: math.NaN(), Reward: math.NaN(), Rewards: events.Metrics{}}
		total, anyReward := 0.0, false
		for j, c := range cols {
			if j >= len(vals) {
				break
			}
			v := vals[j]
			switch c {
			case "step":
				if n, ok := toFloat(v); ok {
					*step = int(n)
				}
			case "prompt":
				s.Prompt = toText(v)
			case "completion":
				s.Completion = toText(v)
			case "advantage":
				if n, ok := toFloat(v); ok {
					s.Advantage = n
				}
			default:
				if n, ok := toFloat(v); ok {
					s.Rewards[c] = n
					total += n
					anyReward = true
				}
			}
		}
		if anyReward {
			s.Reward = total // TRL's reward is the weighted sum; weights are not in the table
		}
		out = append(out, s)
	}
	return out
}

func readWandbTable(path string, step *int) ([]events.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var t struct {
		Columns []string `json:"columns"`
		Data    [][]any  `json:"data"`
	}
	if err := json.NewDecoder(pyjson.NewReader(f)).Decode(&t); err != nil {
		return nil, err
	}
	if !contains(t.Columns, "completion") {
		return nil, fmt.Errorf("no completion column (columns %v)", t.Columns)
	}
	return tableSamples(t.Columns, func(i int) []any { return t.Data[i] }, len(t.Data), step), nil
}

func readRollout(path string, step *int) ([]events.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 64<<20)
	var out []events.Sample
	for line := 1; sc.Scan() && len(out) < maxSamples; line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.NewDecoder(pyjson.NewReader(bytes.NewReader(b))).Decode(&rec); err != nil {
			return out, fmt.Errorf("line %d: %v", line, err)
		}
		s := events.Sample{Advantage: math.NaN(), Reward: math.NaN(), Rewards: events.Metrics{}}
		for k, raw := range rec {
			switch k {
			case "input":
				s.Prompt = rawText(raw)
			case "output":
				s.Completion = rawText(raw)
			case "gts":
				s.Answer = rawText(raw)
			case "step":
				if v, ok := pyjson.Number(raw); ok {
					*step = int(v)
				}
			case "score":
				if v, ok := pyjson.Number(raw); ok {
					s.Reward = v
				}
			default:
				if v, ok := pyjson.Number(raw); ok {
					s.Rewards[k] = v
				}
			}
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseGeneratedSample reads OpenRLHF's text summary of one generated sample:
// "Sample:\n<prompt and response>\n\nReward: <r>" (OpenRLHF writes the newlines as the two
// characters \n).
func parseGeneratedSample(tag, text string) (events.Sample, bool) {
	if !strings.HasSuffix(tag, "generated_samples") {
		return events.Sample{}, false
	}
	t := strings.ReplaceAll(text, `\n`, "\n")
	t = strings.TrimPrefix(t, "Sample:\n")
	s := events.Sample{Advantage: math.NaN(), Reward: math.NaN(), Completion: t}
	if i := strings.LastIndex(t, "\n\nReward: "); i >= 0 {
		if v, err := strconv.ParseFloat(strings.TrimSpace(t[i+len("\n\nReward: "):]), 64); err == nil {
			s.Reward, s.Completion = v, t[:i]
		}
	}
	return s, true
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case int32:
		return float64(x), true
	case int:
		return float64(x), true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		switch x {
		case "NaN":
			return math.NaN(), true
		case "+Inf", "Infinity":
			return math.Inf(1), true
		case "-Inf", "-Infinity":
			return math.Inf(-1), true
		}
	}
	return 0, false
}

// toText shows a cell as text: strings as they are, conversations (lists of {role, content})
// one message a line, anything else as JSON.
func toText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case []any:
		var lines []string
		for _, m := range x {
			if mm, ok := m.(map[string]any); ok {
				if c, ok := mm["content"].(string); ok {
					role, _ := mm["role"].(string)
					lines = append(lines, role+": "+c)
					continue
				}
			}
			lines = append(lines, toText(m))
		}
		return strings.Join(lines, "\n")
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func rawText(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return toText(v)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
