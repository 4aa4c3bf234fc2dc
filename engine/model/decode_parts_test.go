package model

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/quant"
)

// partTimes is the time a decode step spends in each kind of op.
type partTimes struct {
	wall, cpu                                          float64
	n                                                  int
	calls, helped, startNs, tailNs, callerNs, helperNs int64
}

// timed is a backend that times its ops by kind (wall, process CPU, parallelFor hand-offs).
type timed struct {
	backend.Backend
	parts map[string]*partTimes
}

func (t *timed) time(kind string, f func() error) error {
	p := t.parts[kind]
	if p == nil {
		p = &partTimes{}
		t.parts[kind] = p
	}
	pr := &gemm.Probe
	c0, h0, s0, tl0, cb0, hb0 := pr.Calls.Load(), pr.Helped.Load(), pr.StartNs.Load(), pr.TailNs.Load(), pr.CallerNs.Load(), pr.HelperNs.Load()
	u0, w0 := processCPU(), time.Now()
	err := f()
	p.wall += time.Since(w0).Seconds()
	p.cpu += processCPU() - u0
	p.n++
	p.calls += pr.Calls.Load() - c0
	p.helped += pr.Helped.Load() - h0
	p.startNs += pr.StartNs.Load() - s0
	p.tailNs += pr.TailNs.Load() - tl0
	p.callerNs += pr.CallerNs.Load() - cb0
	p.helperNs += pr.HelperNs.Load() - hb0
	return err
}

