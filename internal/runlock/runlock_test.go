package runlock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSecondWriterIsRefusedWithTheHoldersPID(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description: a second open in this process is
	// refused just as another process would be.
	_, err = Acquire(dir)
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: %v, want ErrHeld", err)
	}
	if want := "process " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
}

var childLock *Lock

// A process killed while holding the lock leaves the file with its pid; the kernel released
// the lock with the process, so the next writer takes it over.
func TestStaleLockOfAKilledProcessIsTakenOver(t *testing.T) {
	if os.Getenv("RUNLOCK_CHILD") != "" {
		l, err := Acquire(os.Getenv("RUNLOCK_CHILD"))
		if err != nil {
			os.Exit(3)
		}
		// Held in a package variable: a dropped Lock could be collected, and closing its
		// file would release the lock before the parent looks.
		childLock = l
		os.Stdout.WriteString("locked\n")
		select {} // until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStaleLockOfAKilledProcessIsTakenOver$")
	cmd.Env = append(os.Environ(), "RUNLOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked\n" {
		t.Fatalf("child did not lock: %q %v", buf, err)
	}
	if _, err := Acquire(dir); !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("while the child holds it: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	b, _ := os.ReadFile(filepath.Join(dir, File))
	if strings.TrimSpace(string(b)) != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("lock file holds %q, want the killed child's pid", b)
	}
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("stale lock not taken over: %v", err)
	}
	defer l.Release()
	b, _ = os.ReadFile(filepath.Join(dir, File))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q after take-over", b)
	}
}
