package cpu

import "rlhfstation/engine/backend"

// sampling is the CPU backend for the decode step's fused 4-bit linears (backend.Sampler):
// their products take the int16 kernels at any row count up to q4DotMaxRows
// (Q4Dot.MulTSampled); everything else is the backend's own.
type sampling struct{ *Backend }

// Sampling is the backend for the decode step's 4-bit linears (backend.SamplingOf).
func (b *Backend) Sampling() backend.Backend { return sampling{b} }

func (s sampling) Q4Linear(y, res, x backend.Buf, w *backend.Q4, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) error {
	return s.q4Linear(true, y, res, x, w, bias, xa, ldxa, lb, r, scale, rows)
}

func (s sampling) Q4Linears(ls []backend.Q4Out, x, xa backend.Buf, ldxa int, rows int) error {
	return s.q4LinearsOf(s, true, ls, x, xa, ldxa, rows)
}
