package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionScratchIsTheEstimates: the memory attention takes beside its operands in a
// training pass's forward and backward over a micro-batch (sequences from position 0, as
// the model's passes run them), read from the allocator's peak, is what EstimateMemory
// counts for it: the ragged kernels' index table and the backward's statistics, no [T×T].
func TestAttentionScratchIsTheEstimates(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const heads, kvHeads, hd = 4, 2, 16
	for _, c := range []struct{ seqs, T int }{{3, 40}, {1, 130}} {
		a := Attention{Heads: heads, KVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
		rows, qw, kw := c.seqs*c.T, heads*hd, kvHeads*hd
		bufs := map[string]Buf{}
		for name, n := range map[string]int{"q": rows * qw, "out": rows * qw, "dq": rows * qw, "dout": rows * qw,
			"k": rows * kw, "v": rows * kw, "dk": rows * kw, "dv": rows * kw} {
			x, _ := upBF16(t, b, randn(rng, n, 0.5))
			bufs[name] = x
			defer b.Free(x)
		}
		spans := make([]Span, c.seqs)
		for i := range spans {
			at := func(x Buf) Buf { return x.Slice(i*c.T*kw, c.T*kw) }
			spans[i] = Span{Row: i * c.T, N: c.T, K: at(bufs["k"]), V: at(bufs["v"]), DK: at(bufs["dk"]), DV: at(bufs["dv"])}
		}
		// no table kept from an earlier pass: the peak below is this pass's own
		if t0 := b.d.ragged.buf; !t0.Nil() {
			must(t, b.Free(t0))
			b.d.ragged.buf, b.d.ragged.host = Buf{}, nil
		}
		must(t, b.Sync())
		m := &b.d.mem
		m.mu.Lock()
		before := m.inUse
		m.peak = before
		m.mu.Unlock()
		must(t, b.AttentionForward(bufs["out"], Buf{}, bufs["q"], spans, a))
		must(t, b.AttentionBackward(bufs["dq"], bufs["dout"], Buf{}, bufs["q"], spans, a))
		must(t, b.Sync())
		m.mu.Lock()
		got := m.peak - before
		m.mu.Unlock()
		table, transient := attentionScratch(RunShape{Heads: heads, QDim: qw, KVDim: kw, Seqs: c.seqs, SeqLen: c.T})
		want := int64(sizeClass(int(table)) + sizeClass(int(transient)))
		old := int64(heads * c.T * c.T * (4 + 4 + 2 + 2)) // the [T×T] term the estimate had
		t.Logf("%d sequences of %d: attention's scratch %d bytes at its peak, estimated %d (table %d, statistics %d); a [T×T] term would say %d",
			c.seqs, c.T, got, want, table, transient, old)
		if got != want {
			t.Errorf("%d sequences of %d: attention took %d bytes beside its operands, the estimate counts %d", c.seqs, c.T, got, want)
		}
	}
}
