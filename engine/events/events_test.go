package events

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRoundTripKeepsNonFinite(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	in := Event{Type: Step, Time: time.Unix(100, 0).UTC(), Step: 3,
		Metrics: Metrics{"loss": 0.5, "kl": math.NaN(), "grad_norm": math.Inf(1), "x": math.Inf(-1)}}
	if err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if !strings.Contains(buf.String(), `"kl":"NaN"`) {
		t.Fatalf("NaN not written as a string: %s", buf.String())
	}
	r := NewReader(&buf, "mem")
	out, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if out.Step != 3 || out.Metrics["loss"] != 0.5 || !math.IsNaN(out.Metrics["kl"]) ||
		!math.IsInf(out.Metrics["grad_norm"], 1) || !math.IsInf(out.Metrics["x"], -1) {
		t.Fatalf("round trip changed the event: %+v", out)
	}
}

func TestReaderWaitsForPartialLine(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReader(pr, "live")
	go func() {
		pw.Write([]byte(`{"type":"log","step":1,"message":"a"}` + "\n" + `{"type":"log","st`))
		pw.Close()
	}()
	e, err := r.Next()
	if err != nil || e.Message != "a" {
		t.Fatalf("first event: %+v %v", e, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("partial line should read as EOF, got %v", err)
	}
}

func TestBadLineNamesFileAndLine(t *testing.T) {
	r := NewReader(strings.NewReader("{\"type\":\"log\"}\n{oops}\n"), "run/events.jsonl")
	r.Next()
	_, err := r.Next()
	if err == nil || !strings.Contains(err.Error(), "run/events.jsonl:2") {
		t.Fatalf("want an error naming file and line 2, got %v", err)
	}
}

func TestKeepThroughDropsLaterStepsAndATornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	in := `{"type":"run_start","step":0}` + "\n" +
		`{"type":"step","step":1}` + "\n" +
		`{"type":"checkpoint","step":1}` + "\n" +
		`{"type":"step","step":2}` + "\n" +
		`{"type":"samples","step":2}` + "\n" +
		`{"type":"step","st`
	os.WriteFile(path, []byte(in), 0o644)
	if err := KeepThrough(path, 1); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := `{"type":"run_start","step":0}` + "\n" + `{"type":"step","step":1}` + "\n" + `{"type":"checkpoint","step":1}` + "\n"
	if string(got) != want {
		t.Fatalf("kept\n%s\nwant\n%s", got, want)
	}
	info, _ := os.Stat(path)
	if err := KeepThrough(path, 1); err != nil { // nothing to drop: the file is left alone
		t.Fatal(err)
	}
	if info2, _ := os.Stat(path); !info2.ModTime().Equal(info.ModTime()) || info2.Size() != int64(len(want)) {
		t.Error("a file with nothing to drop was rewritten")
	}
	if err := KeepThrough(filepath.Join(t.TempDir(), "none.jsonl"), 3); err != nil {
		t.Errorf("a missing file: %v", err)
	}
}
