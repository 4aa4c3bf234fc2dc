package cpu

import (
	"math"

	"rlhfstation/engine/backend"
)

// Attention describes causal multi-head attention with grouped-query heads (backend's).
type Attention = backend.Attention

// Span is a run of rows of the packed query and output arrays holding consecutive
// positions of one sequence, with that sequence's keys and values.
type Span struct {
	Row    int       // first row in q and out
	N      int       // number of rows
	Pos    int       // position of the first row; row i is at Pos+i
	K, V   []float32 // keys and values of positions [0, Pos+N): rows of KVHeads·HeadDim
	DK, DV []float32 // their gradients (backward only), same layout
}

// blockRows is the span length from which the forward goes through GEMM (whole blocks of
// scores per head) instead of one dot product per key.
const blockRows = 8

// ProbSize is the number of floats AttentionForward stores for the backward: per span and
// head an N×(Pos+N) matrix of probabilities.
func ProbSize(a Attention, spans []Span) int {
	n := 0
	for _, s := range spans {
		n += a.Heads * s.N * (s.Pos + s.N)
	}
	return n
}

// AttentionForward sets out[rows, Heads·HeadDim] = softmax(Scale·q·Kᵀ, causal) · V for every
// span. When probs is not nil (training), it receives the probabilities, span after span,
// head-major, each head an N×(Pos+N) matrix with zeros where masked. Softmax runs in
// float32 after subtracting the row maximum, with float64 sums.
func AttentionForward(out, probs, q []float32, spans []Span, a Attention) {
	var small []Span
	off := 0
	var scratch []float32
	for _, s := range spans {
		if s.N == 0 {
			continue
		}
		L := s.Pos + s.N
		if probs == nil && s.N < blockRows {
			small = append(small, s)
			continue
		}
		for h := 0; h < a.Heads; h++ {
			var sc []float32
			if probs != nil {
				sc = probs[off : off+s.N*L]
				off += s.N * L
			} else {
				if cap(scratch) < s.N*L {
					scratch = make([]float32, s.N*L)
				}
				sc = scratch[:s.N*L]
			}
			attentionBlock(out, sc, q, s, h, a)
		}
	}
	if len(small) > 0 {
		attentionRowsGEMM(out, q, small, a)
	}
}

// attentionBlock computes head h of a span with two GEMMs around a masked softmax.
func attentionBlock(out, sc, q []float32, s Span, h int, a Attention) {
	hd, qw, kw := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	kvh := h / (a.Heads / a.KVHeads)
	attentionProbs(sc, q, s, h, a)
	sgemm(false, false, s.N, hd, s.Pos+s.N, 1, sc, s.Pos+s.N, s.V[kvh*hd:], kw, 0, out[s.Row*qw+h*hd:], qw)
}

// attentionProbs sets sc [N, Pos+N] to head h's attention probabilities over the span:
// softmax(cap(Scale·q·Kᵀ)) with the causal (and window) mask, zeros where masked.
func attentionProbs(sc, q []float32, s Span, h int, a Attention) {
	hd, qw, kw := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	kvh := h / (a.Heads / a.KVHeads)
	L := s.Pos + s.N
	sgemm(false, true, s.N, L, hd, a.Scale, q[s.Row*qw+h*hd:], qw, s.K[kvh*hd:], kw, 0, sc, L)
	For(s.N, grainFor(L), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p := s.Pos + i
			k0 := a.FirstKey(p)
			row := sc[i*L : (i+1)*L]
			clear(row[:k0])
			if a.Softcap > 0 {
				capInPlace(row[k0:p+1], a.Softcap)
			}
			softmaxInPlace(row[k0 : p+1])
			clear(row[p+1:])
		}
	})
}

