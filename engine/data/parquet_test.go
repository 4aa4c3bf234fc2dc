package data

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"rlhfstation/internal/testref"
)

// The Parquet test files (testref.WriteParquetFixtures), written once per test binary.
var fixtures struct {
	once sync.Once
	dir  string
	err  string // why they could not be made
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtures.dir != "" {
		os.RemoveAll(fixtures.dir)
	}
	os.Exit(code)
}

// parquetFixtures writes the test files once per test binary and returns their folder,
// skipping (failing in CI) without node or the writers.
func parquetFixtures(t *testing.T) string {
	t.Helper()
	makeFixtures()
	if strings.HasPrefix(fixtures.err, "write.mjs") {
		t.Fatal(fixtures.err)
	}
	if fixtures.err != "" {
		testref.Missing(t, "%s", fixtures.err)
	}
	return fixtures.dir
}

// makeFixtures writes the files once, setting fixtures.dir or fixtures.err.
func makeFixtures() {
	fixtures.once.Do(func() {
		dir, err := os.MkdirTemp("", "rlhfstation-parquet-")
		if err != nil {
			fixtures.err = err.Error()
			return
		}
		fixtures.dir = dir
		missing, err := testref.WriteParquetFixtures(dir)
		if err != nil {
			fixtures.err = err.Error()
		} else {
			fixtures.err = missing
		}
	})
}

// generic round-trips v through JSON, so that values decoded from Parquet (int64) and from
// JSON (json.Number) compare equal when they are the same data.
func generic(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	json.Unmarshal(b, &out)
	return out
}

