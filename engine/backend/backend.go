// Package backend is the device interface under the model: Buf (a typed view of a backend's
// memory) and Backend (memory and the model's ops, each forward beside its backward, in the
// style of llm.c). The CPU backend (engine/backend/cpu) is the reference every other backend
// is tested against (engine/backend/backendtest); Select is the only code that knows which
// devices exist.
package backend

import (
	"fmt"

	"rlhfstation/quant"
)

// Backend runs the model's ops on one device. The contract every implementation keeps:
//
//   - Arguments: outputs first, then inputs, then sizes; a Buf may be longer than an op
//     needs (ops read and write its first elements). An absent Buf (the zero Buf) is allowed
//     only where the op says "optional".
//   - Forward ops overwrite their outputs. Backward ops ACCUMULATE (+=) into the gradients
//     they are given (the caller zeroes them once per step, and ops sharing an input add
//     their contributions), except where an op says it overwrites. RoPE rotates in place.
//   - Element types: the CPU backend computes in float32 (F32 everywhere, I32 ids and
//     targets, positions and indices). Other backends may hold activations in bf16 with the
//     sums in float32; each op's comment says which operands are always float32.
//   - Ops may be queued: an op returns at once and its failure (a device fault) may be
//     reported by the next Sync or Download instead. Argument mistakes are reported by the
//     op itself. Sync, Download, Sample and GradNorm are host boundaries: they wait.
//   - A Backend is used from one goroutine at a time.
type Backend interface {
	// Name is the device name as Select takes it ("cpu", "cuda").
	Name() string
	// Precision is the element type the backend wants for each kind of the model's buffers.
	Precision() Precision
	// Close waits for the queued work and releases the device.
	Close() error

	// Memory.

	// Alloc returns n elements of dt (uninitialised on devices; zeroed on the CPU).
	Alloc(dt DType, n int) (Buf, error)
	// Free releases a buffer from Alloc or Place (the whole allocation, not a view of it).
	Free(x Buf) error
	// Place returns a buffer of dt holding host values (a slice Upload takes) for as long as
	// the caller keeps it: weights, a pass's token ids. A backend whose memory is the host's
	// (the CPU) returns a view of the slice itself when dt is its element type, or for
	// []uint16 as BF16 (no copy: later writes to the slice show through); others allocate
	// and upload.
	Place(host any, dt DType) (Buf, error)
	// Upload copies host values into x: []float32 into F32 (or, rounded, BF16), []uint16
	// into BF16 or F16 (bits), []byte into U8, []int32, []int64, []float64 into I32, I64, F64.
	// The lengths must match.
	Upload(x Buf, host any) error
	// Download copies x to the host after the queued work: into []float32 from F32 or BF16,
	// []uint16 from BF16 or F16, []byte, []int32, []int64, []float64 from their types.
	Download(host any, x Buf) error
	// Copy copies src into dst (same type and length).
	Copy(dst, src Buf) error
	// Zero clears x.
	Zero(x Buf)
	// Sync waits for the queued work and returns the first failure since the last Sync.
	Sync() error
	// Cast converts src into dst (same length) between F32 and BF16 (or copies, same type).
	Cast(dst, src Buf) error
	// NewCasts readies the casts dst[i] ← src[i] (Cast's pairs) to be run together by
	// CastAll, as often as needed, while the buffers live.
	NewCasts(dst, src []Buf) (*Casts, error)
	// CastAll runs every cast of c (queued; on a device, one launch for all of them).
	CastAll(c *Casts) error
	// FreeCasts releases what NewCasts made.
	FreeCasts(c *Casts)
	// Copy2D copies rows×cols values between row-major views with leading dimensions (the
	// split of a fused QKV projection).
	Copy2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error
	// Add2D accumulates src into dst between row-major views (the merge of QKV gradients).
	Add2D(dst Buf, ldd int, src Buf, lds int, rows, cols int) error
	// CopyRows copies row srcRows[i] of src (rows lds apart) to row dstRows[i] of dst (ldd
	// apart), cols values each, for i < n; a nil index slice is the identity: KV-cache
	// appends, selected rows, last rows.
	CopyRows(dst Buf, dstRows []int64, ldd int, src Buf, srcRows []int64, lds int, n, cols int) error

	// Embedding, norms, residual, activations, bias.

	// EmbeddingForward sets out[r] = wte[ids[r]] (+ wpe[pos[r]]) for rows = ids.Len(); pos
	// and wpe optional (learned positions).
	EmbeddingForward(out, ids, pos, wte, wpe Buf, dim int) error
	// EmbeddingBackward accumulates dwte[ids[r]] += dout[r] and dwpe[pos[r]] += dout[r]
	// (float32 tables, either optional).
	EmbeddingBackward(dwte, dwpe, dout, ids, pos Buf, dim int) error
	// RMSNormForward sets out = inp·rstd·(offset + weight) per row and rstd[rows] (float32);
	// offset is 0, or 1 for gemma's (1 + w) norms.
	RMSNormForward(out, rstd, inp, weight Buf, rows, dim int, eps float64, offset float32) error
	// RMSNormBackward accumulates dinp and dweight (optional: frozen).
	RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buf, rows, dim int, offset float32) error
	// LayerNormForward sets out = (inp−mean)·rstd·weight + bias per row, with mean and rstd
	// [rows] (float32).
	LayerNormForward(out, mean, rstd, inp, weight, bias Buf, rows, dim int, eps float64) error
	// LayerNormBackward accumulates dinp, dweight and dbias (both optional: frozen).
	LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buf, rows, dim int) error
	// ResidualForward sets out = a + b over n elements; out may alias a.
	ResidualForward(out, a, b Buf, n int) error
	// ResidualBackward accumulates da += dout and db += dout (either optional).
	ResidualBackward(da, db, dout Buf, n int) error
	// Add accumulates acc += alpha·x over n elements.
	Add(acc, x Buf, alpha float32, n int) error
	// GELUForward sets out = GELU(inp) (tanh approximation).
	GELUForward(out, inp Buf, n int) error
	// GELUBackward accumulates dinp += dout·GELU'(inp).
	GELUBackward(dinp, dout, inp Buf, n int) error
	// SwiGLUForward sets out = SiLU(gate)·up.
	SwiGLUForward(out, gate, up Buf, n int) error
	// SwiGLUBackward accumulates dgate and dup.
	SwiGLUBackward(dgate, dup, dout, gate, up Buf, n int) error
	// GeGLUForward sets out = GELU(gate)·up (tanh approximation; gemma's MLP).
	GeGLUForward(out, gate, up Buf, n int) error
	// GeGLUBackward accumulates dgate and dup.
	GeGLUBackward(dgate, dup, dout, gate, up Buf, n int) error
	// SoftcapForward sets out = cap·tanh(inp/cap) (float32; out may be inp): logit
	// soft-capping.
	SoftcapForward(out, inp Buf, n int, cap float32) error
	// SoftcapBackward accumulates dinp += dout·(1 − (out/cap)²), from the forward's output.
	SoftcapBackward(dinp, dout, out Buf, n int, cap float32) error
	// BiasForward adds bias[cols] (float32) to every row of out[rows,cols] (out +=).
	BiasForward(out, bias Buf, rows, cols int) error
	// BiasBackward accumulates dbias += Σ_rows dout.
	BiasBackward(dbias, dout Buf, rows, cols int) error
	// DropoutForward sets out = x·mask/(1−p) over n elements, the mask a function of (seed,
	// element index) only (DropoutKeep), so the backward recomputes it.
	DropoutForward(out, x Buf, n int, seed uint64, p float32) error
	// DropoutBackward accumulates dx += dout·mask/(1−p) with the forward's mask.
	DropoutBackward(dx, dout Buf, n int, seed uint64, p float32) error

	// Products.

	// GEMM sets C[m,n] = alpha·op(A)·op(B) + beta·C, row-major with leading dimensions
	// (op(A) is m×k; A is k×m when transA; likewise B). With beta = 0, C is only written.
	GEMM(transA, transB bool, m, n, k int, alpha float32, a Buf, lda int, b Buf, ldb int, beta float32, c Buf, ldc int) error
	// GEMMBatched is GEMM over batch items strideA, strideB, strideC elements apart.
	GEMMBatched(transA, transB bool, m, n, k int, alpha float32, a Buf, lda, strideA int, b Buf, ldb, strideB int,
		beta float32, c Buf, ldc, strideC, batch int) error
	// MatmulForward sets out[rows,outDim] = inp·weightᵀ + bias (weight [outDim,in] as
	// nn.Linear; bias optional).
	MatmulForward(out, inp, weight, bias Buf, rows, in, outDim int) error
	// MatmulBackward accumulates dinp += dout·weight, dweight += doutᵀ·inp and
	// dbias += Σ_rows dout (each optional).
	MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buf, rows, in, outDim int) error
	// UploadQ4 readies a 4-bit weight (NF4/FP4, double quantization or not) for the ops below.
	UploadQ4(w *quant.Weight) (*Q4, error)
	// FreeQ4 releases what UploadQ4 made.
	FreeQ4(w *Q4)
	// Q4Dequantize expands w into out[Rows,Cols].
	Q4Dequantize(out Buf, w *Q4) error
	// Q4MulT sets y[rows,w.Rows] = x[rows,w.Cols]·Wᵀ (the forward of a 4-bit linear).
	Q4MulT(y, x Buf, w *Q4, rows int) error
	// Q4MulAcc accumulates dx[rows,w.Cols] += dy[rows,w.Rows]·W (its input gradient).
	Q4MulAcc(dx, dy Buf, w *Q4, rows int) error
	// Q4Embedding is EmbeddingForward over a 4-bit table: out[r] = row ids[r] of W
	// (+ wpe[pos[r]]) for rows = ids.Len(), each row dequantized as it is read (a tied LM head
	// held 4-bit is the token embedding too; the digit tokens' head rows). pos and wpe
	// optional, as there.
	Q4Embedding(out, ids, pos Buf, w *Q4, wpe Buf) error

	// Rotary embeddings and attention.

	// NewRoPETable tabulates cos and sin of p·invFreq[i] for positions [0, maxPos).
	NewRoPETable(invFreq []float64, maxPos int) (*RoPETable, error)
	// RoPEForward rotates x[rows, heads·r.Width()] in place ("rotate-half" pairs (i, i+Half)
	// of each head's first 2·Half dimensions), row r at position pos[r], rows = pos.Len().
	RoPEForward(x, pos Buf, heads int, r *RoPETable) error
	// RoPEBackward rotates the gradient back, in place.
	RoPEBackward(dx, pos Buf, heads int, r *RoPETable) error
	// AttentionForward sets out[rows, Heads·HeadDim] = softmax(cap(Scale·q·Kᵀ), causal, window)·V
	// for every span. probs (optional; a.ProbSize(spans) values) keeps the probabilities
	// for the backward, span after span, head-major, zeros where masked.
	AttentionForward(out, probs, q Buf, spans []Span, a Attention) error
	// AttentionBackward accumulates dq and every span's DK and DV from dout, given the
	// forward's probabilities (optional: recomputed).
	AttentionBackward(dq, dout, probs, q Buf, spans []Span, a Attention) error
	// AttentionRows is the decode step's attention with every input on the device (so the
	// step can be captured): row r of q, at position pos[r] of sequence seq[r] (I32 both),
	// attends to that sequence's keys up to its position: key j of sequence s starts at
	// element s·seqStride + j·KVHeads·HeadDim of k (and of v).
	AttentionRows(out, q, k, v, seq, pos Buf, rows int, a Attention, seqStride int) error

	// The decode step's own ops: every index on the device, so that the step can be
	// captured (Capturer) and replayed token after token.

	// AppendKV writes row r of k and of v ([rows, width] each) into kc and vc at element
	// seq[r]·seqStride + pos[r]·width (seq, pos I32): the cache append of a decode step.
	AppendKV(kc, vc, k, v, seq, pos Buf, rows, width, seqStride int) error
	// Advance adds 1 to pos[r] (I32) for r < rows, up to limit−1 (a finished sequence,
	// padded, stays on its last slot): the next decode step's positions.
	Advance(pos Buf, rows, limit int) error
	// Q4Linear sets y[rows,w.Rows] = res + x·Wᵀ + bias + scale·xa·Bᵀ in one pass over the
	// 4-bit W: a linear with its bias, its LoRA term (xa [rows,r] = x·Aᵀ, ldxa apart, and B
	// [w.Rows,r], in the Act precision) and a residual (res may be y). res, bias, xa and B
	// are optional (xa and B together); y and res are Act or Stream, bias float32.
	Q4Linear(y, res, x Buf, w *Q4, bias, xa Buf, ldxa int, lb Buf, r int, scale float32, rows int) error
	// Q4Linears is Q4Linear (no residual) for linears sharing their input x [rows, In]: each
	// ls[i].Y = x·W_iᵀ + bias_i + scale_i·xa_i·B_iᵀ, xa_i its R_i columns at Off_i of xa
	// (the group's x·Aᵀ, ldxa apart): a block's q, k and v (or gate and up) in one op.
	Q4Linears(ls []Q4Out, x, xa Buf, ldxa int, rows int) error

	// LinearsBackward is the backward of linears sharing their input x [rows, In]: 4-bit
	// weights, each with a LoRA adapter or none, the LoRA terms s·(x·Aᵀ)·Bᵀ with xa = x·Aᵀ
	// kept from the forward (each adapter's R columns at Off of rows ldxa apart, in the Act
	// precision). It sets dx (or accumulates into it, with acc) to
	// Σ_i dy_i·W_i + Σ_i (s·dy_i·B_i)·A_i and accumulates each adapter's gradients,
	// GradB += s·dy_iᵀ·xa_i and GradA += (s·dy_i·B_i)ᵀ·x: a block's q, k and v (or gate and
	// up) in one op. A, B and their gradients are float32; dy_i Act or Stream.
	LinearsBackward(dx Buf, acc bool, x, xa Buf, ldxa int, ls []LinearGrad, rows int) error

	// The LM head, log-probabilities, sampling.

	// Logits sets out[rows,vocab] (float32) = hidden·headᵀ.
	Logits(out, hidden, head Buf, rows, dim, vocab int) error
	// LogProbForward sets logp[r] = log softmax(logits[r]·invTemp)[targets[r]] (0 where
	// the target is negative) and, entropy optional, the entropy of each row's distribution;
	// logits, logp, entropy float32, targets I32.
	LogProbForward(logp, entropy, logits, targets Buf, rows, vocab int, invTemp float32) error
	// LogProbBackward accumulates into dlogits the gradient of Σ_r dlogp[r]·logp[r] +
	// dentropy[r]·H[r] (LogProbForward's outputs): dlogp·invTemp·(onehot(target) − p) on the
	// rows with a target and, dentropy optional, −dentropy·invTemp·p⊙(log p + H) on every row,
	// p = softmax(logits·invTemp) and H its entropy.
	LogProbBackward(dlogits, dlogp, dentropy, logits, targets Buf, rows, vocab int, invTemp float32) error
	// HeadLogProbs is Logits, SoftcapForward (softcap > 0 only), then LogProbForward, with
	// the logits formed a chunk of rows at a time only.
	HeadLogProbs(logp, entropy, hidden, head, targets Buf, rows, dim, vocab int, invT, softcap float32) error
	// HeadLogProbsBackward accumulates dhidden += dlogits·head, dlogits the gradient of
	// Σ dlogp[r]·logp[r] + dentropy[r]·H[r] (HeadLogProbs' outputs; dentropy optional) as
	// LogProbBackward forms it (logits recomputed a chunk at a time; the head frozen).
	HeadLogProbsBackward(dhidden, hidden, head, dlogp, dentropy, targets Buf, rows, dim, vocab int, invT, softcap float32) error
	// Sample draws one token per row of float32 logits: temperature 0 is greedy (argmax,
	// lowest id on ties); otherwise softmax(logits/temperature), then top-k (0: all), then
	// top-p over the top-k renormalised (0 or ≥ 1: all), as Hugging Face's warpers. Row r
	// uses uniforms[r] (one draw of its sequence's own generator; unused when greedy). It
	// returns the tokens and their log-probabilities under softmax(logits/T) over the whole
	// vocabulary (T = 1 when greedy). A host boundary: it waits.
	Sample(logits Buf, uniforms []float64, rows, vocab int, temperature float32, topK int, topP float32) ([]int32, []float32, error)
	// SampleInto is Sample leaving tokens (I32) and logp (F32) in device memory, with the
	// uniforms (F64) already there, and transformers' min_p and repetition_penalty applied in
	// the draw (pen; its zero value applies neither).
	SampleInto(tokens, logp, logits, uniforms Buf, rows, vocab int, temperature float32, topK int, topP float32, pen Penalties) error
	// DigitProbs sets out[r,d] (float32, rows×10) to the probability of digit d under the
	// softmax over the digit tokens ids only (values[i] is token ids[i]'s digit; I32 both).
	DigitProbs(out, logits, ids, values Buf, rows, vocab int) error

	// The optimizer (float32 tensors).

	// AdamW applies one update to every parameter, step counting from 1 (optim.AdamW's
	// formula): p ← p·(1−lr·λ) − lr·m̂/(√v̂ + ε).
	AdamW(params []OptParam, lr, beta1, beta2, eps, weightDecay float64, step int) error
	// GradNorm returns the global L2 norm of the gradients (a host boundary). The partial
	// sums meet in a fixed order: the same gradients give the same norm.
	GradNorm(grads []Buf) (float64, error)
	// ScaleAll multiplies every tensor by s (gradient clipping); s = 0 clears them, NaN and
	// infinities included (every gradient zeroed in one call).
	ScaleAll(xs []Buf, s float32) error
}

