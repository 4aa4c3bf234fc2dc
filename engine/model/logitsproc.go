package model

import (
	"math"
	"sort"
)

// logitsProc applies the sampling options the backend's Sample lacks, min_p and
// repetition_penalty, on the host (the eager draws: the first token, Eager; the decode step
// has the backend's SampleInto apply them), with Hugging Face transformers' semantics and order: the
// repetition penalty on the raw logits, then temperature, top-k, top-p and min-p. It leaves
// in each row the penalised logits with every token outside the kept set at −inf, so that the
// backend, sampling with no truncation of its own, draws from exactly that distribution.
type logitsProc struct {
	idx []int
	s   []float64
}

// needsProc reports whether o needs the host path.
func (o *GenerateOptions) needsProc() bool {
	return o.MinP > 0 || (o.RepetitionPenalty > 0 && o.RepetitionPenalty != 1)
}

// apply rewrites row in place: seen are the tokens already in the prompt and completion.
// Greedy decoding (temperature 0) takes the penalty only, as transformers' warpers apply to
// sampling only.
func (p *logitsProc) apply(row []float32, seen []int, o *GenerateOptions) {
	if pen := o.RepetitionPenalty; pen > 0 && pen != 1 {
		// Each token once, from its raw value (transformers gathers, then scatters).
		done := map[int]bool{}
		for _, t := range seen {
			if t < 0 || t >= len(row) || done[t] {
				continue
			}
			done[t] = true
			if row[t] < 0 {
				row[t] *= pen
			} else {
				row[t] /= pen
			}
		}
	}
	if o.Temperature == 0 {
		return
	}
	V := len(row)
	if cap(p.s) < V {
		p.s, p.idx = make([]float64, V), make([]int, V)
	}
	s, idx := p.s[:V], p.idx[:V]
	top := math.Inf(-1)
	for j, v := range row {
		s[j] = float64(v) / float64(o.Temperature)
		top = math.Max(top, s[j])
	}
	k := o.TopK
	if k <= 0 || k > V {
		k = V
	}
	usesTopP := o.TopP > 0 && o.TopP < 1
	if k == V && !usesTopP { // min-p alone: a threshold, no ordering needed
		for j := range row {
			if math.Exp(s[j]-top) < float64(o.MinP) {
				row[j] = float32(math.Inf(-1))
			}
		}
		return
	}
	for j := range idx {
		idx[j] = j
	}
	// Decreasing probability, lowest id first among equals (the backend's order).
	sort.Slice(idx, func(a, b int) bool {
		if s[idx[a]] != s[idx[b]] {
			return s[idx[a]] > s[idx[b]]
		}
		return idx[a] < idx[b]
	})
	n := k
	if usesTopP {
		var z float64
		for _, j := range idx[:k] {
			z += math.Exp(s[j] - top)
		}
		var c float64
		for i, j := range idx[:k] {
			c += math.Exp(s[j]-top) / z
			if c >= float64(o.TopP) {
				n = i + 1
				break
			}
		}
	}
	// min-p over the tokens top-k and top-p kept: p/p_max is unchanged by renormalising.
	for n > 1 && math.Exp(s[idx[n-1]]-top) < float64(o.MinP) {
		n--
	}
	for _, j := range idx[n:] {
		row[j] = float32(math.Inf(-1))
	}
}

// logSoftmaxAt is log softmax(row/T)[tok] (T = 1 when 0), in float64.
func logSoftmaxAt(row []float32, tok int, temperature float32) float32 {
	t := float64(temperature)
	if t == 0 {
		t = 1
	}
	top := math.Inf(-1)
	for _, v := range row {
		top = math.Max(top, float64(v)/t)
	}
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v)/t - top)
	}
	return float32(float64(row[tok])/t - top - math.Log(z))
}
