package runs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/events"
)

func writeOwn(t *testing.T, evs []events.Event) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "20250301-120000-math")
	os.MkdirAll(dir, 0o755)
	f, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w := events.NewWriter(f)
	for _, e := range evs {
		w.Write(e)
	}
	w.Flush()
	f.Close()
	return dir
}

func ownEvents(steps int, end bool) []events.Event {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	evs := []events.Event{{Type: events.RunStart, Time: t0, Run: "20250301-120000-math", TotalSteps: steps}}
	for s := 1; s <= steps; s++ {
		evs = append(evs, events.Event{Type: events.Step, Time: t0.Add(time.Duration(s) * time.Second), Step: s,
			Metrics: events.Metrics{"reward": float64(s) / 10}})
	}
	if end {
		evs = append(evs, events.Event{Type: events.RunEnd, Time: t0.Add(time.Hour), Step: steps, Status: "completed"})
	}
	return evs
}

func TestOwnRunDetectAndErrors(t *testing.T) {
	dir := writeOwn(t, ownEvents(3, true))
	r, err := Detect(dir)
	if err != nil || r.Kind != KindOwn || r.Name != "20250301-120000-math" {
		t.Fatalf("%v %+v", err, r)
	}
	evs := collect(t, r, Options{})
	if len(evs) != 5 || evs[4].Type != events.RunEnd {
		t.Errorf("%d events", len(evs))
	}
	// A line that does not parse is reported with its number before anything is shown.
	f, _ := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{oops}\n")
	f.Close()
	if _, err := Detect(dir); err == nil || !strings.Contains(err.Error(), "events.jsonl:6:") {
		t.Errorf("bad line: %v", err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, err := Detect(file); err == nil || !strings.Contains(err.Error(), "not a file this tool reads") {
		t.Errorf("a file: %v", err)
	}
}

// Following our own events.jsonl: later lines arrive, a half-written line waits for its end,
// run_end closes the stream; cancelling closes it too.
func TestOwnRunFollow(t *testing.T) {
	all := ownEvents(10, true)
	dir := writeOwn(t, all[:5])
	r, _ := Detect(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := r.Stream(ctx, Options{Follow: true, Poll: 5 * time.Millisecond})
	got := 0
	for got < 5 {
		<-ch
		got++
	}
	path := filepath.Join(dir, "events.jsonl")
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"type":"log","time":"2025-03-01T12:00:00Z","step":0,"level":"info","mess`)
	select {
	case e := <-ch:
		t.Fatalf("a partial line came out: %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
	f.WriteString(`age":"half"}` + "\n")
	w := events.NewWriter(f)
	for _, e := range all[5:] {
		w.Write(e)
	}
	w.Flush()
	f.Close()
	var rest []events.Event
	for e := range ch {
		rest = append(rest, e)
	}
	if len(rest) != len(all)-5+1 || rest[0].Message != "half" || rest[len(rest)-1].Type != events.RunEnd {
		t.Errorf("after growth: %d events", len(rest))
	}

	dir = writeOwn(t, ownEvents(2, false))
	r, _ = Detect(dir)
	ctx, cancel = context.WithCancel(context.Background())
	ch = r.Stream(ctx, Options{Follow: true, Poll: time.Millisecond})
	<-ch
	cancel()
	done := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-done:
			t.Fatal("stream still open after cancel")
		}
	}
}
