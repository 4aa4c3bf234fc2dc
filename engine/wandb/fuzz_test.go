package wandb

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
)

// FuzzReader: any bytes give records or errors, never a panic or an endless loop; damage is
// skipped and reading goes on.
func FuzzReader(f *testing.F) {
	dir := f.TempDir()
	w, err := Create(dir, Run{ID: "fuzz0001", Name: "fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	w.Log(1, w.start, map[string]float64{"reward": 0.5, "kl": 0.01})
	w.Finish(0, w.start)
	seed, _ := os.ReadFile(w.Path())
	f.Add(seed)
	f.Add(seed[:len(seed)-5])
	f.Add([]byte(":W&B\xe1\xbe\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := NewReader(bytes.NewReader(data), "fuzz")
		for i := 0; i < len(data)+10; i++ {
			_, err := rd.Next()
			var ce *CorruptError
			if err == nil || (errors.As(err, &ce) && ce.Skipped) {
				continue
			}
			if err == io.EOF || errors.Is(err, ErrIncomplete) || errors.Is(err, ErrNotWandb) || err != nil {
				return
			}
		}
		t.Fatal("the reader did not reach the end")
	})
}
