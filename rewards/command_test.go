package rewards

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test binary doubles as the reward command: with RLHFSTATION_FAKE_REWARD set it runs
// fakeReward instead of the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("RLHFSTATION_FAKE_REWARD"); mode != "" {
		os.Exit(fakeReward(mode))
	}
	os.Exit(m.Run())
}

// fakeReward answers requests on stdin. Modes: "echo" scores len(completion) + the "bonus"
// column, null for the completion "skip", with metrics about the request; "crash-first" and
// "crash-always" exit 3 after a traceback-like line on stderr on the first request of the test
// (counted in the file RLHFSTATION_FAKE_COUNTER) or on every request; "hang" never replies;
// "garbage", "nan" and "short" reply wrongly; "ignore-eof" keeps running after stdin closes.
func fakeReward(mode string) int {
	fmt.Fprintln(os.Stderr, "fake reward starting in mode", mode)
	if mode == "ignore-eof" {
		time.Sleep(time.Minute)
		return 0
	}
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0
		}
		var req map[string]any
		if err := json.Unmarshal(line, &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			return 4
		}
		count := 0
		if f := os.Getenv("RLHFSTATION_FAKE_COUNTER"); f != "" {
			b, _ := os.ReadFile(f)
			count, _ = strconv.Atoi(string(b))
			os.WriteFile(f, []byte(strconv.Itoa(count+1)), 0o644)
		}
		if mode == "crash-always" || (mode == "crash-first" && count == 0) {
			fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
			fmt.Fprintln(os.Stderr, "ZeroDivisionError: division by zero")
			return 3
		}
		completions := req["completions"].([]any)
		switch mode {
		case "hang":
			time.Sleep(time.Minute)
		case "garbage":
			fmt.Println("scores: 1 2 3")
			continue
		case "nan":
			fmt.Println(`{"rewards": [NaN]}`)
			continue
		case "short":
			fmt.Println(`{"rewards": []}`)
			continue
		}
		bonus, _ := req["bonus"].([]any)
		rewards := make([]any, len(completions))
		for i, c := range completions {
			if c == "skip" {
				continue
			}
			r := float64(len(c.(string)))
			if i < len(bonus) && bonus[i] != nil {
				r += bonus[i].(float64)
			}
			rewards[i] = r
		}
		ids := req["completion_ids"].([]any)
		answers := req["answers"].([]any)
		out, _ := json.Marshal(map[string]any{"rewards": rewards, "metrics": map[string]any{
			"step": req["step"], "ids0": len(ids[0].([]any)), "answer0": len(answers[0].(string)),
			"mean": 1e9, // must not replace rewards/<name>/mean
		}})
		fmt.Println(string(out))
	}
}

