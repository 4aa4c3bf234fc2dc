package backendtest

import (
	"fmt"
	"math"

	"rlhfstation/engine/backend"
)

func init() {
	register("rope", true, ropeOps)
	register("attention", true, attentionOps)
}

// ropeOps: rotary embeddings in place, forward and backward, from one pair per head to a
// head of 128, rotating whole heads or their first dimensions only (partial rotary),
// positions up to the end of the table.
func ropeOps(e *env) {
	for _, c := range pick(e, []struct{ rows, heads, half, hd, maxPos int }{
		{1, 1, 1, 2, 4}, {7, 3, 4, 8, 64}, {33, 14, 32, 64, 128}, {9, 3, 8, 24, 32}, {5, 2, 64, 128, 4097}, {300, 2, 8, 16, 512},
	}) {
		shape := fmt.Sprintf("rows=%d heads=%d head=%d rotated=%d positions=%d", c.rows, c.heads, c.hd, 2*c.half, c.maxPos)
		inv := make([]float64, c.half)
		for i := range inv {
			inv[i] = math.Pow(10000, -float64(2*i)/float64(2*c.half))
		}
		pos := e.ids(c.rows, c.maxPos)
		pos[c.rows-1] = int32(c.maxPos - 1)
		n := c.rows * c.heads * c.hd
		x := e.randn(n, 1)
		table := func(s *side) *backend.RoPETable {
			r, err := s.b.NewRoPETable(inv, c.maxPos)
			s.fail("NewRoPETable", err)
			if r != nil && c.hd != 2*c.half {
				r.HeadDim = c.hd // partial rotary (phi3): the rest of each head passes through
			}
			return r
		}
		for _, op := range []string{"RoPEForward", "RoPEBackward"} {
			sign := 1.0
			if op == "RoPEBackward" {
				sign = -1
			}
			e.check(op, shape, func() {
				got := e.twin(func(s *side) []backend.Buf {
					out := s.accAs(act, x)
					if r := table(s); r != nil {
						if op == "RoPEForward" {
							s.do(op, s.b.RoPEForward(out, s.i32(pos), c.heads, r))
						} else {
							s.do(op, s.b.RoPEBackward(out, s.i32(pos), c.heads, r))
						}
					}
					return []backend.Buf{out}
				})
				if got == nil {
					return
				}
				want := f64s(x)
				hd, w := c.hd, c.heads*c.hd
				for r, p := range pos {
					for h := 0; h < c.heads; h++ {
						for i := 0; i < c.half; i++ {
							s, co := math.Sincos(float64(p) * inv[i])
							s *= sign
							a, b := float64(x[r*w+h*hd+i]), float64(x[r*w+h*hd+i+c.half])
							want[r*w+h*hd+i] = a*co - b*s
							want[r*w+h*hd+i+c.half] = b*co + a*s
						}
					}
				}
				e.oracle("rotation by position·frequency", got[0], want, 1e-6, 1e-5)
			})
		}
		rt, _ := e.ref.NewRoPETable(inv, c.maxPos)
		if c.hd != 2*c.half {
			rt.HeadDim = c.hd
		}
		e.fd("RoPEBackward", shape, fdCase{
			inputs: [][]float32{x}, diff: []int{0},
			forward: func(xs [][]float32) []float32 {
				y := append([]float32(nil), xs[0]...)
				e.ref.RoPEForward(hf(y), backend.HostI32(pos), c.heads, rt)
				return y
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				d := append([]float32(nil), g...)
				e.ref.RoPEBackward(hf(d), backend.HostI32(pos), c.heads, rt)
				return [][]float32{d}
			},
		})
	}
}

// attnCase is a batch of spans over a cache: span i reads slot i's keys and values, which
// hold positions [0, pos+n) (and capacity beyond).
type attnCase struct {
	heads, kv, hd, window int
	runs                  [][2]int // (n, pos) per span; n = 0 is an empty run
	softcap               float32
}

