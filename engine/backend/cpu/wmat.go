package cpu

import (
	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// wmat is a frozen matrix [out, in] as an op receives it: float32, or bf16 bits (the LM
// head and token embedding of a 4-bit base, model.Param.BF16), or (row only) a 4-bit
// weight (Q4Embedding).
type wmat struct {
	f []float32
	h []uint16
	q *quant.Weight
}

// weight returns the host float32 or bf16 slice of x, which must hold n values.
func (a *args) weight(name string, x backend.Buf, n int) wmat {
	if x.DType() == backend.BF16 {
		return wmat{h: hostSlice(a, name, x, n, backend.BF16, x.U16)}
	}
	return wmat{f: a.f32(name, x, n)}
}

func (w wmat) len() int {
	if w.q != nil {
		return w.q.Len()
	}
	return len(w.f) + len(w.h)
}

// row sets dst to row r of w (rows len(dst) wide).
func (w wmat) row(dst []float32, r int) {
	n := len(dst)
	if w.q != nil {
		w.q.DequantizeRange(dst, r*n)
		return
	}
	if w.h == nil {
		copy(dst, w.f[r*n:(r+1)*n])
		return
	}
	for j, v := range w.h[r*n : (r+1)*n] {
		dst[j] = FromBF16(v)
	}
}

// mulT sets y[rows, out] = x[rows, in]·wᵀ.
func (w wmat) mulT(y, x []float32, rows, in, out int) {
	if w.h != nil {
		BF16MulT(y, x, w.h, rows, in, out)
		return
	}
	MatmulForward(y, x, w.f, nil, rows, in, out)
}

// mulAcc adds dy[rows, out]·w to dx[rows, in].
func (w wmat) mulAcc(dx, dy []float32, rows, in, out int) {
	if w.h != nil {
		BF16MulAcc(dx, dy, w.h, rows, in, out)
		return
	}
	MatmulBackward(dx, nil, nil, dy, nil, w.f, rows, in, out)
}
