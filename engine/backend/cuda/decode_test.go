package cuda

import (
	"math"
	"testing"

	"rlhfstation/engine/builtin"
	"rlhfstation/engine/model"
	"rlhfstation/quant"
)

// decoder is a decode step over fixed device buffers, as a CUDA graph needs: every input of
// the step (token ids, positions, cache rows, uniforms) lives in a device buffer updated
// before the step runs, LoRA's bf16 copies and x·Aᵀ are persistent, and the sampled tokens go
// straight into the next step's ids.
type decoder struct {
	dm                                *devModel
	b                                 *Backend
	rows, capacity                    int
	kc, vc                            []Buf
	ids, pos, seq, slot, lp, u        Buf
	x, tmp, n1, q, k, v, att          Buf
	f1, f2, act, mean, rstd, h, logit Buf
	lora                              map[*model.Linear][3]Buf // A, B in bf16; x·Aᵀ
	temperature                       float32
	graph                             *Graph
	noGraph                           bool // the driver cannot capture: plain launches
	bufs                              []Buf
}

// free releases the step's buffers and graph (the cache is the caller's).
func (d *decoder) free() {
	d.graph.Close()
	for _, x := range d.bufs {
		d.b.Free(x)
	}
}

func newDecoder(t testing.TB, dm *devModel, kc, vc []Buf, rows, capacity int, temperature float32) *decoder {
	b, c := dm.b, &dm.m.Config
	d := &decoder{dm: dm, b: b, rows: rows, capacity: capacity, kc: kc, vc: vc, temperature: temperature, lora: map[*model.Linear][3]Buf{}}
	al := func(dt DType, n int) Buf {
		x, err := b.Alloc(dt, n)
		must(t, err)
		d.bufs = append(d.bufs, x)
		return x
	}
	D, F, qd, kd := c.Dim, c.Hidden, c.QDim(), c.KVDim()
	d.ids, d.pos, d.slot, d.lp, d.u = al(I32, rows), al(I32, rows), al(I64, rows), al(F32, rows), al(F64, rows)
	d.x, d.tmp, d.n1 = al(F32, rows*D), al(BF16, rows*D), al(BF16, rows*D)
	d.q, d.k, d.v, d.att = al(BF16, rows*qd), al(BF16, rows*kd), al(BF16, rows*kd), al(BF16, rows*qd)
	d.f1, d.f2, d.act, d.mean, d.rstd = al(BF16, rows*F), al(BF16, rows*F), al(BF16, rows*F), al(F32, rows), al(F32, rows)
	d.h, d.logit = al(BF16, rows*D), al(F32, rows*c.Vocab)
	d.seq = al(I32, rows) // row r decodes sequence r (cache slot r)
	seq := make([]int32, rows)
	for r := range seq {
		seq[r] = int32(r)
	}
	must(t, b.Upload(d.seq, seq))
	if dm.adaptersOn {
		for l, ad := range dm.adapters {
			a16, b16, xa := al(BF16, ad.a.Len()), al(BF16, ad.b.Len()), al(BF16, rows*ad.r)
			must(t, b.Cast(a16, ad.a))
			must(t, b.Cast(b16, ad.b))
			d.lora[l] = [3]Buf{a16, b16, xa}
		}
	}
	return d
}

func (d *decoder) linear(t testing.TB, l *model.Linear, y, x Buf) {
	b, rows := d.b, d.rows
	if q := d.dm.q4[l]; q != nil {
		must(t, b.Q4MulT(y, x, q, rows))
	} else {
		must(t, b.MatmulForward(y, x, d.dm.weight[l], Buf{}, rows, l.In, l.Out))
	}
	if bs, ok := d.dm.bias[l]; ok {
		must(t, b.BiasForward(y, bs, rows, l.Out))
	}
	if ad, ok := d.lora[l]; ok {
		r, s := d.dm.adapters[l].r, d.dm.adapters[l].scale
		must(t, b.GEMM(false, true, rows, r, l.In, 1, x, l.In, ad[0], l.In, 0, ad[2], r))
		must(t, b.GEMM(false, true, rows, l.Out, r, s, ad[2], r, ad[1], r, 1, y, l.Out))
	}
}

