package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The test binary runs main itself when asked to, so that main's wiring of the process's
// arguments, streams and exit code is tested as a user meets it.
func TestMain(m *testing.M) {
	if os.Getenv("RLHFSTATION_RUN_MAIN") == "1" {
		os.Args = append([]string{"rlhfstation"}, os.Args[1:]...)
		main()
	}
	os.Exit(m.Run())
}

func runMain(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "RLHFSTATION_RUN_MAIN=1")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func TestMainWiring(t *testing.T) {
	if code, out, _ := runMain(t, "", "help"); code != 0 || !strings.Contains(out, "commands:") || !strings.Contains(out, "inspect") {
		t.Errorf("help: exit %d, stdout %q", code, out)
	}
	if code, out, errs := runMain(t, "", "no-such-command"); code != 2 || out != "" || !strings.Contains(errs, `unknown command "no-such-command"`) {
		t.Errorf("unknown command: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Standard input reaches the commands: tokenize - reads its text from it.
	code, out, errs := runMain(t, "2 + 3", "tokenize", "--json", "--special=false", "-")
	if code != 0 || !strings.HasSuffix(out, `"offsets":[[0,1],[1,3],[3,4],[4,5]]}`+"\n") {
		t.Errorf("tokenize -: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
