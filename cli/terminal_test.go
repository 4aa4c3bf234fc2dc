package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/runs/runstest"
)

// /dev/null is a character device but not a terminal: `replay RUN > /dev/null` takes the
// summary path instead of failing to open a TTY.
func TestReplayToDevNullIsNotATerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Fatal("/dev/null taken for a terminal")
	}
	dir := t.TempDir()
	runstest.WriteVerlLog(filepath.Join(dir, "proj", "exp.jsonl"), runstest.Plan{Steps: 10, Seed: 2}, false)
	var errb bytes.Buffer
	if code := Run([]string{"replay", dir}, strings.NewReader(""), null, &errb); code != 0 {
		t.Fatalf("replay RUN > /dev/null: exit %d: %s", code, errb.String())
	}
}
