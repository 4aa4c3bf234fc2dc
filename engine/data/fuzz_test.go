package data

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzNames are the file names a fuzzed input is read under: the name picks the reader as
// for a user's file (".parquet" forces Parquet; no known extension sniffs the content).
var fuzzNames = []string{"data.jsonl", "data.json", "data.parquet", "data.txt", "data"}

// FuzzReader feeds arbitrary bytes to every reader: it must never panic, an error must name
// the file, and what it accepts must be valid (UTF-8 text, known roles, entries placed).
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		`{"prompt": "a", "answer": "#### 5"}` + "\n" + `{"prompt": [{"role": "user", "content": "hi"}], "x": [1, {"y": null}]}`,
		`{"question": "q", "answer": "1\n#### 1,000"}`,
		`{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}`,
		`{"text": "once"}` + "\n\n" + `{"text": "twice", "id": 1e400}`,
		"[\n {\"problem\": \"p\", \"solution\": 3},\n {\"problem\": \"q\", \"solution\": \"4\"}\n]",
		`{"data_source": "d", "prompt": [{"role": "user", "content": "c"}], "reward_model": {"ground_truth": "2"}}`,
		`{"prompt": 5}`, "plain text\n\nprompts\n", "\xef\xbb\xbf{\"input\": \"x\"}", "caf\xe9",
	} {
		for k := range fuzzNames {
			f.Add(uint8(k), []byte(s))
		}
	}
	// The npm-written Parquet files, where they can be made (testdata/fuzz holds some too).
	if dir, err := fuzzFixtures(); err == nil {
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".parquet") {
				b, _ := os.ReadFile(p)
				f.Add(uint8(2), b)
				f.Add(uint8(2+len(fuzzNames)), b)
			}
			return nil
		})
	}
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		path := filepath.Join("/fuzz", fuzzNames[int(kind)%len(fuzzNames)])
		var o Options
		switch int(kind) / len(fuzzNames) % 3 {
		case 1:
			o = Options{PromptKey: "prompt", AnswerKey: "reward_model.ground_truth"}
		case 2:
			o = Options{PromptKey: "messages", AnswerKey: "answer"}
		}
		d, err := parse(path, b, o, Lines)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		if len(d.Examples) == 0 {
			t.Fatal("no entries and no error")
		}
		for _, x := range d.Examples {
			for _, s := range []string{x.Prompt, x.Answer, x.Text} {
				if !utf8.ValidString(s) {
					t.Fatalf("%s: not UTF-8: %q", x.Where(), s)
				}
			}
			if x.File != path || x.Line < 1 {
				t.Fatalf("entry placed at %q", x.Where())
			}
			if x.Messages != nil && (len(x.Messages) == 0 || x.Prompt != "") {
				t.Fatalf("%s: messages %v with prompt %q", x.Where(), x.Messages, x.Prompt)
			}
			for _, m := range x.Messages {
				if !slices.Contains(Roles, m.Role) || !utf8.ValidString(m.Content) {
					t.Fatalf("%s: message %+v", x.Where(), m)
				}
			}
		}
	})
}

// fuzzFixtures is parquetFixtures for a fuzz target's seeds: an error rather than a skip.
func fuzzFixtures() (string, error) {
	makeFixtures()
	if fixtures.err != "" {
		return "", errors.New(fixtures.err)
	}
	return fixtures.dir, nil
}
