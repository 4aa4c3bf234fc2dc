//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package safetensors

import (
	"errors"
	"os"
)

// mapFile is unavailable here: tensors are read on demand instead.
func mapFile(*os.File, int64) ([]byte, error) { return nil, errors.New("no mmap") }

func unmapFile([]byte) error { return nil }

func dropPages([]byte, int, int) {}
