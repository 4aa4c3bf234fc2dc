package cpu_test

import (
	"runtime"
	"testing"

	"rlhfstation/engine/backend/backendtest"
	"rlhfstation/engine/backend/cpu"
)

// TestConformance runs the conformance suite on the CPU backend. Against itself the
// comparisons are trivial; what it checks is the suite's checks of the reference: its fast
// paths against float64 loops, its backwards against finite differences, the guards around
// every view. GOMAXPROCS 4 sends the larger shapes through the parallel splits (of For and
// of the GEMM) even on a machine with fewer cores.
func TestConformance(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	backendtest.Run(t, cpu.New(), backendtest.F32())
}
