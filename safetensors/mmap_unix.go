//go:build linux || darwin || freebsd || netbsd || openbsd

package safetensors

import (
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f privately: pages are shared with the page cache
// until written, and a stray write never reaches the file or faults.
func mapFile(f *os.File, size int64) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
}

func unmapFile(b []byte) error { return syscall.Munmap(b) }

// dropPages tells the system the whole pages of b are not needed for now: they leave the
// process's resident set and stay in the page cache; a later read maps them back from the file.
func dropPages(mapping []byte, begin, end int) {
	page := os.Getpagesize()
	begin = (begin + page - 1) / page * page
	end = end / page * page
	if begin < end && end <= len(mapping) {
		_ = syscall.Madvise(mapping[begin:end], syscall.MADV_DONTNEED)
	}
}