// Penalties are transformers' two other sampling processors, in its order around Sample's:
// the repetition penalty on the raw logits of the tokens a row has seen (divided by it when
// positive, multiplied when negative), then temperature, top-k, top-p, then min_p (keep the
// tokens at least MinP times as likely as the most likely). The log-probability of the drawn
// token stays that of softmax(raw logits/T) over the whole vocabulary.
type Penalties struct {
	MinP       float32 // 0: off
	Repetition float32 // 0 or 1: off
	// Seen (I32, rows × SeenWords(vocab)) holds a bit per token of the vocabulary for each
	// row: the tokens it has seen (bit j&31 of word j>>5). Needed with Repetition; the drawn
	// token's bit is set, so a captured decode step keeps it current on the device.
	Seen Buf
}

// Penalised reports whether the repetition penalty applies.
func (p Penalties) Penalised() bool { return p.Repetition > 0 && p.Repetition != 1 }

// SeenWords is the I32 words of one row of Penalties.Seen.
func SeenWords(vocab int) int { return (vocab + 31) / 32 }

// Precision is what a backend computes in: the model allocates its activations and KV cache
// as Act, the residual stream and its gradient as Stream, frozen dense weights, embeddings
// and the LM head as Weight, and everything else (norm weights, biases, statistics, LoRA
// weights, gradients and moments, log-probabilities) as F32. CPU: F32 throughout; CUDA: bf16
// activations and weights around a float32 stream.
type Precision struct{ Act, Stream, Weight DType }

