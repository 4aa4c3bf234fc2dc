package backendtest

import (
	"fmt"
	"math"
	"sort"

	"rlhfstation/engine/backend"
)

func init() {
	register("logprob", false, logProbOps)
	register("head", true, headOps)
	register("sample", false, sampleOps)
	register("sample-masked", false, maskedSampleOps)
	register("sample-penalties", false, penaltySampleOps)
	register("digits", false, digitOps)
}

// logSoftmaxF64 returns log softmax(x·invT) and the entropy of that distribution.
func logSoftmaxF64(x []float32, invT float64) ([]float64, float64) {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v)*invT)
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v)*invT - mx)
	}
	lse := mx + math.Log(s)
	lp := make([]float64, len(x))
	var h float64
	for i, v := range x {
		lp[i] = float64(v)*invT - lse
		h -= math.Exp(lp[i]) * lp[i]
	}
	return lp, h
}

// targetsFor draws targets in [0, vocab) with every fourth row masked (−1) and the last
// row's target the last id.
func targetsFor(e *env, rows, vocab int) []int32 {
	t := e.ids(rows, vocab)
	for r := range t {
		if r%4 == 2 {
			t[r] = -1
		}
	}
	t[rows-1] = int32(vocab - 1)
	return t
}

// logProbOps: log-probabilities and entropies of chosen tokens over rows of logits (a
// vocabulary of 2 to 70,000, with and without temperature, masked rows), and the backward.
func logProbOps(e *env) {
	for _, c := range pick(e, [][2]int{{1, 2}, {9, 301}, {4, 4099}, {70, 1000}, {9, 70000}}) {
		rows, vocab := c[0], c[1]
		logits := e.randn(rows*vocab, 2)
		targets := targetsFor(e, rows, vocab)
		dlogp := e.randn(rows, 1)
		dlogp[0] = 0 // a row with no gradient
		dent := e.randn(rows, 1)
		if rows > 1 {
			dent[1] = 0 // a row with the log-prob's term alone
		}
		dl0 := e.randn(rows*vocab, 0.1)
		for _, temp := range []float64{1, 0.7} {
			invT := float32(1 / temp)
			shape := fmt.Sprintf("rows=%d vocab=%d T=%g", rows, vocab, temp)
			e.check("LogProbForward", shape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					lp, ent, lp2 := s.out(rows), s.out(rows), s.out(rows)
					s.do("LogProbForward", s.b.LogProbForward(lp, ent, s.in(logits), s.i32(targets), rows, vocab, invT))
					s.do("LogProbForward without entropy", s.b.LogProbForward(lp2, backend.Buf{}, s.in(logits), s.i32(targets), rows, vocab, invT))
					return []backend.Buf{lp, ent, lp2}
				})
				if got == nil {
					return
				}
				wl, we := make([]float64, rows), make([]float64, rows)
				for r := 0; r < rows; r++ {
					lp, h := logSoftmaxF64(logits[r*vocab:(r+1)*vocab], float64(invT))
					if targets[r] >= 0 {
						wl[r] = lp[targets[r]]
					}
					we[r] = h
				}
				e.oracle("log p(target)", got[0], wl, 1e-5, 1e-5)
				e.oracle("entropy", got[1], we, 1e-5, 1e-5)
				e.oracle("log p(target), no entropy", got[2], wl, 1e-5, 1e-5)
			})
			for _, withEnt := range []bool{false, true} {
				e.check("LogProbBackward", fmt.Sprintf("%s entropy=%v", shape, withEnt), func() {
					got := e.twin(func(s *side) []backend.Buf {
						dl := s.acc(dl0)
						var de backend.Buf
						if withEnt {
							de = s.in(dent)
						}
						s.do("LogProbBackward", s.b.LogProbBackward(dl, s.in(dlogp), de, s.in(logits), s.i32(targets), rows, vocab, invT))
						return []backend.Buf{dl}
					})
					if got == nil {
						return
					}
					want := f64s(dl0)
					for r := 0; r < rows; r++ {
						lp, h := logSoftmaxF64(logits[r*vocab:(r+1)*vocab], float64(invT))
						if withEnt { // ∂H/∂z = −p⊙(log p + H)
							ge := float64(dent[r]) * float64(invT)
							for j := range lp {
								want[r*vocab+j] -= ge * math.Exp(lp[j]) * (lp[j] + h)
							}
						}
						if targets[r] < 0 {
							continue
						}
						g := float64(dlogp[r]) * float64(invT)
						for j := range lp {
							want[r*vocab+j] -= g * math.Exp(lp[j])
						}
						want[r*vocab+int(targets[r])] += g
					}
					e.oracle("dlogp·invT·(onehot − p) − dentropy·invT·p⊙(log p + H)", got[0], want, 1e-6, 1e-5)
				})
			}
			// Finite differences of log p(target) and, through dentropy, of the entropy.
			e.fd("LogProbBackward", shape, fdCase{
				inputs: [][]float32{logits}, diff: []int{0},
				forward: func(xs [][]float32) []float32 {
					out := zeros(2 * rows)
					e.ref.LogProbForward(hf(out[:rows]), hf(out[rows:]), hf(xs[0]), backend.HostI32(targets), rows, vocab, invT)
					return out
				},
				backward: func(xs [][]float32, g []float32) [][]float32 {
					d := zeros(rows * vocab)
					e.ref.LogProbBackward(hf(d), hf(g[:rows]), hf(g[rows:]), hf(xs[0]), backend.HostI32(targets), rows, vocab, invT)
					return [][]float32{d}
				},
			})
		}
	}
}

