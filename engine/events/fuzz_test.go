package events

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// FuzzReader: any bytes read as an events file give complete events or errors naming the
// file and line; nothing panics, and reading stops at the end.
func FuzzReader(f *testing.F) {
	f.Add([]byte(`{"type":"run_start","time":"2026-01-01T00:00:00Z","step":0}` + "\n" +
		`{"type":"step","time":"2026-01-01T00:00:01Z","step":1,"metrics":{"loss":0.5,"reward":1}}` + "\n"))
	f.Add([]byte(`{"type":"samples","step":2,"samples":[{"prompt":"p","completion":"c","reward":0.5,"rewards":{"ppl":1}}]}` + "\n" + `{"type":"anomaly","rule":"kl"`))
	f.Add([]byte("\n\n{}\n{\"metrics\":{\"x\":\"y\"}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), "events.jsonl")
		for i := 0; i <= bytes.Count(data, []byte{'\n'}); i++ {
			_, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil && !strings.HasPrefix(err.Error(), "events.jsonl:") {
				t.Fatalf("error does not name the file and line: %v", err)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("more events than lines: %v", err)
		}
	})
}