// attentionRowsRef handles short spans (decode steps) one (row, head) at a time with plain
// loops: the readable reference of attentionRowsGEMM.
func attentionRowsRef(out, q []float32, spans []Span, a Attention) {
	type item struct{ s, i int }
	var items []item
	maxL := 0
	for si, s := range spans {
		for i := 0; i < s.N; i++ {
			items = append(items, item{si, i})
		}
		maxL = max(maxL, s.Pos+s.N)
	}
	hd, qw, kw := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	group := a.Heads / a.KVHeads
	For(len(items)*a.Heads, max(1, (1<<15)/max(1, maxL*hd)), func(lo, hi int) {
		scores := make([]float32, maxL)
		for w := lo; w < hi; w++ {
			it, h := items[w/a.Heads], w%a.Heads
			s := spans[it.s]
			row, p := s.Row+it.i, s.Pos+it.i
			k0 := a.FirstKey(p)
			qv := q[row*qw+h*hd : row*qw+(h+1)*hd]
			kvo := (h / group) * hd
			sc := scores[k0 : p+1]
			for j := range sc {
				sc[j] = dot(qv, s.K[(k0+j)*kw+kvo:(k0+j)*kw+kvo+hd]) * a.Scale
			}
			if a.Softcap > 0 {
				capInPlace(sc, a.Softcap)
			}
			softmaxInPlace(sc)
			o := out[row*qw+h*hd : row*qw+(h+1)*hd]
			clear(o)
			for j, pj := range sc {
				axpy(o, s.V[(k0+j)*kw+kvo:(k0+j)*kw+kvo+hd], pj)
			}
		}
	})
}

// softmaxInPlace replaces x by softmax(x), subtracting the maximum first.
func softmaxInPlace(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	expAffine(x, x, 1, -mx, 0)
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range x {
		x[j] *= inv
	}
}

// AttentionBackward accumulates dq and, per span, DK and DV from dout, given the forward's
// q, keys and values, and the probabilities AttentionForward stored, or nil to recompute
// them here (one more GEMM per head instead of N×(Pos+N) floats per head kept). With
// soft-capping the capped scores are recomputed too (one more GEMM per head).
func AttentionBackward(dq, dout, probs, q []float32, spans []Span, a Attention) {
	hd, qw, kw := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	group := a.Heads / a.KVHeads
	off := 0
	var scratch, pbuf, cbuf []float32
	for _, s := range spans {
		if s.N == 0 {
			continue
		}
		L := s.Pos + s.N
		if cap(scratch) < s.N*L {
			scratch = make([]float32, s.N*L)
			if probs == nil {
				pbuf = make([]float32, s.N*L)
			}
			if a.Softcap > 0 {
				cbuf = make([]float32, s.N*L)
			}
		}
		dp := scratch[:s.N*L]
		for h := 0; h < a.Heads; h++ {
			var p []float32
			if probs != nil {
				p = probs[off : off+s.N*L]
				off += s.N * L
			} else {
				p = pbuf[:s.N*L]
				attentionProbs(p, q, s, h, a)
			}
			kvo := (h / group) * hd
			do := dout[s.Row*qw+h*hd:]
			// dP = dO·Vᵀ and dV += Pᵀ·dO
			sgemm(false, true, s.N, L, hd, 1, do, qw, s.V[kvo:], kw, 0, dp, L)
			sgemm(true, false, L, hd, s.N, 1, p, L, do, qw, 1, s.DV[kvo:], kw)
			var capped []float32 // the capped scores, whose slope the gradient passes through
			if a.Softcap > 0 {
				capped = cbuf[:s.N*L]
				sgemm(false, true, s.N, L, hd, a.Scale, q[s.Row*qw+h*hd:], qw, s.K[kvo:], kw, 0, capped, L)
			}
			// dS = P ⊙ (dP − Σ_j P·dP), the softmax backward
			For(s.N, grainFor(L), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					pr, dr := p[i*L:(i+1)*L], dp[i*L:(i+1)*L]
					var dot float64
					for j, v := range pr {
						dot += float64(v * dr[j])
					}
					d := float32(dot)
					for j, v := range pr {
						dr[j] = v * (dr[j] - d)
					}
					if capped != nil {
						k0, p := a.FirstKey(s.Pos+i), s.Pos+i
						cr := capped[i*L+k0 : i*L+p+1]
						capInPlace(cr, a.Softcap)
						for j, y := range cr {
							dr[k0+j] *= softcapSlope(y, a.Softcap)
						}
					}
				}
			})
			// dQ += Scale·dS·K and dK += Scale·dSᵀ·Q
			sgemm(false, false, s.N, hd, L, a.Scale, dp, L, s.K[kvo:], kw, 1, dq[s.Row*qw+h*hd:], qw)
			sgemm(true, false, L, hd, s.N, a.Scale, dp, L, q[s.Row*qw+h*hd:], qw, 1, s.DK[kvo:], kw)
		}
	}
}