// headOps: the LM head — logits, and log-probabilities and entropies formed a chunk of rows
// at a time (soft-capped or not), with its backward into the hidden states — over enough rows of a large
// vocabulary that the CPU's chunks (64 rows at 70,000) split the batch.
func headOps(e *env) {
	for _, c := range pick(e, [][3]int{{1, 8, 5}, {70, 8, 70000}, {9, 24, 301}, {130, 16, 4099}, {3, 4097, 7}}) {
		rows, dim, vocab := c[0], c[1], c[2]
		shape := fmt.Sprintf("rows=%d dim=%d vocab=%d", rows, dim, vocab)
		hidden, head := e.randn(rows*dim, 1), e.randn(vocab*dim, 1/math.Sqrt(float64(dim)))
		// The head's values are bf16, so that a float32 backend given them in bf16 (role
		// frozen) computes the same function as from float32.
		heads := []role{weight}
		if e.bf16Exact(head) {
			heads = append(heads, frozen)
		}
		targets := targetsFor(e, rows, vocab)
		dlogp, dent := e.randn(rows, 1), e.randn(rows, 1)
		switch {
		case rows > 66: // a chunk of rows without gradient (the CPU skips it)
			clear(dlogp[:64])
			clear(dent[:64])
		case rows > 1:
			dlogp[0] = 0
		}
		dh0 := e.randn(rows*dim, 0.2)
		logitsF64 := func() []float64 {
			l := make([]float64, rows*vocab)
			for r := 0; r < rows; r++ {
				for j := 0; j < vocab; j++ {
					var s float64
					for i := 0; i < dim; i++ {
						s += float64(hidden[r*dim+i]) * float64(head[j*dim+i])
					}
					l[r*vocab+j] = s
				}
			}
			return l
		}()
		invT := float32(1 / 0.9)
		softcap := float32(0)
		if rows%2 == 1 { // gemma2's final soft-capping on every other shape, low enough to bite
			softcap = 2.5
			shape += fmt.Sprintf(" softcap=%g", softcap)
		}
		for _, hr := range heads {
			shape := shape
			if hr == frozen {
				shape += " head bf16"
			}
			e.check("Logits", shape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					out := s.out(rows * vocab)
					s.do("Logits", s.b.Logits(out, s.inAs(act, hidden), s.inAs(hr, head), rows, dim, vocab))
					return []backend.Buf{out}
				})
				if got != nil {
					e.oracle("hidden·headᵀ", got[0], logitsF64, 3e-7*float64(dim)+1e-6, 1e-5)
				}
			})
			e.check("HeadLogProbs", shape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					lp, ent := s.out(rows), s.out(rows)
					s.do("HeadLogProbs", s.b.HeadLogProbs(lp, ent, s.inAs(act, hidden), s.inAs(hr, head), s.i32(targets), rows, dim, vocab, invT, softcap))
					return []backend.Buf{lp, ent}
				})
				if got == nil {
					return
				}
				wl, we := make([]float64, rows), make([]float64, rows)
				for r := 0; r < rows; r++ {
					row := make([]float32, vocab)
					for j := range row {
						l := logitsF64[r*vocab+j]
						if softcap > 0 {
							l = float64(softcap) * math.Tanh(l/float64(softcap))
						}
						row[j] = float32(l)
					}
					lp, h := logSoftmaxF64(row, float64(invT))
					if targets[r] >= 0 {
						wl[r] = lp[targets[r]]
					}
					we[r] = h
				}
				e.oracle("log p(target) through the head", got[0], wl, 1e-5+3e-7*float64(dim), 1e-5)
				e.oracle("entropy through the head", got[1], we, 1e-5+3e-7*float64(dim), 1e-5)
			})
			for _, withEnt := range []bool{false, true} {
				e.check("HeadLogProbsBackward", fmt.Sprintf("%s entropy=%v", shape, withEnt), func() {
					e.twin(func(s *side) []backend.Buf {
						dh := s.accAs(act, dh0)
						var de backend.Buf
						if withEnt {
							de = s.in(dent)
						}
						s.do("HeadLogProbsBackward", s.b.HeadLogProbsBackward(dh, s.inAs(act, hidden), s.inAs(hr, head), s.in(dlogp), de, s.i32(targets), rows, dim, vocab, invT, softcap))
						return []backend.Buf{dh}
					})
				})
			}
		}
		if vocab*rows*dim <= 1<<22 || !e.small {
			// log p(target) and the entropy through the head, against finite differences
			e.fd("HeadLogProbsBackward", shape, fdCase{
				inputs: [][]float32{hidden}, diff: []int{0},
				forward: func(xs [][]float32) []float32 {
					out := zeros(2 * rows)
					e.ref.HeadLogProbs(hf(out[:rows]), hf(out[rows:]), hf(xs[0]), hf(head), backend.HostI32(targets), rows, dim, vocab, invT, softcap)
					return out
				},
				backward: func(xs [][]float32, g []float32) [][]float32 {
					d := zeros(rows * dim)
					e.ref.HeadLogProbsBackward(hf(d), hf(xs[0]), hf(head), hf(g[:rows]), hf(g[rows:]), backend.HostI32(targets), rows, dim, vocab, invT, softcap)
					return [][]float32{d}
				},
			})
		}
	}
}

