package cuda

import (
	"testing"

	"rlhfstation/engine/backend/backendtest"
)

// TestConformance runs the conformance suite every backend passes (engine/backend/backendtest)
// on this backend with float32 operands: float32 tolerances where the ops compute in float32,
// bf16's where they round to bf16 inside (attention and the 4-bit products go through bf16
// copies; the tensor cores take bf16); then the whole models (bf16 activations) and the ops
// again with the operand types of Precision (Mixed), within bf16's tolerances. Shorter shape
// lists: the stand-in is slow.
func TestConformance(t *testing.T) {
	bf := backendtest.BF16()
	tol := backendtest.Tolerances{F32: backendtest.F32().F32, Model: bf.Model, Ops: map[string]backendtest.Tol{
		"AttentionForward": bf.F32, "AttentionBackward": bf.F32, "AttentionRows": bf.F32, "Q4MulT": bf.F32, "Q4Linear": bf.F32, "Q4Linears": bf.F32, "Q4MulAcc": bf.F32, "LinearsBackward": bf.F32,
		"Q4Embedding": bf.F32, // rows of the bf16 expansion
	}}
	backendtest.Run(t, testBackend(t), tol, backendtest.Small(), backendtest.Mixed(bf.F32))
}