// Attention describes causal multi-head attention with grouped-query heads: query head h
// reads key/value head h/(Heads/KVHeads).
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32 // multiplies q·k, usually 1/√HeadDim
	Window                  int     // sliding window: a query at p sees keys at (p−Window, p]; 0 = all
	// Softcap, when positive, caps the scores s = Scale·q·k to Softcap·tanh(s/Softcap)
	// before the mask and softmax (gemma2's attention-logit soft-capping).
	Softcap float32
}

// ProbSize is the number of values AttentionForward stores for the backward: per span and
// head an N×(Pos+N) matrix of probabilities.
func (a Attention) ProbSize(spans []Span) int {
	n := 0
	for _, s := range spans {
		n += a.Heads * s.N * (s.Pos + s.N)
	}
	return n
}

// FirstKey is the first key position a query at position p sees.
func (a Attention) FirstKey(p int) int {
	if a.Window > 0 && p-a.Window+1 > 0 {
		return p - a.Window + 1
	}
	return 0
}

// Span is a run of rows of the packed query and output holding consecutive positions of one
// sequence, with that sequence's keys and values.
type Span struct {
	Row    int // first row in q and out
	N      int // number of rows
	Pos    int // position of the first row; row i is at Pos+i
	K, V   Buf // keys and values of positions [0, Pos+N): rows of KVHeads·HeadDim
	DK, DV Buf // their gradients (backward only), same layout
}