// keptDist is the distribution Sample must draw from, in float64: softmax(x/T), the top k
// (ties to the lowest id), then the smallest prefix reaching top-p of the renormalised top
// k, renormalised.
func keptDist(x []float32, temp float64, topK int, topP float64) map[int]float64 {
	lp, _ := logSoftmaxF64(x, 1/temp)
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] > x[idx[b]] })
	if topK > 0 && topK < len(x) {
		idx = idx[:topK]
	}
	var tot float64
	for _, i := range idx {
		tot += math.Exp(lp[i])
	}
	if topP > 0 && topP < 1 {
		var c float64
		for n, i := range idx {
			c += math.Exp(lp[i]) / tot
			if c >= topP {
				idx = idx[:n+1]
				break
			}
		}
	}
	var kept float64
	for _, i := range idx {
		kept += math.Exp(lp[i])
	}
	d := map[int]float64{}
	for _, i := range idx {
		d[i] = math.Exp(lp[i]) / kept
	}
	return d
}

// sampleOps: greedy decoding gives the reference's ids (lowest id on ties); sampling with
// temperature, top-k and top-p draws from the right distribution. With N rows of the same
// logits and the uniforms (i+½)/N, any rule that splits [0,1) into one interval per kept
// token of its probability — in whatever order — draws each token N·p times, give or take
// one; the uniforms are dealt to the rows in a random order, and the draw repeated through
// SampleInto with the rows permuted must permute the tokens alike (row r uses uniforms[r]).
func sampleOps(e *env) {
	for _, vocab := range pick(e, []int{2, 3001, 257, 70000}) {
		rows := 6
		logits := make([]float32, rows*vocab)
		for i := range logits {
			logits[i] = float32(e.rng.NormFloat64() * 2)
		}
		if vocab > 200 {
			for j := 0; j < 5; j++ { // a five-way tie at the top of row 1
				logits[1*vocab+100+j*7] = 9
			}
			logits[2*vocab+vocab-1] = 12 // the last id is the best of row 2
		}
		shape := fmt.Sprintf("greedy rows=%d vocab=%d", rows, vocab)
		e.check("Sample", shape, func() {
			for _, into := range []bool{false, true} {
				tok, lp, ok := sampleOn(e, e.b, into, logits, make([]float64, rows), rows, vocab, 0, 0, 0)
				if !ok {
					return
				}
				for r := 0; r < rows; r++ {
					row := logits[r*vocab : (r+1)*vocab]
					best := 0
					for j, v := range row {
						if v > row[best] {
							best = j
						}
					}
					if int(tok[r]) != best {
						e.errorf("SampleInto=%v row %d: greedy token %d, want %d (the arg max, lowest id on ties)", into, r, tok[r], best)
					}
					l, _ := logSoftmaxF64(row, 1)
					if d := math.Abs(float64(lp[r]) - l[best]); d > 1e-5+1e-5*math.Abs(l[best]) {
						e.errorf("SampleInto=%v row %d: log-prob %v, want %v", into, r, lp[r], l[best])
					}
				}
			}
		})
	}

	n := 512
	if e.small {
		n = 64
	}
	for _, c := range pick(e, []struct {
		vocab int
		temp  float64
		k     int
		p     float64
	}{{257, 1, 0, 0}, {257, 0.7, 0, 0}, {257, 1, 50, 0}, {4099, 1, 3, 0}, {257, 1, 0, 0.9}, {257, 0.8, 40, 0.5}, {4099, 1, 0, 0.3}, {1, 1, 0, 0}}) {
		shape := fmt.Sprintf("vocab=%d T=%g top-k=%d top-p=%g rows=%d", c.vocab, c.temp, c.k, c.p, n)
		row := make([]float32, c.vocab)
		for i := range row {
			row[i] = float32(e.rng.NormFloat64() * 2)
		}
		dist := keptDist(row, c.temp, c.k, c.p)
		full, _ := logSoftmaxF64(row, 1/c.temp)
		logits := make([]float32, n*c.vocab)
		for r := 0; r < n; r++ {
			copy(logits[r*c.vocab:], row)
		}
		u := make([]float64, n)
		for i, p := range e.rng.Perm(n) {
			u[p] = (float64(i) + 0.5) / float64(n)
		}
		checkLogp := func(tok []int32, lp []float32) bool {
			for r, t := range tok {
				if _, kept := dist[int(t)]; !kept {
					e.errorf("row %d drew token %d, outside the kept set of %d tokens", r, t, len(dist))
					return false
				}
				if d := math.Abs(float64(lp[r]) - full[t]); d > 1e-5+1e-5*math.Abs(full[t]) {
					e.errorf("row %d: log-prob of token %d is %v, want %v (log softmax(logits/T) over the whole vocabulary)", r, t, lp[r], full[t])
					return false
				}
			}
			return true
		}
		var tok []int32
		e.check("Sample", shape, func() {
			t, lp, ok := sampleOn(e, e.b, false, logits, u, n, c.vocab, float32(c.temp), c.k, float32(c.p))
			if !ok || !checkLogp(t, lp) {
				return
			}
			count := map[int]int{}
			for _, id := range t {
				count[int(id)]++
			}
			for id, p := range dist {
				if d := math.Abs(float64(count[id]) - float64(n)*p); d > 1+1e-4*float64(n) {
					e.errorf("token %d (p %.5f) drawn %d times of %d, want %.2f ± 1", id, p, count[id], n, float64(n)*p)
					return
				}
			}
			tok = t
		})
		if tok == nil {
			continue
		}
		// The same draw through SampleInto with the rows permuted: the same tokens, permuted.
		e.check("SampleInto", shape+" rows permuted", func() {
			perm := e.rng.Perm(n)
			u2 := make([]float64, n)
			for i, p := range perm {
				u2[i] = u[p]
			}
			tok2, lp, ok := sampleOn(e, e.b, true, logits, u2, n, c.vocab, float32(c.temp), c.k, float32(c.p))
			if !ok || !checkLogp(tok2, lp) {
				return
			}
			for i, p := range perm {
				if tok2[i] != tok[p] {
					e.errorf("row %d (uniform %.4f) drew %d, Sample drew %d with that uniform: a row must use its own uniform", i, u2[i], tok2[i], tok[p])
					return
				}
			}
		})
	}
}

