package engine

import (
	"fmt"

	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// quantizeBase replaces every linear of the blocks (never the LM head or embeddings, as
// bitsandbytes does) by its 4-bit weight, so generation, scoring and training run on the
// quantized base that the adapters learn on top of.
func (e *Engine) quantizeBase() error {
	if e.cfg.Quant.Type == "none" {
		return nil
	}
	t, err := quant.ParseType(e.cfg.Quant.Type)
	if err != nil {
		return fmt.Errorf("[quant] type: %w", err)
	}
	opt := quant.Options{Type: t, BlockSize: e.cfg.Quant.BlockSize, DoubleQuant: e.cfg.Quant.DoubleQuant}
	if err := opt.Check(); err != nil {
		return fmt.Errorf("[quant]: %w", err)
	}
	var dense, packed int64
	for _, l := range e.model.Linears() {
		d, ok := l.W.(*model.Dense)
		if !ok {
			continue // already quantized in the folder
		}
		w, err := quant.Quantize(d.W, d.Out, d.In, "float32", opt)
		if err != nil {
			return fmt.Errorf("quantizing %s: %w", l.Name, err)
		}
		l.W = newQWeight(w)
		dense += int64(len(d.W)) * 4
		packed += int64(float64(len(d.W)) * w.BitsPerParam() / 8)
	}
	e.paramInfo.ResidentBytes += packed - dense
	e.logf("quantized the base's linears to %s (blocksize %d, double quant %v): %s → %s",
		t, opt.BlockSize, opt.DoubleQuant, bytesStr(dense), bytesStr(packed))
	return nil
}

// qWeight is a 4-bit weight as a model.Weight. Both products run the GEMM with op(B) supplied
// by the quantized weight, which dequantizes row segments straight into the packed panels:
// the full-precision matrix is never materialised.
type qWeight struct{ w *quant.Weight }

func newQWeight(w *quant.Weight) *qWeight { return &qWeight{w: w} }

// MulT sets y[rows,out] = x[rows,in]·Wᵀ.
func (q *qWeight) MulT(y, x []float32, rows int) {
	gemm.SgemmSource(false, rows, q.w.Rows, q.w.Cols, 1, x, q.w.Cols, quant.Transposed{W: q.w}, 0, y, q.w.Rows)
}

// MulAcc adds dy[rows,out]·W to dx[rows,in].
func (q *qWeight) MulAcc(dx, dy []float32, rows int) {
	gemm.SgemmSource(false, rows, q.w.Cols, q.w.Rows, 1, dy, q.w.Rows, q.w, 1, dx, q.w.Cols)
}