func (c attnCase) String() string {
	s := fmt.Sprintf("heads=%d kv=%d head=%d", c.heads, c.kv, c.hd)
	if c.window > 0 {
		s += fmt.Sprintf(" window=%d", c.window)
	}
	if c.softcap > 0 {
		s += fmt.Sprintf(" softcap=%g", c.softcap)
	}
	return s + fmt.Sprintf(" runs(n,pos)=%v", c.runs)
}

func (c attnCase) attention() backend.Attention {
	return backend.Attention{Heads: c.heads, KVHeads: c.kv, HeadDim: c.hd, Scale: float32(1 / math.Sqrt(float64(c.hd))), Window: c.window, Softcap: c.softcap}
}

// layout returns the rows, the cache's capacity per slot and its total values.
func (c attnCase) layout() (rows, capacity, total int) {
	for _, r := range c.runs {
		rows += r[0]
		capacity = max(capacity, r[0]+r[1])
	}
	capacity += 3 // room beyond the last position, never read
	return rows, capacity, len(c.runs) * capacity * c.kv * c.hd
}

// spans views each slot of the cache buffers k, v (and dk, dv when given).
func (c attnCase) spans(k, v, dk, dv backend.Buf) []backend.Span {
	_, capacity, _ := c.layout()
	kw := c.kv * c.hd
	var sp []backend.Span
	row := 0
	for i, r := range c.runs {
		n, pos := r[0], r[1]
		L := (pos + n) * kw
		s := backend.Span{Row: row, N: n, Pos: pos, K: k.Slice(i*capacity*kw, L), V: v.Slice(i*capacity*kw, L)}
		if !dk.Nil() {
			s.DK, s.DV = dk.Slice(i*capacity*kw, L), dv.Slice(i*capacity*kw, L)
		}
		sp = append(sp, s)
		row += n
	}
	return sp
}

// attnCases: grouped-query ratios 1, 2, 4 and 7 (Qwen2.5-0.5B's 14 over 2), odd head sizes
// and 64, 128, 256, a sliding window, runs continuing a cache (pos > 0), one-row runs
// (decode steps), runs of fewer than 8 rows and of more, an empty run, and soft-capped scores.
var attnCases = []attnCase{
	{4, 4, 8, 0, [][2]int{{9, 0}, {12, 0}, {1, 0}}, 0},
	{4, 2, 10, 0, [][2]int{{13, 0}, {0, 4}, {8, 5}}, 0},
	{7, 1, 7, 4, [][2]int{{11, 0}, {2, 6}, {1, 20}}, 0},
	{14, 2, 64, 0, [][2]int{{40, 0}, {1, 39}, {3, 2}}, 0},
	{2, 1, 16, 0, [][2]int{{1, 0}}, 0},
	{6, 3, 5, 3, [][2]int{{5, 9}, {20, 0}}, 0},
	{4, 2, 16, 5, [][2]int{{12, 0}, {1, 13}, {3, 4}}, 1.5}, // gemma2: scores soft-capped, a window
	// the head dims of the large models, on spans the tensor-core kernels' 16-row tiles do not divide
	{4, 1, 256, 24, [][2]int{{33, 0}, {3, 30}}, 0},
	{8, 2, 128, 0, [][2]int{{37, 0}, {20, 13}}, 0},
}