// maskedSampleOps: rows whose excluded tokens are −inf (truncated by a caller) are sampled
// without truncation: no row may draw an excluded token, and the kept tokens' log-probs are
// those of the masked row.
func maskedSampleOps(e *env) {
	const rows, vocab = 64, 257
	logits := make([]float32, rows*vocab)
	for i := range logits {
		logits[i] = float32(e.rng.NormFloat64() * 2)
		if i%vocab%3 != 0 {
			logits[i] = float32(math.Inf(-1))
		}
	}
	u := make([]float64, rows)
	for i := range u {
		u[i] = (float64(i) + 0.5) / rows
	}
	for _, into := range []bool{false, true} {
		e.check("Sample", fmt.Sprintf("-inf entries, SampleInto=%v", into), func() {
			tok, lp, ok := sampleOn(e, e.b, into, logits, u, rows, vocab, 0.9, 0, 0)
			if !ok {
				return
			}
			for r, t := range tok {
				l, _ := logSoftmaxF64(logits[r*vocab:(r+1)*vocab], 1/0.9)
				if t < 0 || int(t) >= vocab || math.IsInf(float64(logits[r*vocab+int(t)]), -1) {
					e.errorf("row %d drew token %d, which is −inf", r, t)
					return
				}
				if d := math.Abs(float64(lp[r]) - l[t]); d > 1e-5+1e-5*math.Abs(l[t]) {
					e.errorf("row %d: log-prob %v, want %v", r, lp[r], l[t])
					return
				}
			}
		})
	}
}

