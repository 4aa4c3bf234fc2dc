package cuda

import (
	"fmt"
	"os"
	"testing"

	"rlhfstation/engine/backend/cuda/cudasim/standin"
)

// TestMain runs the device tests on the GPU when there is one, else on the CPU stand-in
// (engine/backend/cuda/cudasim), built into the user's cache folder once: CI has no GPU, and
// the tests must run there, not skip. RLHFSTATION_CUDA_LIBS set by the caller wins.
func TestMain(m *testing.M) {
	if os.Getenv(LibsEnv) == "" {
		if _, _, err := probe(osLibEnv); err != nil {
			dir, err := standin.Ensure()
			if err != nil {
				fmt.Fprintf(os.Stderr, "cuda tests: no GPU, and the CPU stand-in did not build: %v\n", err)
			} else {
				os.Setenv(LibsEnv, dir)
			}
		}
	}
	os.Exit(m.Run())
}
