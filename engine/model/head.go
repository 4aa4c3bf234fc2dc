package model

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
	"rlhfstation/quant"
)

// The LM head held 4-bit (Model.HeadQ: [quant] head, or a bitsandbytes folder whose
// lm_head.weight is stored 4-bit). Decoding reads the whole head for every token: Qwen2.5-0.5B's
// 151,936 × 896 head is 272 MB as bf16, 60% of a token's bytes, and 76 MB as NF4. The head's
// passes are the backend's 4-bit ops: logits are Q4MulT (the few-row kernels up to 64 rows,
// the 4-bit GEMM beyond), the log-probs form them a chunk of rows at a time (headRows) before
// LogProbForward, the backward adds dlogits·W with Q4MulAcc (the head is frozen, as every
// 4-bit weight), and a tied embedding reads its rows from the same 4-bit tensor
// (Q4Embedding): no dequantized copy of the head is kept. A backend that would rather hold the
// head dense (backend.HeadExpander: CUDA) gets its expansion, made once, and the dense paths.

// QuantizeHead holds the LM head as a 4-bit weight of opt's format and frees its dense form;
// a tied head stays tied: the embedding becomes the same 4-bit tensor (Embed and Head nil,
// HeadQ set). It returns the bytes of the dense head replaced and of its 4-bit form. A
// bitsandbytes folder (Prequantized) keeps its head as stored, as Quantize keeps its linears.
func (m *Model) QuantizeHead(opt quant.Options) (dense, packed int64, err error) {
	if err := opt.Check(); err != nil {
		return 0, 0, err
	}
	if m.HeadQ != nil || m.Prequantized || m.Head == nil {
		return 0, 0, nil
	}
	c, p := &m.Config, m.Head
	// a chunk of rows at a time: a bf16 head is never widened whole (Qwen2.5-0.5B's: 544 MB)
	w, err := quant.QuantizeRows(c.Vocab, c.Dim, "float32", opt, make([]float32, quant.StagingLen), func(dst []float32, r0 int) error {
		off := r0 * c.Dim
		if p.BF16 == nil {
			copy(dst, p.Data[off:])
			return nil
		}
		for i, h := range p.BF16[off : off+len(dst)] {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("quantizing %s: %w", p.Name, err)
	}
	dense = 4 * int64(len(p.Data))
	if p.BF16 != nil {
		dense = 2 * int64(len(p.BF16))
	}
	m.HeadQ, m.Head = &Quantized{W: w}, nil
	if m.Embed == p {
		m.Embed = nil
	}
	if p.dev.on != nil {
		p.dev.on.Free(p.dev.buf)
		p.dev = devCopy{}
	}
	m.compact(map[*Param]bool{p: true})
	return dense, weightBytes(w), nil
}

// HeadName is the Hugging Face name of the head's weight: lm_head.weight, or the embedding's
// when the head is tied to it.
func (m *Model) HeadName() string {
	if !m.Config.TieEmbed {
		return "lm_head.weight"
	}
	if m.Config.Family() == GPT2 {
		return "transformer.wte.weight"
	}
	return "model.embed_tokens.weight"
}

// q4Ops reports whether the head computes through the backend's 4-bit ops: it is 4-bit and
// the backend does not expand it.
func (m *Model) q4Ops() bool {
	if m.HeadQ == nil {
		return false
	}
	e, ok := m.Backend().(backend.HeadExpander)
	return !ok || !e.ExpandsQ4Head()
}

// headExp is a 4-bit head expanded on a backend.HeadExpander.
type headExp struct {
	on  backend.Backend
	w   *quant.Weight
	buf backend.Buf
}

// headBuf is the head as a dense buffer on the backend: Head placed there, or the 4-bit
// head's expansion in the Weight precision (made on first use; its 4-bit upload freed).
func (m *Model) headBuf() (backend.Buf, error) {
	if m.HeadQ == nil {
		return m.Buf(m.Head)
	}
	b, x := m.Backend(), &m.hexp
	if x.on == b && x.w == m.HeadQ.W {
		return x.buf, nil
	}
	if x.on != nil {
		x.on.Free(x.buf)
		*x = headExp{}
	}
	h, err := m.HeadQ.handle(b)
	if err != nil {
		return backend.Buf{}, err
	}
	buf, err := b.Alloc(b.Precision().Weight, h.Rows*h.Cols)
	if err != nil {
		return backend.Buf{}, fmt.Errorf("the LM head's expansion: %w", err)
	}
	if err := b.Q4Dequantize(buf, h); err != nil {
		b.Free(buf)
		return backend.Buf{}, err
	}
	b.FreeQ4(h)
	m.HeadQ.on, m.HeadQ.q = nil, nil
	*x = headExp{on: b, w: m.HeadQ.W, buf: buf}
	return buf, nil
}

// embed sets x to the token embedding of the pass's ids (and GPT-2's learned positions): from
// the embedding table, or from the 4-bit head it is tied to.
func (m *Model) embed(x backend.Buf, p *pass) error {
	wpe, err := m.bufOf(m.PosEmb)
	if err != nil {
		return err
	}
	var pos backend.Buf
	if !wpe.Nil() {
		pos = p.posBuf
	}
	if m.Embed == nil && m.q4Ops() {
		h, err := m.HeadQ.handle(m.b)
		if err != nil {
			return err
		}
		return m.b.Q4Embedding(x, p.idsBuf, pos, h, wpe)
	}
	wte, err := m.embedBuf()
	if err != nil {
		return err
	}
	return m.b.EmbeddingForward(x, p.idsBuf, pos, wte, wpe, m.Config.Dim)
}

// embedBuf is the embedding table on the backend: Embed, or the tied 4-bit head's expansion.
func (m *Model) embedBuf() (backend.Buf, error) {
	if m.Embed == nil {
		return m.headBuf()
	}
	return m.Buf(m.Embed)
}

// headRowsOf sets out [len(ids), Dim] (the Weight precision) to the head's rows ids: the
// digit tokens' rows NTL's query multiplies.
func (m *Model) headRowsOf(out backend.Buf, ids []int64) error {
	b, D := m.b, m.Config.Dim
	if !m.q4Ops() {
		head, err := m.headBuf()
		if err != nil {
			return err
		}
		return b.CopyRows(out, nil, D, head, ids, D, len(ids), D)
	}
	h, err := m.HeadQ.handle(b)
	if err != nil {
		return err
	}
	id := make([]int32, len(ids))
	for i, v := range ids {
		id[i] = int32(v)
	}
	ib, err := b.Place(id, backend.I32)
	if err != nil {
		return err
	}
	defer b.Free(ib)
	return b.Q4Embedding(out, ib, backend.Buf{}, h, backend.Buf{})
}

// headType is the element type the head's rows take on the backend.
func (m *Model) headType() backend.DType {
	if m.HeadQ != nil {
		return m.Backend().Precision().Weight
	}
	if m.Head.BF16 != nil {
		return backend.BF16
	}
	return m.paramType(m.Head)
}