// step queues one decode step: ids at pos → the cache, then tokens sampled into ids.
func (d *decoder) step(t testing.TB) {
	b, dm, c, rows := d.b, d.dm, &d.dm.m.Config, d.rows
	D, F, kd := c.Dim, c.Hidden, c.KVDim()
	a := Attention{Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Window: c.Window}
	must(t, b.EmbeddingForward(d.x, d.ids, Buf{}, dm.embed, Buf{}, D))
	for li := range dm.m.Layers {
		L := &dm.m.Layers[li]
		dm.norm(t, L.Norm1, d.n1, d.mean, d.rstd, d.x, rows)
		d.linear(t, L.Q, d.q, d.n1)
		d.linear(t, L.K, d.k, d.n1)
		d.linear(t, L.V, d.v, d.n1)
		must(t, b.RoPEForward(d.q, d.pos, c.Heads, dm.rope))
		must(t, b.RoPEForward(d.k, d.pos, c.KVHeads, dm.rope))
		must(t, b.CopyRowsIdx(d.kc[li], d.slot, kd, d.k, Buf{}, kd, rows, kd))
		must(t, b.CopyRowsIdx(d.vc[li], d.slot, kd, d.v, Buf{}, kd, rows, kd))
		must(t, b.AttentionRows(d.att, d.q, d.kc[li], d.vc[li], d.seq, d.pos, rows, a, d.capacity*kd))
		d.linear(t, L.O, d.tmp, d.att)
		must(t, b.ResidualForward(d.x, d.x, d.tmp, rows*D))
		dm.norm(t, L.Norm2, d.n1, d.mean, d.rstd, d.x, rows)
		d.linear(t, L.Gate, d.f1, d.n1)
		d.linear(t, L.Up, d.f2, d.n1)
		must(t, b.SwiGLUForward(d.act, d.f1, d.f2, rows*F))
		d.linear(t, L.Down, d.tmp, d.act)
		must(t, b.ResidualForward(d.x, d.x, d.tmp, rows*D))
	}
	dm.norm(t, dm.m.Final, d.h, d.mean, d.rstd, d.x, rows)
	must(t, b.Logits(d.logit, d.h, dm.head, rows, D, c.Vocab))
	must(t, b.SampleInto(d.ids, d.lp, d.logit, d.u, rows, c.Vocab, d.temperature, 0, 0, Penalties{}))
}

// run does one step for sequences at lens (each feeding the token in ids) and returns the
// sampled tokens; with graph set, the step is captured once and replayed after.
func (d *decoder) run(t testing.TB, lens []int, uniforms []float64, graph bool) []int32 {
	b := d.b
	pos, slot := make([]int32, d.rows), make([]int64, d.rows)
	for i, n := range lens {
		pos[i], slot[i] = int32(n), int64(i*d.capacity+n)
	}
	must(t, b.Upload(d.pos, pos))
	must(t, b.Upload(d.slot, slot))
	must(t, b.Upload(d.u, uniforms))
	graph = graph && !d.noGraph
	switch {
	case graph && d.graph == nil:
		g, err := b.d.Capture(func() error { d.step(t); return nil })
		if err != nil {
			t.Logf("graph capture unavailable (%v): plain launches", err)
			d.noGraph = true
			d.step(t)
			break
		}
		d.graph = g
		g.Launch()
	case graph:
		d.graph.Launch()
	default:
		d.step(t)
	}
	tok := make([]int32, d.rows)
	must(t, b.Download(tok, d.ids))
	return tok
}

// TestDecodeStepFixedBuffers: greedy decoding with the capturable step (device-resident
// metadata, tokens fed back on the device) gives the CPU's tokens.
func TestDecodeStepFixedBuffers(t *testing.T) {
	b := testBackend(t)
	dir, err := builtin.Dir()
	must(t, err)
	m, err := model.Load(dir)
	must(t, err)
	_, _, err = m.Quantize(quant.Default())
	must(t, err)
	prompts := textSeqs(t, dir)
	for i := range prompts {
		prompts[i] = prompts[i][:14] // one length: one prefill span each
	}
	const steps = 8
	want, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: steps, NoEOS: true})
	must(t, err)
	dm := newDevModel(t, b, m)
	c := &m.Config
	capacity := 14 + steps
	var kc, vc []Buf
	for range m.Layers {
		k, _ := b.Alloc(BF16, len(prompts)*capacity*c.KVDim())
		v, _ := b.Alloc(BF16, len(prompts)*capacity*c.KVDim())
		kc, vc = append(kc, k), append(vc, v)
	}
	lens := make([]int, len(prompts))
	logits := dm.forwardCached(t, kc, vc, capacity, prompts, lens)
	first, _, err := b.Sample(logits, make([]float64, len(prompts)), len(prompts), c.Vocab, 0, 0, 0)
	must(t, err)
	d := newDecoder(t, dm, kc, vc, len(prompts), capacity, 0)
	must(t, b.Upload(d.ids, first))
	got := make([][]int, len(prompts))
	for i, tk := range first {
		got[i] = append(got[i], int(tk))
	}
	for s := 1; s < steps; s++ {
		tok := d.run(t, lens, make([]float64, len(prompts)), true)
		for i, tk := range tok {
			got[i] = append(got[i], int(tk))
			lens[i]++
		}
	}
	if d.graph != nil {
		t.Logf("decode steps 2…%d replayed one captured CUDA graph", steps)
	}
	d.free()
	same := 0
	for i := range prompts {
		for j := range got[i] {
			if got[i][j] != want.Tokens[i][j] {
				break
			}
			same++
		}
	}
	t.Logf("%d of %d tokens equal to the CPU's greedy generation before any divergence", same, len(prompts)*steps)
	if same < len(prompts)*steps*9/10 {
		t.Errorf("device %v\ncpu    %v", got, want.Tokens)
	}
}
