package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func splitWith(sc *scanner, s string) []string {
	var out []string
	for _, r := range sc.split(s, nil) {
		out = append(out, s[r[0]:r[1]])
	}
	return out
}

// The expected splits were derived by hand from the regexes (alternatives in order,
// greedy quantifiers, backtracking into `\s+(?!\S)`), not produced by this code.
func TestScannerSplits(t *testing.T) {
	cases := []struct {
		text                string
		gpt2, llama3, qwen2 []string
	}{
		{"Hello world",
			[]string{"Hello", " world"},
			[]string{"Hello", " world"},
			[]string{"Hello", " world"}},
		{"1234567",
			[]string{"1234567"},
			[]string{"123", "456", "7"},
			[]string{"1", "2", "3", "4", "5", "6", "7"}},
		{" 12345",
			[]string{" 12345"},
			[]string{" ", "123", "45"},
			[]string{" ", "1", "2", "3", "4", "5"}},
		{"3.14",
			[]string{"3", ".", "14"},
			[]string{"3", ".", "14"},
			[]string{"3", ".", "1", "4"}},
		{"٣٤٥٦ ½", // Arabic-Indic digits (Nd) and ½ (No) are \p{N}
			[]string{"٣٤٥٦", " ½"},
			[]string{"٣٤٥", "٦", " ", "½"},
			[]string{"٣", "٤", "٥", "٦", " ", "½"}},
		{"I'VE we'Re it's",
			[]string{"I", "'", "VE", " we", "'", "Re", " it", "'s"},
			[]string{"I", "'VE", " we", "'Re", " it", "'s"},
			[]string{"I", "'VE", " we", "'Re", " it", "'s"}},
		{"it'ſ don'tx 'll", // ſ case-folds to s; a contraction ends where its letters do
			[]string{"it", "'", "ſ", " don", "'t", "x", " '", "ll"},
			[]string{"it", "'ſ", " don", "'t", "x", " '", "ll"},
			[]string{"it", "'ſ", " don", "'t", "x", " '", "ll"}},
		{"a  \n\n  b  ",
			[]string{"a", "  \n\n ", " b", "  "},
			[]string{"a", "  \n\n", " ", " b", "  "},
			[]string{"a", "  \n\n", " ", " b", "  "}},
		{"hi \n",
			[]string{"hi", " \n"},
			[]string{"hi", " \n"},
			[]string{"hi", " \n"}},
		{"x ... !!\n\ny",
			[]string{"x", " ...", " !!", "\n", "\n", "y"},
			[]string{"x", " ...", " !!\n\n", "y"},
			[]string{"x", " ...", " !!\n\n", "y"}},
		{"\tword\u3000\u3000next", // U+3000 is \s
			[]string{"\t", "word", "\u3000", "\u3000", "next"},
			[]string{"\tword", "\u3000", "\u3000next"},
			[]string{"\tword", "\u3000", "\u3000next"}},
		{"café e\u0301t Привет, мир!", // U+0301 is a mark (Mn): not \p{L}
			[]string{"café", " e", "\u0301", "t", " Привет", ",", " мир", "!"},
			[]string{"café", " e", "\u0301t", " Привет", ",", " мир", "!"},
			[]string{"café", " e", "\u0301t", " Привет", ",", " мир", "!"}},
		{"  \r\n",
			[]string{"  \r\n"},
			[]string{"  \r\n"},
			[]string{"  \r\n"}},
	}
	for _, c := range cases {
		for _, s := range []struct {
			name string
			sc   *scanner
			want []string
		}{{"gpt2", gpt2Scanner, c.gpt2}, {"llama3", llama3Scanner, c.llama3}, {"qwen2", qwen2Scanner, c.qwen2}} {
			if got := splitWith(s.sc, c.text); !reflect.DeepEqual(got, s.want) {
				t.Errorf("%s %q:\n got  %q\n want %q", s.name, c.text, got, s.want)
			}
		}
	}
}

func TestCompilePattern(t *testing.T) {
	for p, want := range map[string]*scanner{gpt2Pattern: gpt2Scanner, llama3Pattern: llama3Scanner, qwen2Pattern: qwen2Scanner} {
		if m, err := compilePattern(p); err != nil || m != want {
			t.Errorf("pattern %q: got %v, %v", p, m, err)
		}
	}
	if _, err := compilePattern(`\s+(?!\S)|\w+`); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("look-ahead pattern: err = %v", err)
	}
	// Without look-around, Go's regexp runs it with \s in its Unicode meaning.
	m, err := compilePattern(`\s+|\d+`)
	if err != nil {
		t.Fatal(err)
	}
	parts := splitParts(len("a\u3000٣4"), m.matches("a\u3000٣4", nil), behaviorIsolated, false, nil)
	if want := []part{{0, 1}, {1, 4}, {4, 7}}; !reflect.DeepEqual(parts, want) {
		t.Errorf("regex parts %v, want %v", parts, want)
	}
}

func TestSplitBehaviors(t *testing.T) {
	s := "a--b-c"
	ms := literalMatcher("-").matches(s, nil)
	cases := map[behavior][]string{
		behaviorRemoved:            {"a", "b", "c"},
		behaviorIsolated:           {"a", "-", "-", "b", "-", "c"},
		behaviorMergedWithPrevious: {"a-", "-", "b-", "c"},
		behaviorMergedWithNext:     {"a", "-", "-b", "-c"},
		behaviorContiguous:         {"a", "--", "b", "-", "c"},
	}
	for b, want := range cases {
		var got []string
		for _, p := range splitParts(len(s), ms, b, false, nil) {
			got = append(got, s[p.start:p.end])
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("behavior %d: got %q, want %q", b, got, want)
		}
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokenizer.json")
	for _, content := range []string{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [`, `{"model": {"type": "WordPiece"}}`,
		`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?=x)"}, "behavior": "Isolated"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`} {
		if err := os.WriteFile(bad, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("content %.30q: error %v does not name %s", content, err, bad)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

// TestScannerCrossCheck compares the scanners with V8's regex engine on the cases
// written by testdata/regex_crosscheck.js; it runs only when TOKENIZER_CROSSCHECK
// names that output (node is not a dependency of the tests).
func TestScannerCrossCheck(t *testing.T) {
	path := os.Getenv("TOKENIZER_CROSSCHECK")
	if path == "" {
		t.Skip("set TOKENIZER_CROSSCHECK to the output of testdata/regex_crosscheck.js")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	scanners := map[string]*scanner{"gpt2": gpt2Scanner, "llama3": llama3Scanner, "qwen2": qwen2Scanner}
	n, bad := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var c struct {
			Name   string   `json:"name"`
			Text   string   `json:"text"`
			Pieces []string `json:"pieces"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		n++
		if got := splitWith(scanners[c.Name], c.Text); !reflect.DeepEqual(got, c.Pieces) && !(len(got) == 0 && len(c.Pieces) == 0) {
			if bad++; bad <= 10 {
				t.Errorf("%s %q:\n got  %q\n want %q", c.Name, c.Text, got, c.Pieces)
			}
		}
	}
	t.Logf("%d cases, %d differ", n, bad)
}
