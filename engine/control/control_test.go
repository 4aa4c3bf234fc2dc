package control

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReaderSeesEveryRequest(t *testing.T) {
	dir := t.TempDir()
	if _, err := Send(dir, Stop, "old run", ""); err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir) // the old stop counts as handled
	if q, err := r.Poll(); err != nil || len(q) != 0 {
		t.Fatalf("a new reader acted on an old request: %v %v", q, err)
	}
	// Faster than the trainer reads: pause, save twice, stop with a reason.
	Send(dir, Pause, "watch", "")
	Send(dir, Save, "watch", "")
	Send(dir, Save, "watch", "")
	Send(dir, Stop, "stop_on", "stop_on nan: non_finite on loss at step 4")
	q, err := r.Poll()
	want := []Request{{Pause, "", "stop_on"}, {Save, "", "stop_on"}, {Stop, "stop_on nan: non_finite on loss at step 4", "stop_on"}}
	if err != nil || !reflect.DeepEqual(q, want) {
		t.Fatalf("Poll = %+v, %v; want %+v", q, err, want)
	}
	if q, _ := r.Poll(); len(q) != 0 {
		t.Fatalf("requests seen twice: %v", q)
	}
	Send(dir, Resume, "", "")
	Send(dir, Pause, "", "")
	if q, _ := r.Poll(); len(q) != 0 { // paused, still paused: nothing to do
		t.Fatalf("Poll = %v", q)
	}
	Send(dir, Resume, "", "")
	if q, _ := r.Poll(); len(q) != 1 || q[0].Action != Resume {
		t.Fatalf("Poll = %v", q)
	}
	if _, err := Send(dir, "restart", "", ""); err == nil || !strings.Contains(err.Error(), `"restart" is not a request`) {
		t.Errorf("a bad action: %v", err)
	}
	if _, err := Send(filepath.Join(dir, "missing"), Save, "", ""); err == nil {
		t.Error("a missing folder took a request")
	}
	os.WriteFile(Path(dir), []byte("{"), 0o644)
	if _, err := r.Poll(); err == nil || !strings.Contains(err.Error(), "control.json") {
		t.Errorf("a damaged file: %v", err)
	}
}
