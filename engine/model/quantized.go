package model

import (
	"fmt"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// Quantized is a 4-bit weight (NF4 or FP4, bitsandbytes' layout, [out,in] for every family,
// GPT-2's included) as a linear's Weight: the products are the backend's 4-bit ops (on the
// CPU, the GEMM expands row segments straight into its packed panels: the float32 matrix is
// never materialised).
type Quantized struct {
	W  *quant.Weight
	on backend.Backend
	q  *backend.Q4
}

// handle is the weight readied for b (UploadQ4 on first use there).
func (q *Quantized) handle(b backend.Backend) (*backend.Q4, error) {
	if q.on == b && q.q != nil && q.q.W == q.W {
		return q.q, nil
	}
	if q.on != nil && q.q != nil {
		q.on.FreeQ4(q.q)
	}
	h, err := b.UploadQ4(q.W)
	if err != nil {
		return nil, err
	}
	q.on, q.q = b, h
	return h, nil
}

// MulT sets y[rows,out] = x[rows,in]·Wᵀ.
func (q *Quantized) MulT(b backend.Backend, y, x backend.Buf, rows int) error {
	h, err := q.handle(b)
	if err != nil {
		return err
	}
	return b.Q4MulT(y, x, h, rows)
}

// MulAcc adds dy[rows,out]·W to dx[rows,in].
func (q *Quantized) MulAcc(b backend.Backend, dx, dy backend.Buf, rows int) error {
	h, err := q.handle(b)
	if err != nil {
		return err
	}
	return b.Q4MulAcc(dx, dy, h, rows)
}

// Quantize replaces the dense weight of every linear of the blocks by its 4-bit form (never
// the LM head or the embeddings, as bitsandbytes does) and frees the float32 copies (see
// ReleaseReplaced). Linears already quantized, as loaded from a quantized folder, are kept,
// and so are the 16-bit linears of such a folder (Prequantized: its skipped modules).
// It returns the bytes of the dense weights replaced and of their 4-bit form (packed codes
// and scales, code books not counted). On error the model is unchanged.
func (m *Model) Quantize(opt quant.Options) (dense, packed int64, err error) {
	if err := opt.Check(); err != nil {
		return 0, 0, err
	}
	if m.Prequantized {
		return 0, 0, nil
	}
	type job struct {
		l *Linear
		w *quant.Weight
	}
	var jobs []job
	for _, l := range m.Linears() {
		d, ok := l.W.(*Dense)
		if !ok {
			continue
		}
		w, err := quant.Quantize(d.W, d.Out, d.In, "float32", opt)
		if err != nil {
			return 0, 0, fmt.Errorf("quantizing %s: %w", l.Name, err)
		}
		jobs = append(jobs, job{l, w})
		dense += 4 * int64(len(d.W))
		packed += weightBytes(w)
	}
	for _, j := range jobs {
		j.l.W = &Quantized{W: j.w}
	}
	m.ReleaseReplaced()
	m.holdBF16()
	return dense, packed, nil
}

// QuantStats sums the 4-bit linears: their parameters and the bytes their packed codes and
// scales hold (absmax, or its 8-bit codes, nested absmax and offset), code books not counted.
func (m *Model) QuantStats() (params, bytes int64) {
	for _, l := range m.Linears() {
		if q, ok := l.W.(*Quantized); ok {
			params += int64(q.W.Len())
			bytes += weightBytes(q.W)
		}
	}
	return params, bytes
}

// ResidentBytes is the memory the weights hold: 4 bytes per float32 parameter, 2 per bf16
// one (Param.BF16), plus the 4-bit linears (QuantStats' bytes), a 4-bit head (HeadQ) and
// their code books, each distinct table counted once (the 16
// values of each 4-bit type, the 256 of double quantization's code, which weights share).
// With NF4, blocks of 64 and double quantization a quantized parameter costs
// 4 + 8/64 + 32/(64·256) ≈ 4.127 bits.
func (m *Model) ResidentBytes() int64 {
	n := 4 * int64(len(m.data))
	for _, p := range m.Params {
		n += 2 * int64(len(p.BF16))
	}
	types := map[quant.Type]bool{}
	nested := map[*[256]float32]bool{}
	qs := []*Quantized{}
	for _, l := range m.Linears() {
		if q, ok := l.W.(*Quantized); ok {
			qs = append(qs, q)
		}
	}
	if m.HeadQ != nil {
		qs = append(qs, m.HeadQ)
	}
	for _, q := range qs {
		n += weightBytes(q.W)
		if !types[q.W.Type] {
			types[q.W.Type] = true
			n += 16 * 4
		}
		if q.W.NestedCode != nil && !nested[q.W.NestedCode] {
			nested[q.W.NestedCode] = true
			n += 256 * 4
		}
	}
	return n
}

// weightBytes is a 4-bit weight's own memory: codes and scales, no code book.
func weightBytes(w *quant.Weight) int64 {
	n := len(w.Packed) + 4*len(w.Absmax)
	if w.Nested() {
		n += len(w.QAbsmax) + 4*len(w.NestedAbsmax) + 4 // the offset
	}
	return int64(n)
}

// Dequantize returns a float32 copy of m whose linears hold the expansion of its 4-bit weights
// (and copies of its dense ones): the same function computed by plain float32 products.
// Adapters are not copied.
func (m *Model) Dequantize() (*Model, error) {
	d, err := build(&m.Config, nil)
	if err != nil {
		return nil, err
	}
	for _, p := range m.Params {
		dp, ok := d.Param(p.Name)
		if !ok {
			return nil, fmt.Errorf("dequantize: %s has no place in a float32 %s model", p.Name, m.Config.ModelType)
		}
		copy(dp.Data, p.Float32())
	}
	if m.HeadQ != nil { // d's head (its embedding too when tied)
		m.HeadQ.W.Dequantize(d.Head.Data)
	}
	dl := d.Linears()
	for i, l := range m.Linears() {
		switch w := l.W.(type) {
		case *Quantized:
			w.W.Dequantize(dl[i].weight.Data)
		case *Dense:
			copy(dl[i].weight.Data, w.W)
		default:
			return nil, fmt.Errorf("dequantize: %s has a weight of type %T", l.Name, l.W)
		}
	}
	return d, nil
}