// attentionOps: the attention of training and prefill (with the probabilities kept for the
// backward, and without), its backward (stored probabilities and recomputed ones), and the
// decode step's AttentionRows over one cache buffer.
func attentionOps(e *env) {
	for _, c := range pick(e, attnCases) {
		a := c.attention()
		rows, _, total := c.layout()
		qw := c.heads * c.hd
		q, k, v := e.randn(rows*qw, 1), e.randn(total, 1), e.randn(total, 1)
		dout := e.randn(rows*qw, 1)
		dq0, dk0, dv0 := e.randn(rows*qw, 0.2), e.randn(total, 0.2), e.randn(total, 0.2)
		ref := c.spans(hf(k), hf(v), backend.Buf{}, backend.Buf{})
		nprobs := a.ProbSize(ref)
		want, wantProbs := attentionF64(q, k, v, c)

		var probs []float32
		e.check("AttentionForward", c.String(), func() {
			got := e.twin(func(s *side) []backend.Buf {
				out, pr, out2 := s.outAs(act, rows*qw), s.outAs(act, nprobs), s.outAs(act, rows*qw)
				sp := c.spans(s.inAs(act, k), s.inAs(act, v), backend.Buf{}, backend.Buf{})
				s.do("AttentionForward", s.b.AttentionForward(out, pr, s.inAs(act, q), sp, a))
				s.do("AttentionForward without probabilities", s.b.AttentionForward(out2, backend.Buf{}, s.inAs(act, q), sp, a))
				return []backend.Buf{out, pr, out2}
			})
			if got == nil {
				return
			}
			probs = got[1]
			e.oracle("softmax(q·Kᵀ)·V", got[0], want, 1e-6, 1e-5)
			e.oracle("probabilities", got[1], wantProbs, 1e-7, 1e-5)
			e.oracle("softmax(q·Kᵀ)·V, no probabilities kept", got[2], want, 1e-6, 1e-5)
		})
		if probs == nil {
			continue
		}
		e.check("AttentionBackward", c.String(), func() {
			got := e.twin(func(s *side) []backend.Buf {
				var outs []backend.Buf
				for _, stored := range []bool{true, false} {
					dq, dk, dv := s.accAs(act, dq0), s.accAs(act, dk0), s.accAs(act, dv0)
					sp := c.spans(s.inAs(act, k), s.inAs(act, v), dk, dv)
					pr := backend.Buf{}
					if stored {
						pr = s.inAs(act, probs)
					}
					s.do(fmt.Sprintf("AttentionBackward (probabilities stored: %v)", stored), s.b.AttentionBackward(dq, s.inAs(act, dout), pr, s.inAs(act, q), sp, a))
					outs = append(outs, dq, dk, dv)
				}
				return outs
			})
			if got != nil {
				for i, name := range []string{"dq", "dK", "dV"} {
					e.close("reference, recomputed against stored probabilities: "+name, got[3+i], got[i], Tol{Abs: 1e-5, Rel: 1e-4})
				}
			}
		})
		e.fd("AttentionBackward", c.String(), fdCase{
			inputs: [][]float32{q, k, v}, diff: []int{0, 1, 2},
			forward: func(xs [][]float32) []float32 {
				out := zeros(rows * qw)
				e.ref.AttentionForward(hf(out), backend.Buf{}, hf(xs[0]), c.spans(hf(xs[1]), hf(xs[2]), backend.Buf{}, backend.Buf{}), a)
				return out
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				dq, dk, dv := zeros(rows*qw), zeros(total), zeros(total)
				pr := zeros(nprobs)
				sp := c.spans(hf(xs[1]), hf(xs[2]), hf(dk), hf(dv))
				e.ref.AttentionForward(hf(zeros(rows*qw)), hf(pr), hf(xs[0]), sp, a)
				e.ref.AttentionBackward(hf(dq), hf(g), hf(pr), hf(xs[0]), sp, a)
				return [][]float32{dq, dk, dv}
			},
		})

		attentionRowsCheck(e, c, q, k, v, want)
	}
	// the decode step alone over longer contexts
	for _, c := range pick(e, rowsCases) {
		rows, _, total := c.layout()
		q, k, v := e.randn(rows*c.heads*c.hd, 1), e.randn(total, 1), e.randn(total, 1)
		want, _ := attentionF64(q, k, v, c)
		attentionRowsCheck(e, c, q, k, v, want)
	}
}