// OptParam is one trainable float32 tensor with its gradient and AdamW moments.
type OptParam struct{ Data, Grad, M, V Buf }

// RoPETable holds a backend's cos and sin tables [MaxPos, Half] (float32).
type RoPETable struct {
	Half, MaxPos int
	Cos, Sin     Buf
	// HeadDim is the width of a head in the rotated rows, 0 meaning 2·Half; the dimensions
	// [2·Half, HeadDim) of each head pass through unrotated (partial rotary, phi3). The
	// caller sets it after NewRoPETable.
	HeadDim int
}

// Width is the width of a head in the rotated rows.
func (r *RoPETable) Width() int {
	if r.HeadDim > 0 {
		return r.HeadDim
	}
	return 2 * r.Half
}

// Casts is a set of casts readied by a backend's NewCasts: the model's bf16 copies of its
// LoRA factors (hundreds of small tensors), refreshed after each optimizer update in one
// launch over a device table made once, not one launch per tensor.
type Casts struct {
	Dst, Src []Buf
	State    any // the backend's own form (a device table)
}

// CheckCasts reports the first pair NewCasts cannot take: lists of unequal lengths, pairs
// of unequal lengths, or types Cast does not convert between.
func CheckCasts(dst, src []Buf) error {
	if len(dst) != len(src) {
		return fmt.Errorf("casts of %d buffers into %d", len(src), len(dst))
	}
	for i := range dst {
		d, s := dst[i].DType(), src[i].DType()
		switch {
		case dst[i].Len() != src[i].Len():
			return fmt.Errorf("cast %d: %d values into %d", i, src[i].Len(), dst[i].Len())
		case d != s && !(d == BF16 && s == F32) && !(d == F32 && s == BF16):
			return fmt.Errorf("cast %d: %s to %s", i, s, d)
		}
	}
	return nil
}

