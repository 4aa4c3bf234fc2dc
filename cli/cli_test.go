package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"rlhfstation/engine"
)

// runCaptured runs a command line as main does, with empty standard input and the
// command's stdout and stderr captured.
func runCaptured(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// Leaving the workstation says where the run is and how to resume it, and ctrl+c is exit 130.
func TestWorkstationExit(t *testing.T) {
	for _, c := range []struct {
		name        string
		interrupted bool
		engErr      error
		runDir      string
		code        int
		stderr      []string
	}{
		{"ctrl+c during a run", true, engine.ErrStopped, "/runs/r1", 130, []string{"run folder: /runs/r1", "resume with: rlhfstation --resume /runs/r1"}},
		{"q during a run", false, engine.ErrStopped, "/runs/r1", 0, []string{"run folder: /runs/r1", "resume with"}},
		{"finished run", false, nil, "/runs/r2", 0, []string{"run folder: /runs/r2"}},
		{"ctrl+c on the setup screen", true, nil, "", 130, nil},
	} {
		var out, errb bytes.Buffer
		err := workstationExit(streams{stdout: &out, stderr: &errb}, c.interrupted, nil, c.engErr, c.runDir)
		code := 0
		var ee exitError
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			code = 1
		}
		if code != c.code {
			t.Errorf("%s: exit %d, want %d", c.name, code, c.code)
		}
		for _, w := range c.stderr {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%s: stderr %q lacks %q", c.name, errb.String(), w)
			}
		}
		if c.runDir == "" && errb.Len() > 0 || c.engErr == nil && strings.Contains(errb.String(), "resume") {
			t.Errorf("%s: stderr %q", c.name, errb.String())
		}
	}
}