// dot is Σ a[i]·b[i] with four independent sums, which the CPU overlaps.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy sets y += alpha·x.
func axpy(y, x []float32, alpha float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += alpha * x[i]
	}
}

// attentionRowsGEMM is attentionRowsRef with the products through GEMM, one (row, key/value
// head) at a time: the query heads sharing a key/value head are adjacent in a row, so
// their scores are one small x·Kᵀ and their outputs one P·V.
func attentionRowsGEMM(out, q []float32, spans []Span, a Attention) {
	type item struct{ s, i int }
	var items []item
	maxL := 0
	for si, s := range spans {
		for i := 0; i < s.N; i++ {
			items = append(items, item{si, i})
		}
		maxL = max(maxL, s.Pos+s.N)
	}
	hd, qw, kw := a.HeadDim, a.Heads*a.HeadDim, a.KVHeads*a.HeadDim
	group := a.Heads / a.KVHeads
	For(len(items)*a.KVHeads, max(1, (1<<15)/max(1, maxL*hd*group)), func(lo, hi int) {
		scores := make([]float32, group*maxL)
		for w := lo; w < hi; w++ {
			it, kvh := items[w/a.KVHeads], w%a.KVHeads
			s := spans[it.s]
			row, p := s.Row+it.i, s.Pos+it.i
			k0 := a.FirstKey(p)
			n := p + 1 - k0
			sc := scores[:group*n]
			qo := row*qw + kvh*group*hd
			K, V := s.K[k0*kw+kvh*hd:], s.V[k0*kw+kvh*hd:]
			if !rowKernels(hd) {
				sgemm(false, true, group, n, hd, a.Scale, q[qo:], hd, K, kw, 0, sc, n)
				softmaxRows(sc, group, n, a.Softcap)
				sgemm(false, false, group, hd, n, 1, sc, n, V, kw, 0, out[qo:], hd)
				continue
			}
			// One query row against each key: the one-row kernels, not two GEMMs of `group`
			// rows whose setup outweighs a decoded token's products. The keys go in blocks
			// that stay in L1 while each of the group's heads reads them.
			for b := 0; b < n; b += keyBlock {
				e := min(b+keyBlock, n)
				for g := 0; g < group; g++ {
					dotRows(q[qo+g*hd:qo+(g+1)*hd], K[b*kw:], kw, sc[g*n+b:g*n+e])
				}
			}
			for j := range sc {
				sc[j] *= a.Scale
			}
			softmaxRows(sc, group, n, a.Softcap)
			clear(out[qo : qo+group*hd])
			for b := 0; b < n; b += keyBlock {
				e := min(b+keyBlock, n)
				for g := 0; g < group; g++ {
					axpyRows(sc[g*n+b:g*n+e], V[b*kw:], kw, out[qo+g*hd:qo+(g+1)*hd])
				}
			}
		}
	})
}

// keyBlock is how many keys a decoded row's attention takes at a time: 64 keys of a head of
// 128 values are 32 KB, an L1's worth, read once from further out and then by every head
// of the group.
const keyBlock = 64

// softmaxRows caps (softcap > 0) and softmaxes each of the rows of sc [rows, n].
func softmaxRows(sc []float32, rows, n int, softcap float32) {
	if softcap > 0 {
		capInPlace(sc[:rows*n], softcap)
	}
	for g := 0; g < rows; g++ {
		softmaxInPlace(sc[g*n : (g+1)*n])
	}
}

// rowKernels reports whether one query row's attention takes the one-row kernels (dotRows,
// axpyRows): heads of whole chunks of 64 values, where the kernels run.
func rowKernels(hd int) bool { return hd > 0 && hd%q4Chunk == 0 && q4dotKernel == "avx2" }

// dotRowsGo is dotRows' reference: y[j] = x·w[j·ldw:], summed in order.
func dotRowsGo(x, w []float32, ldw int, y []float32) {
	for j := range y {
		y[j] = dot(x, w[j*ldw:j*ldw+len(x)])
	}
}

// axpyRowsGo is axpyRows' reference: y[k] += Σⱼ p[j]·v[j·ldv+k] for k < len(y), in key order.
func axpyRowsGo(p, v []float32, ldv int, y []float32) {
	for j, pj := range p {
		for k, vk := range v[j*ldv : j*ldv+len(y)] {
			y[k] += pj * vk
		}
	}
}