// Q4 is a 4-bit weight [Rows, Cols] readied by a backend's UploadQ4.
type Q4 struct {
	Rows, Cols int
	W          *quant.Weight // the host weight it was made from
	State      any           // the backend's own form (device buffers)
}

// DropoutKeep reports whether element i survives dropout with probability p under seed: a
// counter-based hash (splitmix64's finaliser of seed + i·φ), its top 32 bits compared with
// p·2³². Every backend draws its masks so, and the same seed drops the same elements.
func DropoutKeep(seed uint64, i int, p float32) bool {
	z := seed + uint64(i)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return uint32((z^(z>>31))>>32) >= DropoutThreshold(p)
}

// DropoutThreshold is p·2³², the hash value below which an element is dropped.
func DropoutThreshold(p float32) uint32 { return uint32(min(float64(p)*(1<<32), (1<<32)-1)) }

// Q4Out is one linear of Q4Linears: its 4-bit weight, its output Y [rows, W.Rows] (Act or
// Stream), its bias (optional, float32) and its LoRA term (B [W.Rows, R] in the Act
// precision, its R columns at Off of xa, and the scale), or none (B absent).
type Q4Out struct {
	W          *Q4
	Y, Bias, B Buf
	R, Off     int
	Scale      float32
}

// Q4LinearsOps is Q4Linears as one Q4Linear a linear: a fallback (the CPU runs it where its
// few-row kernels do not take every weight).
func Q4LinearsOps(b Backend, ls []Q4Out, x, xa Buf, ldxa int, rows int) error {
	for _, l := range ls {
		var xl Buf
		if !l.B.Nil() {
			xl = xa.From(l.Off)
		}
		if err := b.Q4Linear(l.Y, Buf{}, x, l.W, l.Bias, xl, ldxa, l.B, l.R, l.Scale, rows); err != nil {
			return err
		}
	}
	return nil
}