func (t *timed) EmbeddingForward(out, ids, pos, wte, wpe backend.Buf, dim int) error {
	return t.time("embedding", func() error { return t.Backend.EmbeddingForward(out, ids, pos, wte, wpe, dim) })
}
func (t *timed) RMSNormForward(out, rstd, inp, weight backend.Buf, rows, dim int, eps float64, offset float32) error {
	return t.time("norms", func() error { return t.Backend.RMSNormForward(out, rstd, inp, weight, rows, dim, eps, offset) })
}
func (t *timed) ResidualForward(out, a, b backend.Buf, n int) error {
	return t.time("residual", func() error { return t.Backend.ResidualForward(out, a, b, n) })
}
func (t *timed) SwiGLUForward(out, gate, up backend.Buf, n int) error {
	return t.time("swiglu", func() error { return t.Backend.SwiGLUForward(out, gate, up, n) })
}
func (t *timed) BiasForward(out, bias backend.Buf, rows, cols int) error {
	return t.time("bias", func() error { return t.Backend.BiasForward(out, bias, rows, cols) })
}
func (t *timed) GEMM(transA, transB bool, m, n, k int, alpha float32, a backend.Buf, lda int, b backend.Buf, ldb int, beta float32, c backend.Buf, ldc int) error {
	return t.time("f32 GEMM (LoRA)", func() error {
		return t.Backend.GEMM(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}
func (t *timed) Q4MulT(y, x backend.Buf, w *backend.Q4, rows int) error {
	return t.time("4-bit MulT", func() error { return t.Backend.Q4MulT(y, x, w, rows) })
}
func (t *timed) Q4Linear(y, res, x backend.Buf, w *backend.Q4, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) error {
	kind := fmt.Sprintf("4-bit linear %d×%d", w.Rows, w.Cols)
	return t.time(kind, func() error { return t.Backend.Q4Linear(y, res, x, w, bias, xa, ldxa, lb, r, scale, rows) })
}
func (t *timed) Q4Linears(ls []backend.Q4Out, x, xa backend.Buf, ldxa int, rows int) error {
	var kind strings.Builder
	kind.WriteString("4-bit group ")
	for i, l := range ls {
		if i > 0 {
			kind.WriteString("+")
		}
		fmt.Fprintf(&kind, "%d", l.W.Rows)
	}
	fmt.Fprintf(&kind, "×%d", ls[0].W.Cols)
	return t.time(kind.String(), func() error { return t.Backend.Q4Linears(ls, x, xa, ldxa, rows) })
}

// Sampling times the decode step's backend for its 4-bit linears (backend.SamplingOf).
func (t *timed) Sampling() backend.Backend {
	return &timed{Backend: backend.SamplingOf(t.Backend), parts: t.parts}
}
func (t *timed) SampleInto(tokens, logp, logits, uniforms backend.Buf, rows, vocab int, temperature float32, topK int, topP float32, pen backend.Penalties) error {
	return t.time("sampler", func() error {
		return t.Backend.SampleInto(tokens, logp, logits, uniforms, rows, vocab, temperature, topK, topP, pen)
	})
}
func (t *timed) AttentionRows(out, q, k, v, seq, pos backend.Buf, rows int, a backend.Attention, seqStride int) error {
	return t.time("attention", func() error { return t.Backend.AttentionRows(out, q, k, v, seq, pos, rows, a, seqStride) })
}
func (t *timed) AppendKV(kc, vc, k, v, seq, pos backend.Buf, rows, width, seqStride int) error {
	return t.time("copies (KV rows)", func() error { return t.Backend.AppendKV(kc, vc, k, v, seq, pos, rows, width, seqStride) })
}
func (t *timed) RoPEForward(x, pos backend.Buf, heads int, r *backend.RoPETable) error {
	return t.time("rope", func() error { return t.Backend.RoPEForward(x, pos, heads, r) })
}
func (t *timed) AttentionForward(out, probs, q backend.Buf, spans []backend.Span, a backend.Attention) error {
	return t.time("attention", func() error { return t.Backend.AttentionForward(out, probs, q, spans, a) })
}
func (t *timed) CopyRows(dst backend.Buf, dstRows []int64, ldd int, src backend.Buf, srcRows []int64, lds int, n, cols int) error {
	return t.time("copies (KV rows)", func() error { return t.Backend.CopyRows(dst, dstRows, ldd, src, srcRows, lds, n, cols) })
}
func (t *timed) Copy2D(dst backend.Buf, ldd int, src backend.Buf, lds int, rows, cols int) error {
	return t.time("copies (2D)", func() error { return t.Backend.Copy2D(dst, ldd, src, lds, rows, cols) })
}
func (t *timed) Logits(out, hidden, head backend.Buf, rows, dim, vocab int) error {
	return t.time("head (logits)", func() error { return t.Backend.Logits(out, hidden, head, rows, dim, vocab) })
}
func (t *timed) Sample(logits backend.Buf, uniforms []float64, rows, vocab int, temperature float32, topK int, topP float32) (tok []int32, lp []float32, err error) {
	err = t.time("sampler", func() error {
		var err error
		tok, lp, err = t.Backend.Sample(logits, uniforms, rows, vocab, temperature, topK, topP)
		return err
	})
	return
}
func (t *timed) Place(host any, dt backend.DType) (x backend.Buf, err error) {
	err = t.time("place/free", func() error {
		var err error
		x, err = t.Backend.Place(host, dt)
		return err
	})
	return
}
func (t *timed) Free(x backend.Buf) error {
	return t.time("place/free", func() error { return t.Backend.Free(x) })
}

// BenchmarkDecodeParts: where one sequence's decode steps (BenchmarkDecodeNF4's, on its NF4
// model with the bf16 head) spend their time, op kind by op kind: the wall and the process's
// CPU time (both threads) in each, and for the ops split over the cores (gemm.Probe) the
// calls a helper joined, the time from a call to its helper's first item, the time the caller
// waited for the helpers after its own last item, and the time each side spent in items.
// "between ops" is the step's time outside the backend's ops (the model's own code). Each op
// is timed with two getrusage calls (about 3 µs each on these machines), which the table
// counts in. RLHFSTATION_DECODE_TOKENS tokens (40 by default); RLHFSTATION_DECODE_LORA=r adds
// a rank-r adapter on every linear; RLHFSTATION_DECODE_STEP=decoder times Generate's decode
// step (the decoder: q, k and v, gate and up each one Q4Linears, the draw on the backend)
// instead of a forward pass and Sample.
// run: go test ./engine/model -run '^$' -bench DecodeParts -benchtime 1x -v
func BenchmarkDecodeParts(b *testing.B) {
	tokens := 40
	if n, err := strconv.Atoi(os.Getenv("RLHFSTATION_DECODE_TOKENS")); err == nil && n > 0 {
		tokens = n
	}
	m, err := NewRandom(qwen05Shape, 1)
	if err != nil {
		b.Fatal(err)
	}
	for i, v := range m.data {
		m.data[i] = math.Float32frombits((math.Float32bits(v) + 0x7fff + (math.Float32bits(v)>>16)&1) &^ 0xffff)
	}
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	const promptLen = 16
	prompt := make([]int, promptLen)
	for j := range prompt {
		prompt[j] = (j * 7919) % qwen05Shape.Vocab
	}
	tb := &timed{Backend: m.Backend(), parts: map[string]*partTimes{}}
	if err := m.Use(tb); err != nil {
		b.Fatal(err)
	}
	if r, _ := strconv.Atoi(os.Getenv("RLHFSTATION_DECODE_LORA")); r > 0 {
		attachTestLoRA(m, r, 3)
	}
	c := m.NewCache(1, promptLen+tokens+1)
	if err := m.prefill(c, [][]int{prompt}, AdaptersOn, func(backend.Buf, *pass) error { return nil }); err != nil {
		b.Fatal(err)
	}
	step, restart := func() {
		lg, p, err := m.forward(c, [][]int{{prompt[0]}}, true, AdaptersOn)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := m.b.Sample(lg, []float64{0}, len(p.runs), m.Config.Vocab, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
	}, func() {}
	if os.Getenv("RLHFSTATION_DECODE_STEP") == "decoder" {
		var d *decoder
		step = func() {
			if _, _, _, err := d.step(nil); err != nil {
				b.Fatal(err)
			}
		}
		restart = func() { // a decoder from c.Len[0] on (nil after the last round)
			if d != nil {
				d.free()
			}
			if c.Len[0] < 0 {
				d = nil
				return
			}
			var err error
			if d, err = m.newDecoder(c, []int{0}, []int32{int32(prompt[0])}, GenerateOptions{Adapters: AdaptersOn}, backend.Buf{}, func(int) []int { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	}
	for range 3 {
		c.Len[0] = promptLen
		restart()
		step()
	}
	var wall, cpuT float64
	for b.Loop() {
		clear(tb.parts)
		gemm.Probe.On.Store(true)
		c.Len[0] = promptLen
		restart()
		c0, t0 := processCPU(), time.Now()
		for range tokens {
			step()
		}
		wall, cpuT = time.Since(t0).Seconds(), processCPU()-c0
		gemm.Probe.On.Store(false)
	}
	c.Len[0] = -1
	restart()
	n := float64(tokens)
	var tab strings.Builder
	fmt.Fprintf(&tab, "%d tokens, one sequence, GOMAXPROCS %d: %.2f ms wall, %.2f ms CPU a token\n", tokens, runtime.GOMAXPROCS(0), 1e3*wall/n, 1e3*cpuT/n)
	fmt.Fprintf(&tab, "| part | calls | wall ms | CPU ms | parallelFor calls | helper joined | start µs/call | tail µs/call | caller ms | helper ms |\n|---|---|---|---|---|---|---|---|---|---|\n")
	keys := make([]string, 0, len(tb.parts))
	var sw, sc float64
	for k, p := range tb.parts {
		keys = append(keys, k)
		sw += p.wall
		sc += p.cpu
	}
	sort.Slice(keys, func(i, j int) bool { return tb.parts[keys[i]].wall > tb.parts[keys[j]].wall })
	for _, k := range keys {
		p := tb.parts[k]
		st, tl := 0.0, 0.0
		if p.helped > 0 {
			st = float64(p.startNs) / float64(p.helped) / 1e3
		}
		if p.calls > 0 {
			tl = float64(p.tailNs) / float64(p.calls) / 1e3
		}
		fmt.Fprintf(&tab, "| %s | %.0f | %.3f | %.3f | %.0f | %.0f | %.1f | %.1f | %.3f | %.3f |\n", k, float64(p.n)/n, 1e3*p.wall/n, 1e3*p.cpu/n,
			float64(p.calls)/n, float64(p.helped)/n, st, tl, float64(p.callerNs)/n/1e6, float64(p.helperNs)/n/1e6)
	}
	fmt.Fprintf(&tab, "| between ops (model code) | | %.3f | %.3f | | | | | | |\n", 1e3*(wall-sw)/n, 1e3*(cpuT-sc)/n)
	b.ReportMetric(1e3*wall/n, "ms/token")
	b.ReportMetric(1e3*cpuT/n, "cpu-ms/token")
	b.Log("\n" + tab.String())
}
