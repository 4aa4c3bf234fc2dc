// Package e2e drives the built rlhfstation binary in a real terminal (tmux): `replay` over a
// recorded run, keys sent with send-keys, the screen read back with capture-pane.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"rlhfstation/internal/testmodel"
	"rlhfstation/internal/testref"
	"rlhfstation/tui/fixture"
)

// build compiles the binary from the repository root into a temporary folder.
// RLHFSTATION_E2E_BIN names a binary built beforehand instead (for iterating on the tests
// while the checkout does not build); CI leaves it unset.
// The binary is built once for all the tests of the package.
func build(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("RLHFSTATION_E2E_BIN"); b != "" {
		return b
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rlhfstation-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		built = filepath.Join(dir, "rlhfstation")
		cmd := exec.Command("go", "build", "-o", built, ".")
		cmd.Dir = testref.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

var (
	buildOnce     sync.Once
	built, binDir string
	buildErr      error
)

func TestMain(m *testing.M) {
	code := testmodel.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// screenWait bounds every wait for the screen or a file: generous, since a loaded machine
// (CI, or two cores shared with other builds) can take many seconds to start a run, and a
// passing wait returns as soon as the screen shows what it waits for.
const screenWait = 60 * time.Second

// tmux is one private tmux server holding one session.
type tmux struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T, w, h int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		testref.Missing(t, "tmux not on PATH (apt-get install tmux)")
	}
	tm := &tmux{t: t, socket: fmt.Sprintf("rlhfstation-e2e-%d-%d", os.Getpid(), time.Now().UnixNano())}
	tm.run("-f", "/dev/null", "new-session", "-d", "-s", "e2e", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h), command)
	tm.run("set-option", "-g", "window-size", "manual")
	t.Cleanup(func() { exec.Command("tmux", "-L", tm.socket, "kill-server").Run() })
	return tm
}

func (tm *tmux) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (tm *tmux) screen(escapes bool) string {
	args := []string{"capture-pane", "-p", "-t", "e2e"}
	if escapes {
		args = append(args, "-e")
	}
	return tm.run(args...)
}

func (tm *tmux) keys(keys ...string) { tm.run(append([]string{"send-keys", "-t", "e2e"}, keys...)...) }

// waitFor polls the screen until every string shows.
func (tm *tmux) waitFor(wants ...string) string {
	tm.t.Helper()
	deadline := time.Now().Add(screenWait)
	for {
		s := tm.screen(false)
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(s, w)
		}
		if ok {
			return s
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("screen never showed %q:\n%s", wants, s)
		}
		time.Sleep(40 * time.Millisecond)
	}
}

// waitGone polls the screen until none of the strings shows.
func (tm *tmux) waitGone(gone ...string) {
	tm.t.Helper()
	deadline := time.Now().Add(screenWait)
	for {
		s := tm.screen(false)
		found := false
		for _, g := range gone {
			found = found || strings.Contains(s, g)
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("screen still shows one of %q:\n%s", gone, s)
		}
		time.Sleep(40 * time.Millisecond)
	}
}

var sgr = regexp.MustCompile(`\x1b\[([0-9;:]*)m`)

// hasColour reports whether s sets a colour (foreground or background; 39 and 49, which reset
// to the default colours, do not count).
func hasColour(s string) bool {
	for _, m := range sgr.FindAllStringSubmatch(s, -1) {
		for _, p := range strings.Split(m[1], ";") {
			switch n := atoi(p); {
			case n >= 30 && n <= 38, n >= 40 && n <= 48, n >= 90 && n <= 97, n >= 100 && n <= 107:
				return true
			}
		}
	}
	return false
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if s == "" {
		return 0
	}
	return n
}

func TestReplayInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		testref.Missing(t, "tmux not on PATH (apt-get install tmux)")
	}
	bin := build(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, fixture.Events(fixture.Options{})); err != nil {
		t.Fatal(err)
	}

	t.Run("finished run, NO_COLOR", func(t *testing.T) {
		tm := newTmux(t, 160, 48, fmt.Sprintf("echo BEFORE; NO_COLOR=1 %s replay %s; echo EXIT=$?; sleep 60", bin, dir))
		tm.waitFor("✓ completed", "alerts · 1 critical · 2 warning · 1 info", "samples · step 60 · 1/4", "KL divergence")
		if s := tm.screen(true); hasColour(s) {
			t.Errorf("NO_COLOR=1 but the screen has colour escapes")
		}
		tm.keys("space")
		tm.waitFor("replay: not a live run")
		tm.keys("c")
		tm.waitFor("checkpoints · 3", "checkpoints/step-000060", "q_proj.lora_B norm grew")
		tm.keys("Up", "Enter")
		// The replay inspects the real folder: the fixture's stub checkpoint has no weights,
		// and the report says which file is missing.
		tm.waitFor("adapter_model.safetensors")
		// An escape followed at once by another key reads as alt+key: wait for each screen.
		tm.keys("Escape")
		tm.waitFor("KL divergence")
		tm.keys("?")
		tm.waitFor("pause/resume", "mark reference", "esc or ? closes this help")
		tm.keys("Escape")
		tm.waitGone("esc or ? closes this help")
		tm.keys("Down", "Enter")
		tm.waitFor("completions are growing")
		tm.keys("Escape")
		tm.waitGone("completions are growing")

		tm.run("resize-window", "-t", "e2e", "-x", "70", "-y", "20")
		tm.waitFor("needs a terminal of at least 80×24", "this one is 70×20")
		tm.run("resize-window", "-t", "e2e", "-x", "100", "-y", "30")
		tm.waitFor("perplexity", "number token loss")

		tm.keys("q")
		s := tm.waitFor("EXIT=0")
		if !strings.Contains(s, "BEFORE") || strings.Contains(s, "KL divergence") {
			t.Errorf("the terminal was not restored after q:\n%s", s)
		}
	})

	t.Run("follow a live run", func(t *testing.T) {
		all := fixture.Events(fixture.Options{})
		cut := 0
		for i, e := range all {
			if e.Step == 31 {
				cut = i
				break
			}
		}
		live := filepath.Join(t.TempDir(), "live")
		if err := fixture.WriteRunDir(live, all[:cut]); err != nil {
			t.Fatal(err)
		}
		tm := newTmux(t, 120, 36, fmt.Sprintf("env -u NO_COLOR %s replay --follow --theme dark %s; echo EXIT=$?; sleep 60", bin, live))
		tm.waitFor("step 30/60", "● running") // a followed run of this tool is steered through its control file
		if err := fixture.Append(filepath.Join(live, "events.jsonl"), all[cut:]); err != nil {
			t.Fatal(err)
		}
		tm.waitFor("step 60/60", "✓ completed", "run completed: reached the last step")
		if s := tm.screen(true); !hasColour(s) {
			t.Errorf("no colour escapes without NO_COLOR")
		}
		tm.keys("C-c")
		tm.waitFor("EXIT=0")
	})
}

func TestReplayCommandLine(t *testing.T) {
	bin := build(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, fixture.Events(fixture.Options{})); err != nil {
		t.Fatal(err)
	}
	// Not a terminal: the plain summary.
	out, err := exec.Command(bin, "replay", dir).Output()
	if err != nil {
		t.Fatalf("replay to a pipe: %v", err)
	}
	for _, want := range []string{"status completed (reached the last step) · step 60/60", "anomalies (4), newest first:", "checkpoints (3):"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"replay", filepath.Join(dir, "missing")}, 1, "missing does not exist"},
		{[]string{"replay", filepath.Dir(dir)}, 1, "is not a run folder: it holds 1 rlhfstation run(s)"},
		{[]string{"replay"}, 2, "replay takes one run folder"},
		{[]string{"replay", dir, "--theme", "pink"}, 2, `--theme: "pink"`},
	} {
		cmd := exec.Command(bin, c.args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code || !strings.Contains(stderr.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.msg)
		}
	}
}
