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

// qTileRows is how many weight rows are dequantized at a time: a tile of rows×in floats
// stays in cache while the GEMM uses it, and the full matrix is never materialised.
const qTileRows = 64

// qWeight is a 4-bit weight as a model.Weight: each product dequantizes W tile by tile.
type qWeight struct {
	w    *quant.Weight
	tile []float32
}

func newQWeight(w *quant.Weight) *qWeight {
	return &qWeight{w: w, tile: make([]float32, qTileRows*w.Cols)}
}

// MulT sets y[rows,out] = x[rows,in]·Wᵀ, one band of output columns per tile.
func (q *qWeight) MulT(y, x []float32, rows int) {
	out, in := q.w.Rows, q.w.Cols
	for r0 := 0; r0 < out; r0 += qTileRows {
		r1 := min(r0+qTileRows, out)
		t := q.tile[:(r1-r0)*in]
		q.w.DequantizeRows(t, r0, r1)
		gemm.Sgemm(false, true, rows, r1-r0, in, 1, x, in, t, in, 0, y[r0:], out)
	}
}

// MulAcc adds dy[rows,out]·W to dx[rows,in].
func (q *qWeight) MulAcc(dx, dy []float32, rows int) {
	out, in := q.w.Rows, q.w.Cols
	for r0 := 0; r0 < out; r0 += qTileRows {
		r1 := min(r0+qTileRows, out)
		t := q.tile[:(r1-r0)*in]
		q.w.DequantizeRows(t, r0, r1)
		gemm.Sgemm(false, false, rows, in, r1-r0, 1, dy[r0:], out, t, in, 1, dx, in)
	}
}