// rowsCases: the decode step over contexts longer than one pass of a row's warps over its
// key tiles (the CUDA kernel's warps take tiles of 1024/D keys in turn, D = 64, 128, 256
// bounding the head dimension: 128, 64 and 32 keys a pass of its 8 warps), beside rows of a
// few keys (warps with no tile); grouped-query ratios 1, 2 and 7, head dims 64, 128, 256
// and 80 (a bound's dims past the head), sliding windows and soft-capped scores.
var rowsCases = []attnCase{
	{14, 2, 64, 0, [][2]int{{1, 300}, {1, 5}, {1, 130}}, 0},
	{3, 1, 80, 0, [][2]int{{1, 150}, {1, 3}}, 2},
	{8, 4, 128, 0, [][2]int{{1, 200}, {1, 0}, {1, 64}}, 0},
	{4, 2, 128, 50, [][2]int{{1, 200}, {1, 20}}, 0},
	{4, 4, 256, 0, [][2]int{{1, 95}, {1, 33}, {1, 2}}, 0},
	{7, 1, 64, 100, [][2]int{{1, 260}, {1, 9}}, 1.5},
}

// attentionRowsCheck: the decode step, every row of c's runs as one row at its position,
// reading its sequence's slot of the cache through (seq, pos), against want (attentionF64's).
func attentionRowsCheck(e *env, c attnCase, q, k, v []float32, want []float64) {
	a := c.attention()
	_, capacity, _ := c.layout()
	qw, kw := c.heads*c.hd, c.kv*c.hd
	e.check("AttentionRows", c.String(), func() {
		var seq, pos []int32
		var rowsWant []float64
		var qr []float32
		for i, r := range c.runs {
			for j := 0; j < r[0]; j++ {
				seq, pos = append(seq, int32(i)), append(pos, int32(r[1]+j))
			}
		}
		// rows in another order than the spans': rows are independent
		perm := e.rng.Perm(len(seq))
		ps, pp := make([]int32, len(seq)), make([]int32, len(seq))
		for i, p := range perm {
			ps[i], pp[i] = seq[p], pos[p]
			qr = append(qr, q[p*qw:(p+1)*qw]...)
			rowsWant = append(rowsWant, want[p*qw:(p+1)*qw]...)
		}
		n := len(seq)
		if n == 0 {
			return
		}
		got := e.twin(func(s *side) []backend.Buf {
			out := s.outAs(act, n*qw)
			s.do("AttentionRows", s.b.AttentionRows(out, s.inAs(act, qr), s.inAs(act, k), s.inAs(act, v), s.i32(ps), s.i32(pp), n, a, capacity*kw))
			return []backend.Buf{out}
		})
		if got != nil {
			e.oracle("one row at a time", got[0], rowsWant, 1e-6, 1e-5)
		}
	})
}

// attentionF64 is causal grouped-query attention in float64, with the probabilities in the
// layout AttentionForward keeps them: span after span, head-major, N×(Pos+N), zeros masked.
func attentionF64(q, k, v []float32, c attnCase) (out, probs []float64) {
	a := c.attention()
	rows, capacity, _ := c.layout()
	qw, kw, hd := c.heads*c.hd, c.kv*c.hd, c.hd
	group := c.heads / c.kv
	out = make([]float64, rows*qw)
	row := 0
	for si, r := range c.runs {
		n, pos := r[0], r[1]
		L := pos + n
		base := si * capacity * kw
		for h := 0; h < c.heads; h++ {
			kvo := (h / group) * hd
			for i := 0; i < n; i++ {
				p := pos + i
				sc := make([]float64, L)
				mx := math.Inf(-1)
				for j := a.FirstKey(p); j <= p; j++ {
					var d float64
					for t := 0; t < hd; t++ {
						d += float64(q[(row+i)*qw+h*hd+t]) * float64(k[base+j*kw+kvo+t])
					}
					sc[j] = d * float64(a.Scale)
					if c.softcap > 0 {
						sc[j] = float64(c.softcap) * math.Tanh(sc[j]/float64(c.softcap))
					}
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := a.FirstKey(p); j <= p; j++ {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := a.FirstKey(p); j <= p; j++ {
					sc[j] /= sum
					for t := 0; t < hd; t++ {
						out[(row+i)*qw+h*hd+t] += sc[j] * float64(v[base+j*kw+kvo+t])
					}
				}
				probs = append(probs, sc...)
			}
		}
		row += n
	}
	return out, probs
}
