package engine

import (
	"fmt"
	"rlhfstation/internal/human"

	"rlhfstation/engine/config"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// quantizeBase replaces the base's linears by 4-bit weights as the run's [quant] table says,
// and records the bytes the base's weights then hold.
func (e *Engine) quantizeBase() error {
	dense, packed, err := QuantizeLinears(e.model, e.cfg.Quant)
	if err != nil {
		return err
	}
	e.paramInfo.ResidentBytes = e.model.ResidentBytes()
	if at := e.model.QuantizedAtLoad; at[0] > 0 {
		dense, packed = dense+at[0], packed+at[1]
	}
	what := "the base's linears"
	if e.model.HeadQ != nil {
		what += " and LM head" // a tied one: the embedding too
	}
	if dense > 0 {
		e.logf("quantized %s to %s (blocksize %d, double quant %v): %s → %s",
			what, e.cfg.Quant.Type, e.cfg.Quant.BlockSize, e.cfg.Quant.DoubleQuant, human.Bytes(dense), human.Bytes(packed))
	} else if n, b := e.model.QuantStats(); n > 0 {
		e.logf("the base's linears are 4-bit as stored in the model folder (%.2f bits per parameter); [quant] does not apply",
			8*float64(b)/float64(n))
	}
	return nil
}

// QuantizeLinears replaces every linear of the blocks (the LM head too with [quant] head; never
// the embeddings, as bitsandbytes does) by its 4-bit weight, so generation, scoring and training run on the
// quantized base that the adapters learn on top of, and frees the float32 copies. Linears
// already 4-bit in the model folder stay as they are. It returns the bytes of the dense
// weights replaced and of their 4-bit form; type "none" does nothing.
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
	if dense, packed, err = m.Quantize(opt); err != nil || !q.Head {
		return dense, packed, err
	}
	hd, hp, err := m.QuantizeHead(opt)
	if err != nil {
		return 0, 0, fmt.Errorf("[quant] head: %w", err)
	}
	return dense + hd, packed + hp, nil
}