// sampleOn draws on b through Sample or SampleInto.
func sampleOn(e *env, b backend.Backend, into bool, logits []float32, u []float64, rows, vocab int, temp float32, k int, p float32) ([]int32, []float32, bool) {
	s := &side{e: e, b: b}
	defer s.free()
	lb := s.in(logits)
	if s.failed {
		return nil, nil, false
	}
	if !into {
		tok, lp, err := b.Sample(lb, u, rows, vocab, temp, k, p)
		if !e.must("Sample", err) {
			return nil, nil, false
		}
		if len(tok) != rows || len(lp) != rows {
			e.errorf("Sample returned %d tokens and %d log-probs for %d rows", len(tok), len(lp), rows)
			return nil, nil, false
		}
		s.checkUntouched()
		return tok, lp, !s.failed
	}
	tb, lpb := s.outI32(rows), s.out(rows)
	s.do("SampleInto", b.SampleInto(tb, lpb, lb, s.f64(u), rows, vocab, temp, k, p, backend.Penalties{}))
	if s.failed || !e.must("Sync", b.Sync()) {
		return nil, nil, false
	}
	tok, lp := s.getI32(tb), s.get(lpb)
	s.checkUntouched()
	return tok, lp, !s.failed
}

// digitOps: the distribution over digit tokens of number token loss, with several tokens
// for one digit.
func digitOps(e *env) {
	for _, c := range pick(e, [][2]int{{1, 10}, {7, 50}, {5, 4099}}) {
		rows, vocab := c[0], c[1]
		shape := fmt.Sprintf("rows=%d vocab=%d", rows, vocab)
		logits := e.randn(rows*vocab, 3)
		var ids, values []int32
		for d, id := range e.rng.Perm(vocab)[:10] {
			ids, values = append(ids, int32(id)), append(values, int32(d))
		}
		if vocab > 20 { // " 7" and "7": two tokens of one digit
			for _, d := range []int32{7, 0} {
				for {
					id := int32(e.rng.IntN(vocab))
					if !contains(ids, id) {
						ids, values = append(ids, id), append(values, d)
						break
					}
				}
			}
		}
		e.check("DigitProbs", shape, func() {
			got := e.twin(func(s *side) []backend.Buf {
				out := s.out(rows * 10)
				s.do("DigitProbs", s.b.DigitProbs(out, s.in(logits), s.i32(ids), s.i32(values), rows, vocab))
				return []backend.Buf{out}
			})
			if got == nil {
				return
			}
			want := make([]float64, rows*10)
			for r := 0; r < rows; r++ {
				mx := math.Inf(-1)
				for _, id := range ids {
					mx = math.Max(mx, float64(logits[r*vocab+int(id)]))
				}
				var sum float64
				for i, id := range ids {
					p := math.Exp(float64(logits[r*vocab+int(id)]) - mx)
					want[r*10+int(values[i])] += p
					sum += p
				}
				for d := 0; d < 10; d++ {
					want[r*10+d] /= sum
				}
			}
			e.oracle("softmax over the digit tokens", got[0], want, 1e-7, 1e-5)
		})
	}
}

