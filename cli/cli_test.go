package cli

import (
	"bytes"
	"strings"
	"testing"
)

// runCaptured runs a command line as main does, with empty standard input and the
// command's stdout and stderr captured.
func runCaptured(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}
