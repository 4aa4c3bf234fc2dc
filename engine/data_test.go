package engine

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// A run reads a Hub folder of Parquet shards (its train split) and says in its first lines
// which columns it used.
func TestRunReadsParquetShards(t *testing.T) {
	type row struct {
		Question string `parquet:"question"`
		Answer   string `parquet:"answer"`
		ID       int64  `parquet:"id"`
	}
	dir := t.TempDir()
	for _, s := range []struct {
		name string
		from int
		n    int
	}{{"train-00000-of-00002.parquet", 0, 3}, {"train-00001-of-00002.parquet", 3, 2}, {"test-00000-of-00001.parquet", 9, 1}} {
		var rows []row
		for i := s.from; i < s.from+s.n; i++ {
			rows = append(rows, row{Question: fmt.Sprintf("What is %d+%d?", i, i), Answer: fmt.Sprintf("%d+%d=%d\n#### %d", i, i, 2*i, 2*i), ID: int64(i)})
		}
		if err := parquet.WriteFile(filepath.Join(dir, s.name), rows); err != nil {
			t.Fatal(err)
		}
	}
	c := tinyConfig(t, "math", 1)
	c.Data.Path = dir
	var log []string
	e, err := New(c, Options{ModelDir: tinyModelDir(t), ModelName: "tiny", Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.prompts) != 5 || e.prompts[4].Prompt != "What is 4+4?" || e.prompts[4].Answer != "8" || e.prompts[4].Extra["id"] != int64(4) {
		t.Errorf("prompts %+v", e.prompts)
	}
	want := fmt.Sprintf(`data: %s (2 files: train-00000-of-00002.parquet … train-00001-of-00002.parquet, split "train"): 5 entries, Parquet; prompt from "question" (text), answer from "answer", GSM8K "####" answers`, dir)
	found := false
	for _, l := range log {
		found = found || l == want
	}
	if !found {
		t.Errorf("set-up log lacks %q:\n%s", want, strings.Join(log, "\n"))
	}
}
