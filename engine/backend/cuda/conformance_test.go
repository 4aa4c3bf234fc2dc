package cuda

import (
	"testing"

	"rlhfstation/engine/backend/backendtest"
)

// TestConformance runs the conformance suite every backend passes (engine/backend/backendtest)
// on this backend with float32 operands: float32 tolerances where the ops compute in float32,
// bf16's where they round to bf16 inside (attention and the 4-bit products go through bf16
// copies; the tensor cores take bf16). Shorter shape lists: the stand-in is slow.
func TestConformance(t *testing.T) {
	bf := backendtest.BF16().F32
	tol := backendtest.Tolerances{F32: backendtest.F32().F32, Ops: map[string]backendtest.Tol{
		"AttentionForward": bf, "AttentionBackward": bf, "AttentionRows": bf, "Q4MulT": bf, "Q4MulAcc": bf,
	}}
	backendtest.Run(t, testBackend(t), tol, backendtest.Small())
}
