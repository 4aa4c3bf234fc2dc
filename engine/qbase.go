package engine

import (
	"fmt"

	"rlhfstation/engine/config"

	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// quantizeBase replaces the base's linears by 4-bit weights as the run's [quant] table says.
func (e *Engine) quantizeBase() error {
	dense, packed, err := QuantizeLinears(e.model, e.cfg.Quant)
	if err != nil || dense == 0 {
		return err
	}
	e.paramInfo.ResidentBytes += packed - dense
	e.logf("quantized the base's linears to %s (blocksize %d, double quant %v): %s → %s",
		e.cfg.Quant.Type, e.cfg.Quant.BlockSize, e.cfg.Quant.DoubleQuant, bytesStr(dense), bytesStr(packed))
	return nil
}

// QuantizeLinears replaces every linear of the blocks (never the LM head or embeddings, as
// bitsandbytes does) by its 4-bit weight, so generation, scoring and training run on the
// quantized base that the adapters learn on top of. It returns the bytes of the dense weights
// replaced and of their 4-bit form; type "none" does nothing.
func QuantizeLinears(m *model.Model, q config.Quant) (dense, packed int64, err error) {
	if q.Type == "none" {
		return 0, 0, nil
	}
	t, err := quant.ParseType(q.Type)
	if err != nil {
		return 0, 0, fmt.Errorf("[quant] type: %w", err)
	}
	opt := quant.Options{Type: t, BlockSize: q.BlockSize, DoubleQuant: q.DoubleQuant}
	if err := opt.Check(); err != nil {
		return 0, 0, fmt.Errorf("[quant]: %w", err)
	}
	for _, l := range m.Linears() {
		d, ok := l.W.(*model.Dense)
		if !ok {
			continue // already quantized in the folder
		}
		w, err := quant.Quantize(d.W, d.Out, d.In, "float32", opt)
		if err != nil {
			return 0, 0, fmt.Errorf("quantizing %s: %w", l.Name, err)
		}
		l.W = newQWeight(w)
		dense += int64(len(d.W)) * 4
		packed += int64(float64(len(d.W)) * w.BitsPerParam() / 8)
	}
	// The float32 copies are no longer used by any product: give their memory back.
	m.ReleaseReplaced()
	return dense, packed, nil
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
