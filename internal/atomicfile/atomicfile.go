// Package atomicfile is the project's one way to write files and folders so that a crash
// leaves either the old one or the new one, never half of one: write a temporary file in the
// same folder, fsync it, rename it over the target, fsync the folder; on any error the
// temporary file is removed and the target is untouched. Folders are built beside their
// target (TempDir) and moved into place whole (ReplaceDir).
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// WriteFile writes data to path atomically.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, perm, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// Write creates path atomically with the content that fill writes. w is buffered: fill may
// make many small writes.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	return write(path, perm, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := fill(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

func write(path string, perm os.FileMode, fill func(f *os.File) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, renamed := f.Name(), false
	defer func() {
		if err != nil {
			f.Close()
			if !renamed {
				os.Remove(tmp)
			}
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	renamed = true
	return SyncDir(dir)
}

// SyncDir fsyncs a folder so that a rename inside it survives a crash. File systems that
// cannot sync a folder (they answer EINVAL or ENOTSUP) are not an error: there the rename is
// as durable as they make it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("syncing folder %s: %w", dir, err)
	}
	return nil
}

// TempDir makes an empty folder beside dst, creating dst's parent, in which to build dst's
// content before ReplaceDir moves it into place. It is readable like any folder (0755, not
// os.MkdirTemp's 0700). The caller removes it when giving up (os.RemoveAll, a no-op once it
// has been moved).
func TempDir(dst string) (string, error) {
	dst = filepath.Clean(dst)
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// ReplaceDir moves the finished folder tmp to dst, replacing any folder already there, so that
// dst is always either the old complete folder or the new complete one. tmp's files are
// fsynced by whoever wrote them (WriteFile and Write do); ReplaceDir syncs tmp itself and the
// parent.
func ReplaceDir(tmp, dst string) error {
	if err := SyncDir(tmp); err != nil {
		return err
	}
	parent := filepath.Dir(dst)
	old := ""
	if _, err := os.Stat(dst); err == nil {
		old = filepath.Join(parent, "."+filepath.Base(dst)+".old")
		os.RemoveAll(old)
		if err := os.Rename(dst, old); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		if old != "" {
			os.Rename(old, dst)
		}
		return err
	}
	if old != "" {
		os.RemoveAll(old)
	}
	return SyncDir(parent)
}

// RemoveLeftovers deletes what writes into dir killed half way left there (".NAME.tmp-…"
// files and folders). Only the folder's single writer may call it: another writer's temporary
// file would go too.
func RemoveLeftovers(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, ".tmp-") {
			os.RemoveAll(filepath.Join(dir, n))
		}
	}
}