// LinearGrad is one linear of LinearsBackward: its 4-bit weight, the gradient of its output
// dy [rows, W.Rows], and its adapter (A [R, W.Cols], B [W.Rows, R], their gradients, the
// scale and its columns Off of xa), or none (A absent).
type LinearGrad struct {
	W                  *Q4
	DY                 Buf
	A, B, GradA, GradB Buf
	R, Off             int
	Scale              float32
}

// LinearsBackwardOps is LinearsBackward composed of b's other ops, as lora.Layer's backward
// and the 4-bit input gradient compute it: the reference the CPU runs, and a fallback.
func LinearsBackwardOps(b Backend, dx Buf, acc bool, x, xa Buf, ldxa int, ls []LinearGrad, rows int) error {
	if len(ls) == 0 || rows == 0 {
		return nil
	}
	in := ls[0].W.Cols
	if !acc {
		b.Zero(dx.Slice(0, rows*in))
	}
	for _, l := range ls {
		if err := b.Q4MulAcc(dx, l.DY, l.W, rows); err != nil {
			return err
		}
		if l.A.Nil() {
			continue
		}
		out, r := l.W.Rows, l.R
		dxa, err := b.Alloc(F32, rows*r)
		if err != nil {
			return err
		}
		err = b.GEMM(true, false, out, r, rows, l.Scale, l.DY, out, xa.From(l.Off), ldxa, 1, l.GradB, r)
		if err == nil {
			err = b.GEMM(false, false, rows, r, out, l.Scale, l.DY, out, l.B, r, 0, dxa, r)
		}
		if err == nil {
			err = b.GEMM(true, false, r, in, rows, 1, dxa, r, x, in, 1, l.GradA, in)
		}
		if err == nil {
			err = b.GEMM(false, false, rows, in, r, 1, dxa, r, l.A, in, 1, dx, in)
		}
		b.Free(dxa)
		if err != nil {
			return err
		}
	}
	return nil
}

// HeadExpander is a backend that runs a 4-bit LM head from a dense copy in its Weight
// precision, made once, rather than through its 4-bit ops: a device whose 4-bit products
// expand the weight for most shapes anyway (CUDA: its fused few-row product writes bf16, the
// head's logits are float32), so that the head's ops, the tied embedding's lookup and a
// captured decode step are those of a dense head. The 4-bit form stays the host's.
type HeadExpander interface {
	ExpandsQ4Head() bool
}
