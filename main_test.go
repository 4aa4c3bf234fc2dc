package main

import (
	"bytes"
	"os"
	"testing"
)

// runCaptured runs a command line as main does, with os.Stdout (where commands print) and
// stderr captured.
func runCaptured(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = f
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	os.Stdout = saved
	f.Close()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b) + out.String(), errb.String()
}