// fakeCommand is a Command running the test binary in mode.
func fakeCommand(t *testing.T, name, mode string, timeout time.Duration) *Command {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RLHFSTATION_FAKE_REWARD", mode)
	c, err := NewCommand(name, []string{exe}, timeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCommandReward(t *testing.T) {
	c := fakeCommand(t, "len", "echo", 0)
	samples := []Sample{
		{Prompt: "p", Completion: "four", Answer: "12", IDs: []int{5}, CompletionIDs: []int{5, 0}, Step: 7, Columns: map[string]any{"bonus": 0.5}},
		{Prompt: "p", Completion: "skip", Step: 7},
		{Prompt: "q", Completion: "sixsix", Step: 7, Columns: map[string]any{"bonus": json.Number("2"), "level": "hard"}},
	}
	for round := 0; round < 2; round++ { // the process is long-lived: the second batch reuses it
		res, err := Compose([]Weighted{{Func: c, Weight: 2}}, samples)
		if err != nil {
			t.Fatal(err)
		}
		want := []float64{4.5, math.NaN(), 8}
		for i, w := range want {
			got := res.ByFunc["len"][i]
			if math.IsNaN(w) != math.IsNaN(got) || (!math.IsNaN(w) && got != w) {
				t.Errorf("reward %d = %v, want %v", i, got, w)
			}
		}
		if res.Total[0] != 9 || res.Total[1] != 0 || res.Total[2] != 16 {
			t.Errorf("totals %v, want [9 0 16] (null adds nothing)", res.Total)
		}
		m := res.Metrics
		if m["rewards/len/step"] != 7 || m["rewards/len/ids0"] != 2 || m["rewards/len/answer0"] != 2 || m["rewards/len/mean"] != 6.25 {
			t.Errorf("metrics %v", m)
		}
	}
}

func TestCommandRestartsOnceAfterACrash(t *testing.T) {
	t.Setenv("RLHFSTATION_FAKE_COUNTER", filepath.Join(t.TempDir(), "count"))
	c := fakeCommand(t, "len", "crash-first", 0)
	var fails []CommandFailure
	c.OnFailure = func(f CommandFailure) { fails = append(fails, f) }
	values, _, err := c.Score([]Sample{{Completion: "abc", Step: 3}})
	if err != nil || len(values) != 1 || values[0] != 3 {
		t.Fatalf("values %v, err %v", values, err)
	}
	if len(fails) != 1 || !fails[0].Retry || fails[0].Kind != FailCrash || fails[0].Step != 3 ||
		fails[0].Detail != "exited with status 3" || !strings.Contains(strings.Join(fails[0].Stderr, "\n"), "ZeroDivisionError") {
		t.Fatalf("failures %+v", fails)
	}
	msg := fails[0].Message()
	if !strings.Contains(msg, "restarting") || !strings.Contains(msg, "  ZeroDivisionError: division by zero") {
		t.Errorf("message %q", msg)
	}
}

func TestCommandSecondFailureIsAnError(t *testing.T) {
	c := fakeCommand(t, "len", "crash-always", 0)
	var fails []CommandFailure
	c.OnFailure = func(f CommandFailure) { fails = append(fails, f) }
	_, err := Compose([]Weighted{{Func: c, Weight: 1}}, []Sample{{Completion: "abc"}})
	var ce *CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want a *CommandError", err, err)
	}
	if len(fails) != 2 || !fails[0].Retry || fails[1].Retry || ce.Second.Kind != FailCrash {
		t.Errorf("failures %+v", fails)
	}
	if !strings.Contains(err.Error(), "failed twice in a row") || len(ce.Second.Stderr) == 0 {
		t.Errorf("error %q, stderr %q", err, ce.Second.Stderr)
	}
	// The next batch starts a fresh process again (the engine decides to stop, not the command).
	if _, _, err := c.Score([]Sample{{Completion: "abc"}}); !errors.As(err, &ce) {
		t.Errorf("third batch: %v", err)
	}
}

func TestCommandTimeoutAndMalformedReplies(t *testing.T) {
	cases := []struct {
		mode, kind, detail string
	}{
		{"hang", FailTimeout, "no reply within 200ms"},
		{"garbage", FailMalformed, `not the expected JSON object`},
		{"nan", FailMalformed, "send null"},
		{"short", FailMalformed, "0 rewards for 1 completions"},
	}
	for _, tc := range cases {
		c := fakeCommand(t, "f", tc.mode, 200*time.Millisecond)
		var mu sync.Mutex
		var fails []CommandFailure
		c.OnFailure = func(f CommandFailure) { mu.Lock(); fails = append(fails, f); mu.Unlock() }
		start := time.Now()
		_, _, err := c.Score([]Sample{{Completion: "abc"}})
		var ce *CommandError
		if !errors.As(err, &ce) || ce.First.Kind != tc.kind || ce.Second.Kind != tc.kind || !strings.Contains(ce.Second.Detail, tc.detail) {
			t.Errorf("%s: error %v", tc.mode, err)
			continue
		}
		if len(fails) != 2 || !strings.Contains(strings.Join(fails[0].Stderr, "\n"), "fake reward starting") {
			t.Errorf("%s: failures %+v", tc.mode, fails)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: took %s", tc.mode, d)
		}
	}
}

func TestCommandSetUpErrors(t *testing.T) {
	if _, err := NewCommand("ppl", []string{"x"}, 0); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Errorf("built-in name: %v", err)
	}
	if _, err := NewCommand("a b", []string{"x"}, 0); err == nil {
		t.Error("name with a space: no error")
	}
	if _, err := NewCommand("a", nil, 0); err == nil {
		t.Error("empty command: no error")
	}
	c, _ := NewCommand("a", []string{filepath.Join(t.TempDir(), "no-such-program")}, 0)
	if err := c.Start(); err == nil || !strings.Contains(err.Error(), "no-such-program") {
		t.Errorf("missing program: %v", err)
	}
	e := fakeCommand(t, "len", "echo", 0)
	if _, _, err := e.Score([]Sample{{Completion: "a", Columns: map[string]any{"prompts": 1}}}); err == nil || !strings.Contains(err.Error(), `column "prompts"`) {
		t.Errorf("reserved column: %v", err)
	}
}

func TestCommandCloseKillsAStuckProcess(t *testing.T) {
	defer func(g time.Duration) { closeGrace = g }(closeGrace)
	closeGrace = 300 * time.Millisecond
	c := fakeCommand(t, "len", "ignore-eof", 0)
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	start := time.Now()
	c.Close()
	select {
	case <-p.exited:
	default:
		t.Fatal("the process is still running after Close")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %s", d)
	}
}

// A cancelled context ends a batch in progress at once, as no failure of the command.
func TestCommandCancelled(t *testing.T) {
	c := fakeCommand(t, "len", "hang", time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	c.SetContext(ctx)
	failed := false
	c.OnFailure = func(CommandFailure) { failed = true }
	go func() { time.Sleep(200 * time.Millisecond); cancel() }()
	start := time.Now()
	_, _, err := c.Score([]Sample{{Completion: "abc"}})
	if !errors.Is(err, context.Canceled) || failed {
		t.Errorf("error %v, reported as a failure %v", err, failed)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}
