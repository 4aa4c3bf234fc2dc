package cpu_test

import (
	"testing"

	"rlhfstation/engine/backend/backendtest"
	"rlhfstation/engine/backend/cpu"
)

// TestConformance runs the conformance suite on the CPU backend: against itself the
// comparisons are trivial, so what it checks is the reference's own checks — its fast paths
// against the suite's float64 loops, its backwards against finite differences, the guards
// around every view.
func TestConformance(t *testing.T) { backendtest.Run(t, cpu.New(), backendtest.F32()) }
