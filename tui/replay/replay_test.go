package replay

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
	"rlhfstation/tui/fixture"
)

func writeRun(t *testing.T, evs []events.Event) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := fixture.WriteRunDir(dir, evs); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckErrors(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	empty := filepath.Join(tmp, "empty")
	os.Mkdir(empty, 0o755)
	bad := filepath.Join(tmp, "bad")
	os.Mkdir(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "events.jsonl"), []byte(`{"type":"run_start","time":"2025-01-01T00:00:00Z","step":0}`+"\n{not json\n"), 0o644)
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(tmp, "missing"), "missing does not exist"},
		{file, "is not a run folder"},
		{empty, "has no events.jsonl"},
		{bad, "events.jsonl:2:"},
	} {
		err := Check(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%s) = %v, want it to say %q", c.dir, err, c.want)
		}
	}
	if err := Check(writeRun(t, fixture.Events(fixture.Options{Steps: 3}))); err != nil {
		t.Errorf("a good run: %v", err)
	}
}

func collect(ch <-chan events.Event, timeout time.Duration) ([]events.Event, bool) {
	var out []events.Event
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return out, true
			}
			out = append(out, e)
		case <-deadline:
			return out, false
		}
	}
}

func TestStreamWhole(t *testing.T) {
	evs := fixture.Events(fixture.Options{Steps: 10})
	dir := writeRun(t, evs)
	got, closed := collect(Stream(context.Background(), EventsFile(dir), false, time.Millisecond), 5*time.Second)
	if !closed || len(got) != len(evs) || got[len(got)-1].Type != events.RunEnd {
		t.Errorf("got %d events (closed %v), want %d ending in run_end", len(got), closed, len(evs))
	}
}

func TestStreamFollows(t *testing.T) {
	all := fixture.Events(fixture.Options{Steps: 10})
	split := 5
	dir := writeRun(t, all[:split])
	ch := Stream(context.Background(), EventsFile(dir), true, 5*time.Millisecond)
	first, closed := collect(ch, 200*time.Millisecond)
	if closed || len(first) != split {
		t.Fatalf("before growth: %d events, closed %v", len(first), closed)
	}
	// A half-written line is not an event yet.
	f, _ := os.OpenFile(EventsFile(dir), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"type":"log","time":"2025-03-01T12:00:00Z","step":0,"level":"info","mess`)
	f.Close()
	if more, _ := collect(ch, 100*time.Millisecond); len(more) != 0 {
		t.Fatalf("a partial line came out as %d events", len(more))
	}
	f, _ = os.OpenFile(EventsFile(dir), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`age":"half"}` + "\n")
	f.Close()
	if err := fixture.Append(EventsFile(dir), all[split:]); err != nil {
		t.Fatal(err)
	}
	rest, closed := collect(ch, 5*time.Second)
	if !closed || len(rest) != len(all)-split+1 || rest[0].Message != "half" || rest[len(rest)-1].Type != events.RunEnd {
		t.Errorf("after growth: %d events (closed %v), want %d ending in run_end", len(rest), closed, len(all)-split+1)
	}
}

func TestStreamBadLine(t *testing.T) {
	dir := writeRun(t, fixture.Events(fixture.Options{Steps: 2, Live: true}))
	f, _ := os.OpenFile(EventsFile(dir), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{oops}\n")
	f.Close()
	got, closed := collect(Stream(context.Background(), EventsFile(dir), true, time.Millisecond), 5*time.Second)
	last := got[len(got)-1]
	if !closed || last.Type != events.Log || last.Level != "error" || !strings.Contains(last.Message, "events.jsonl:") {
		t.Errorf("bad line: closed %v, last %+v", closed, last)
	}
}

func TestStreamCancel(t *testing.T) {
	dir := writeRun(t, fixture.Events(fixture.Options{Steps: 2, Live: true}))
	ctx, cancel := context.WithCancel(context.Background())
	ch := Stream(ctx, EventsFile(dir), true, time.Millisecond)
	collect(ch, 50*time.Millisecond)
	cancel()
	if _, closed := collect(ch, 5*time.Second); !closed {
		t.Error("stream still open after cancel")
	}
}

func TestCheckpointsAndSummary(t *testing.T) {
	dir := writeRun(t, fixture.Events(fixture.Options{}))
	os.MkdirAll(filepath.Join(dir, "checkpoints", "step-000075"), 0o755) // saved, event not yet written
	os.MkdirAll(filepath.Join(dir, "checkpoints", "notes"), 0o755)
	cps, err := Checkpoints(dir)
	if err != nil || len(cps) != 4 || cps[3].Step != 75 {
		t.Fatalf("checkpoints %+v, %v", cps, err)
	}
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Summary(&b, r, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{
		"run 20250301-120000-math · preset math · model models/qwen2-0.5b",
		"status completed (reached the last step) · step 60/60 · elapsed 2m33s",
		"kl ", "ppl/word", "mem/gpu_bytes                20.0 GiB",
		"word 39.60 (baseline 42.00, -5.7%)", "digit accuracy 77.3%",
		"anomalies (4), newest first:\n  critical step 50",
		"checkpoints (4):", "step 75     health —", "latest sample (step 60, 1 of 4)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "\x1b") {
		t.Error("summary has escape sequences")
	}
}

func TestLoadMissingRun(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("no error for a missing run")
	}
}
