package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(p, 0o644, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("want the fill error, got %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("a failed write changed the file: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("a temporary file was left behind: %v", ents)
	}
	if err := WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Fatalf("got %q", b)
	}
}

func TestReplaceDir(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "ckpt")
	for _, content := range []string{"one", "two"} {
		tmp := filepath.Join(dir, ".ckpt.tmp")
		os.Mkdir(tmp, 0o755)
		os.WriteFile(filepath.Join(tmp, "x"), []byte(content), 0o644)
		if err := ReplaceDir(tmp, dst); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "x")); string(b) != content {
			t.Fatalf("got %q want %q", b, content)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("leftovers: %v", ents)
	}
}

// A rename that fails (the target is a folder) leaves the target as it was and no temporary
// file behind, and the error names the file.
func TestWriteCleansUpWhenRenameFails(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "taken")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(p, []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("want an error naming %s, got %v", p, err)
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		t.Fatalf("the folder in the way was changed: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("a temporary file was left behind: %v", ents)
	}
}

// Write buffers: many small writes arrive whole, with the permissions asked for.
func TestWriteBuffered(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	err := Write(p, 0o640, func(w io.Writer) error {
		for i := 0; i < 100000; i++ {
			if _, err := w.Write([]byte{byte(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if len(b) != 100000 || b[99999] != byte(99999%256) || st.Mode().Perm() != 0o640 {
		t.Fatalf("%d bytes, mode %v", len(b), st.Mode().Perm())
	}
}

// TempDir makes a readable folder beside the target (and the target's parent), which
// ReplaceDir moves into place.
func TestTempDir(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "runs", "ckpt")
	tmp, err := TempDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(tmp)
	if err != nil || st.Mode().Perm() != 0o755 || filepath.Dir(tmp) != filepath.Dir(dst) ||
		!strings.HasPrefix(filepath.Base(tmp), ".ckpt.tmp-") {
		t.Fatalf("TempDir %s: %v %v", tmp, st.Mode(), err)
	}
	if err := ReplaceDir(tmp, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary folder is still there: %v", err)
	}
}

func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{".config.toml.tmp-123", "config.toml", ".lock", "events.jsonl"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	os.Mkdir(filepath.Join(dir, ".tb.tmp-9"), 0o755)
	RemoveLeftovers(dir)
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != ".lock,config.toml,events.jsonl" {
		t.Errorf("left %s", got)
	}
}