// The Parquet files read exactly as the same rows written as JSONL.
func TestParquetMatchesJSONL(t *testing.T) {
	dir := parquetFixtures(t)
	for _, c := range []struct{ parquet, jsonl string }{
		{"verl.parquet", "verl.jsonl"}, {"math.parquet", "math.jsonl"}, {"messages.parquet", "messages.jsonl"},
		{"dsnp-flat.parquet", "dsnp-flat.jsonl"}, {"dsnp-nested.parquet", "dsnp-nested.jsonl"}, {"gsm8k", "gsm8k-train.jsonl"},
	} {
		p, err := Load(filepath.Join(dir, c.parquet), Options{})
		if err != nil {
			t.Errorf("%s: %v", c.parquet, err)
			continue
		}
		j, err := Load(filepath.Join(dir, c.jsonl), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Container != Parquet || p.Format != j.Format || p.PromptKey != j.PromptKey || p.AnswerKey != j.AnswerKey ||
			p.Conversational != j.Conversational || len(p.Examples) != len(j.Examples) {
			t.Errorf("%s: %s %s prompt %q answer %q conversational %v, %d entries; JSONL: %s prompt %q answer %q %v, %d",
				c.parquet, p.Container, p.Format, p.PromptKey, p.AnswerKey, p.Conversational, len(p.Examples), j.Format, j.PromptKey, j.AnswerKey, j.Conversational, len(j.Examples))
			continue
		}
		pc, jc := slices.Sorted(slices.Values(p.Columns)), slices.Sorted(slices.Values(j.Columns))
		if !slices.Equal(pc, jc) {
			t.Errorf("%s: columns %v, JSONL's %v", c.parquet, p.Columns, j.Columns)
		}
		row := 0
		for i, x := range p.Examples {
			y := j.Examples[i]
			if i > 0 && x.File != p.Examples[i-1].File {
				row = 0
			}
			row++
			if x.Line != row || !strings.HasSuffix(x.Where(), ".parquet row "+itoa(row)) {
				t.Errorf("%s entry %d: at %s", c.parquet, i, x.Where())
			}
			if x.Prompt != y.Prompt || !reflect.DeepEqual(x.Messages, y.Messages) || x.Answer != y.Answer || x.Text != y.Text ||
				!reflect.DeepEqual(generic(t, x.Extra), generic(t, y.Extra)) {
				t.Errorf("%s entry %d:\n%+v\nJSONL:\n%+v", c.parquet, i, x, y)
			}
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestParquetValues(t *testing.T) {
	dir := parquetFixtures(t)
	d, err := Load(filepath.Join(dir, "verl.parquet"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := d.Examples[0]
	if d.PromptKey != "prompt" || d.AnswerKey != "reward_model.ground_truth" || !d.Conversational || len(d.Examples) != 5 ||
		!reflect.DeepEqual(x.Messages, []Message{{"system", "Think step by step."}, {"user", "Natalia sold 48 clips. How many?"}}) ||
		x.Answer != "72" || x.Extra["data_source"] != "openai/gsm8k" || x.Extra["extra_info"].(map[string]any)["index"] != int64(0) {
		t.Errorf("verl: %+v\n%+v", d, x)
	}
	if got := d.Describe(); !strings.HasSuffix(got, `verl.parquet: 5 entries, Parquet; prompt from "prompt" (messages), answer from "reward_model.ground_truth"`) {
		t.Errorf("Describe() = %q", got)
	}
	if x := d.Examples[3]; x.Messages[0] != (Message{"system", ""}) || x.Messages[1].Content != "Say \"yes\"\nthen stop." || x.Line != 4 {
		t.Errorf("entry 4 (second row group): %+v", x)
	}
	want := "verl.parquet: no column \"query\" ([data] prompt_key); the file's columns: data_source, prompt, ability, reward_model.ground_truth, reward_model.style, extra_info.index, extra_info.split, extra_info.answer"
	if _, err := Load(filepath.Join(dir, "verl.parquet"), Options{PromptKey: "query"}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("missing prompt_key: %v", err)
	}
	// Keys named: the answer from a nested column other than the default.
	d, err = Load(filepath.Join(dir, "verl.parquet"), Options{PromptKey: "prompt", AnswerKey: "extra_info.answer"})
	if err != nil || d.Examples[0].Answer != "48+24=72" || d.Examples[2].Answer != "" {
		t.Errorf("answer_key extra_info.answer: %v %+v", err, d)
	}

	// Hub shards in order, the test split left out.
	d, err = Load(filepath.Join(dir, "gsm8k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Format != GSM8K || len(d.Examples) != 5 || d.Split != "train" || len(d.Files) != 2 || !strings.HasSuffix(d.Files[1], "train-00001-of-00002.parquet") ||
		d.Examples[4].Answer != "10000" || d.Examples[3].Line != 1 || !strings.HasSuffix(d.Examples[3].File, "train-00001-of-00002.parquet") {
		t.Errorf("gsm8k shards: %+v", d)
	}
	if got := d.Describe(); !strings.HasSuffix(got, `gsm8k (2 files: train-00000-of-00002.parquet … train-00001-of-00002.parquet, split "train"): 5 entries, Parquet; prompt from "question" (text), answer from "answer", GSM8K "####" answers`) {
		t.Errorf("Describe() = %q", got)
	}
	// verl's train.parquet beside test.parquet: the train split.
	d, err = Load(filepath.Join(dir, "verl-split"), Options{})
	if err != nil || len(d.Examples) != 3 || d.Split != "train" || len(d.Files) != 1 {
		t.Errorf("verl split folder: %v %+v", err, d)
	}
}

func TestParquetErrors(t *testing.T) {
	dir := parquetFixtures(t)
	for _, c := range []struct{ file, want string }{
		{"bad-role.parquet", `bad-role.parquet row 3: field "prompt", message 2: unknown role "bot"`},
		{"int-prompt.parquet", `int-prompt.parquet row 1: field "prompt" is a number, not a string or a list of {role, content} messages`},
		{"binary-prompt.parquet", `binary-prompt.parquet row 2: field "prompt" is not UTF-8 text`},
		{"null-prompt.parquet", `null-prompt.parquet row 2: field "prompt" is null`},
	} {
		_, err := Load(filepath.Join(dir, c.file), Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.file, err, c.want)
		}
	}
	good, _ := os.ReadFile(filepath.Join(dir, "verl.parquet"))
	damaged := slices.Clone(good)
	for i := 100; i < len(damaged)-100; i += 7 {
		damaged[i] ^= 0x5a
	}
	for name, b := range map[string][]byte{"cut.parquet": good[:len(good)-9], "damaged.parquet": damaged, "magic.parquet": []byte("PAR1 not really PAR1")} {
		_, err := Load(write(t, name, string(b)), Options{})
		if err == nil || !strings.Contains(err.Error(), name+":") {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

func TestFolders(t *testing.T) {
	dir := parquetFixtures(t)
	copyTo := func(folder string, files ...string) string {
		t.Helper()
		d := filepath.Join(t.TempDir(), folder)
		os.MkdirAll(d, 0o755)
		for _, f := range files {
			src, name, _ := strings.Cut(f, "=")
			if name == "" {
				name = filepath.Base(src)
			}
			b, err := os.ReadFile(filepath.Join(dir, src))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, name), b, 0o644)
		}
		return d
	}
	for _, c := range []struct {
		dir  string
		want string
	}{
		{copyTo("mixed", "math.parquet", "math.jsonl"), "mixed: holds .jsonl and .parquet files"},
		{copyTo("gap", "gsm8k/train-00001-of-00002.parquet"), "gap: shard 00000 of 00002 is missing (1 of 2 present)"},
		{copyTo("odd", "gsm8k/train-00000-of-00002.parquet", "gsm8k/train-00001-of-00002.parquet", "math.parquet=train_extra.parquet"), "odd: train_extra.parquet is not named like the shards beside it"},
		{copyTo("splits", "math.parquet=test.parquet", "math.parquet=validation.parquet"), `splits: holds several splits ("test", "validation") and no "train"`},
		{copyTo("cols", "math.parquet=part-1.parquet", "verl.parquet=part-2.parquet"), `part-2.parquet: no column "problem" (the first shard`},
		{jsonArrayBeside(copyTo("fmt", "verl.jsonl=a.json")), `b.json: a JSON array file among JSONL shards`},
		{filepath.Dir(copyTo("sub/main", "math.parquet")), "sub: no .parquet, .jsonl or .json file in it; name one of its folders: main/"},
		{copyTo("none"), "none: empty file"},
	} {
		_, err := Load(c.dir, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.dir, err, c.want)
		}
	}
	// Natural order: part-2 before part-10; JSONL shards read the same way.
	d := copyTo("jsonl", "math.jsonl=part-10.jsonl", "verl.jsonl=part-2.jsonl")
	got, err := Load(d, Options{PromptKey: "prompt", AnswerKey: "reward_model.ground_truth"})
	if err == nil || !strings.Contains(err.Error(), `part-10.jsonl: no column "prompt"`) {
		t.Errorf("natural order: %v %+v", err, got)
	}
}

// jsonArrayBeside adds b.json, a JSON array, to folder d.
func jsonArrayBeside(d string) string {
	os.WriteFile(filepath.Join(d, "b.json"), []byte(`[{"prompt": "x"}]`), 0o644)
	return d
}

// Files parquet-go cannot take are errors naming the file, whatever the reader does.
func TestParquetReaderFailures(t *testing.T) {
	p := write(t, "bomb.parquet", "PAR1\x15\x04\x19lPAR1")
	if _, err := Load(p, Options{}); err == nil || !strings.HasSuffix(err.Error(), "bomb.parquet: damaged Parquet file (its footer claims 1813578773 bytes of a 12-byte file)") {
		t.Errorf("footer length beyond the file: %v", err)
	}
	_, err := guard("x.parquet", func() (*source, error) {
		var s []int
		return nil, fmt.Errorf("%d", s[3]) // as parquet-go v0.32.0's ReadPageIndex on @dsnp/parquetjs files
	})
	if err == nil || !strings.HasPrefix(err.Error(), "x.parquet: damaged or unsupported Parquet file (the reader failed: runtime error: index out of range [3] with length 0)") {
		t.Errorf("panic: %v", err)
	}
}