func contains(xs []int32, x int32) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// penaltySampleOps: SampleInto with transformers' repetition penalty and min_p. n rows of one
// row of logits, the same seen tokens (positive and negative logits among them) and the
// uniforms (i+½)/n draw each token of the distribution transformers' processors give — the
// penalised row, then temperature, top-k, top-p, then min_p — n·p times give or take one;
// the log-probs are those of the raw row; the drawn tokens join the seen bits and nothing
// else does; greedy takes the penalised argmax.
func penaltySampleOps(e *env) {
	n := 512
	if e.small {
		n = 128
	}
	for _, c := range pick(e, []struct {
		vocab   int
		temp    float64
		k       int
		p, minP float64
		pen     float64
	}{{257, 1, 0, 0, 0.05, 1.5}, {257, 0.8, 0, 0, 0.2, 1}, {300, 1, 40, 0.9, 0.1, 1.3}, {4099, 1, 0, 0, 0, 2}, {257, 0, 0, 0, 0, 3}, {70, 1.2, 0, 0.8, 0.3, 0.7}}) {
		shape := fmt.Sprintf("vocab=%d T=%g top-k=%d top-p=%g min-p=%g penalty=%g rows=%d", c.vocab, c.temp, c.k, c.p, c.minP, c.pen, n)
		row := make([]float32, c.vocab)
		for i := range row {
			row[i] = float32(e.rng.NormFloat64() * 2)
		}
		w := backend.SeenWords(c.vocab)
		bits := make([]int32, w)
		pen := make([]float32, c.vocab) // the penalised row
		copy(pen, row)
		for _, j := range append(e.rng.Perm(c.vocab)[:min(c.vocab, 12)], argmaxOf(row)) {
			if bits[j>>5]&(1<<(j&31)) != 0 {
				continue
			}
			bits[j>>5] |= 1 << (j & 31)
			if pen[j] < 0 {
				pen[j] *= float32(c.pen)
			} else {
				pen[j] /= float32(c.pen)
			}
		}
		logits := make([]float32, n*c.vocab)
		seen := make([]int32, n*w)
		for r := 0; r < n; r++ {
			copy(logits[r*c.vocab:], row)
			copy(seen[r*w:], bits)
		}
		u := make([]float64, n)
		for i, p := range e.rng.Perm(n) {
			u[p] = (float64(i) + 0.5) / float64(n)
		}
		invT := 1.0
		if c.temp > 0 {
			invT = 1 / c.temp
		}
		raw, _ := logSoftmaxF64(row, invT)
		var dist map[int]float64
		if c.temp > 0 {
			dist = keptDist(pen, c.temp, c.k, c.p)
			if c.minP > 0 { // min_p after top-p: p/p_max unchanged by renormalising
				top := 0.0
				for _, p := range dist {
					top = math.Max(top, p)
				}
				var kept float64
				for id, p := range dist {
					if p < c.minP*top {
						delete(dist, id)
					} else {
						kept += p
					}
				}
				for id := range dist {
					dist[id] /= kept
				}
			}
		} else {
			dist = map[int]float64{argmaxOf(pen): 1}
		}
		e.check("SampleInto", shape, func() {
			s := &side{e: e, b: e.b}
			defer s.free()
			lb, sb := s.in(logits), s.i32(seen)
			tb, lpb := s.outI32(n), s.out(n)
			pens := backend.Penalties{MinP: float32(c.minP), Repetition: float32(c.pen), Seen: sb}
			s.do("SampleInto", e.b.SampleInto(tb, lpb, lb, s.f64(u), n, c.vocab, float32(c.temp), c.k, float32(c.p), pens))
			if s.failed || !e.must("Sync", e.b.Sync()) {
				return
			}
			tok, lp, after := s.getI32(tb), s.get(lpb), s.getI32(sb)
			count := map[int]int{}
			for r, t := range tok {
				if _, ok := dist[int(t)]; !ok {
					e.errorf("row %d drew token %d, outside the kept set of %d", r, t, len(dist))
					return
				}
				count[int(t)]++
				if d := math.Abs(float64(lp[r]) - raw[t]); d > 1e-5+1e-5*math.Abs(raw[t]) {
					e.errorf("row %d: log-prob of %d is %v, want %v (the raw row's)", r, t, lp[r], raw[t])
					return
				}
				for k := 0; k < w; k++ {
					want := bits[k]
					if int(t)>>5 == k {
						want |= 1 << (t & 31)
					}
					if after[r*w+k] != want {
						e.errorf("row %d: seen word %d is %#x after drawing %d, want %#x", r, k, after[r*w+k], t, want)
						return
					}
				}
			}
			for id, p := range dist {
				if d := math.Abs(float64(count[id]) - float64(n)*p); d > 1+1e-4*float64(n) {
					e.errorf("token %d (p %.5f) drawn %d times of %d, want %.2f ± 1", id, p, count[id], n, float64(n)*p)
					return
				}
			}
		})
	}
}

func argmaxOf(x []float32) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}
