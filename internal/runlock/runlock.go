// Package runlock gives a run folder one writer: an advisory lock (flock) on RUN/.lock held
// for the life of the run. A second writer is refused with the holder's process id; a lock
// left by a killed process is released by the kernel with the process, so the next run takes
// it over without any clean-up.
package runlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// File is the lock file's name inside a run folder.
const File = ".lock"

// Lock is a held run-folder lock.
type Lock struct {
	f    *os.File
	path string
}

// ErrHeld is wrapped by Acquire's error when another process writes the folder.
var ErrHeld = errors.New("run folder in use")

// Acquire takes dir's lock without waiting. When another process holds it, the error names
// that process.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking run folder %s: %w", dir, err)
	}
	if err := lock(f); err != nil {
		f.Close()
		if !errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("locking run folder %s: %w", dir, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, fmt.Errorf("%w: %s is being written by %s; wait for it to end (or stop it) before resuming it", ErrHeld, dir, holder)
	}
	// Ours now: record who holds it (a stale id left by a killed run is overwritten).
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f, path: path}, nil
}

// Release gives the lock up. The file stays (removing it would race with a process that has
// just opened it); a nil Lock is a no-op.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	f.Truncate(0)
	unlock(f)
	return f.Close()
}
