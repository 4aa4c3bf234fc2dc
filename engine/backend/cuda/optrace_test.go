package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/quant"
)

// The whole-model checks compare only the ends of a pass (log-probs, LoRA gradients); where
// they differ, this finds which op grows the difference: a backend wrapped so that it keeps
// the output of every 4-bit linear, norm and attention of a pass, run on the CPU and on this
// backend, compared op by op; and, on this backend, the fused 4-bit linear and the norms'
// backward run again on the CPU from the device's own inputs (their local error).

// opTrace is b recording outputs (and, with local, the local error of two ops).
type opTrace struct {
	backend.Backend
	names  []string
	outs   [][]float32
	local  bool
	worstQ float64 // the largest relative error of Q4Linear against the CPU's on the same inputs
	worstN float64 // of RMSNormBackward
}

func (tr *opTrace) get(x backend.Buf, n int) []float32 {
	h := make([]float32, n)
	if err := tr.Backend.Download(h, x.Slice(0, n)); err != nil {
		panic(err)
	}
	return h
}

func (tr *opTrace) keep(name string, x backend.Buf, n int) {
	tr.names, tr.outs = append(tr.names, name), append(tr.outs, tr.get(x, n))
}

// host places values on a fresh CPU backend (the absent Buf for nil).
func host(c *cpu.Backend, x []float32) backend.Buf {
	if x == nil {
		return backend.Buf{}
	}
	b, err := c.Place(x, backend.F32)
	if err != nil {
		panic(err)
	}
	return b
}

func (tr *opTrace) Q4Linear(y, res, x backend.Buf, w *backend.Q4, bias, xa backend.Buf, ldxa int, lb backend.Buf, r int, scale float32, rows int) error {
	var hx, hres, hb, hxa, hlb []float32
	if tr.local {
		hx = tr.get(x, rows*w.Cols)
		if !res.Nil() {
			hres = tr.get(res, rows*w.Rows)
		}
		if !bias.Nil() {
			hb = tr.get(bias, w.Rows)
		}
		if !xa.Nil() {
			hxa, hlb = tr.get(xa, (rows-1)*ldxa+r), tr.get(lb, w.Rows*r)
		}
	}
	if err := tr.Backend.Q4Linear(y, res, x, w, bias, xa, ldxa, lb, r, scale, rows); err != nil {
		return err
	}
	tr.keep(fmt.Sprintf("Q4Linear %d×%d", rows, w.Rows), y, rows*w.Rows)
	if tr.local {
		c := cpu.New()
		cw, err := c.UploadQ4(w.W)
		if err != nil {
			return err
		}
		want := make([]float32, rows*w.Rows)
		if err := c.Q4Linear(host(c, want), host(c, hres), host(c, hx), cw, host(c, hb), host(c, hxa), ldxa, host(c, hlb), r, scale, rows); err != nil {
			return err
		}
		tr.worstQ = max(tr.worstQ, relL2(tr.outs[len(tr.outs)-1], want))
	}
	return nil
}

func (tr *opTrace) RMSNormForward(out, rstd, inp, weight backend.Buf, rows, dim int, eps float64, offset float32) error {
	err := tr.Backend.RMSNormForward(out, rstd, inp, weight, rows, dim, eps, offset)
	tr.keep(fmt.Sprintf("RMSNorm %d×%d", rows, dim), out, rows*dim)
	return err
}

func (tr *opTrace) AttentionForward(out, probs, q backend.Buf, spans []backend.Span, a backend.Attention) error {
	err := tr.Backend.AttentionForward(out, probs, q, spans, a)
	tr.keep("Attention", out, spanRows(spans)*a.Heads*a.HeadDim)
	return err
}

func (tr *opTrace) AttentionBackward(dq, dout, probs, q backend.Buf, spans []backend.Span, a backend.Attention) error {
	err := tr.Backend.AttentionBackward(dq, dout, probs, q, spans, a)
	tr.keep("AttentionBackward dq", dq, spanRows(spans)*a.Heads*a.HeadDim)
	return err
}

func (tr *opTrace) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd backend.Buf, rows, dim int, offset float32) error {
	n := rows * dim
	var before, hd, hi, hw, hr []float32
	if tr.local {
		before, hd, hi, hw, hr = tr.get(dinp, n), tr.get(dout, n), tr.get(inp, n), tr.get(weight, dim), tr.get(rstd, rows)
	}
	if err := tr.Backend.RMSNormBackward(dinp, dweight, dout, inp, weight, rstd, rows, dim, offset); err != nil {
		return err
	}
	tr.keep(fmt.Sprintf("RMSNormBackward %d×%d", rows, dim), dinp, n)
	if tr.local {
		c := cpu.New()
		want := slices.Clone(before)
		if err := c.RMSNormBackward(host(c, want), backend.Buf{}, host(c, hd), host(c, hi), host(c, hw), host(c, hr), rows, dim, offset); err != nil {
			return err
		}
		tr.worstN = max(tr.worstN, relL2(tr.outs[len(tr.outs)-1], want))
	}
	return nil
}

func (tr *opTrace) LinearsBackward(dx backend.Buf, acc bool, x, xa backend.Buf, ldxa int, ls []backend.LinearGrad, rows int) error {
	err := tr.Backend.LinearsBackward(dx, acc, x, xa, ldxa, ls, rows)
	tr.keep(fmt.Sprintf("LinearsBackward dx (%d linears)", len(ls)), dx, rows*ls[0].W.Cols)
	return err
}

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i] - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / max(den, 1e-30))
}

// TestOpTraceGemma3NF4 traces a training forward and backward of gemma3-local, NF4, seed 12
// (the seed whose layer-3 q gradients are 18% off the CPU's, see check): the fused 4-bit
// linears and the norms' backward each within 0.5% of the CPU's op on the device's own
// inputs (a bf16 rounding of the output is 0.2%), whatever the difference at their inputs.
// -v prints the op-by-op table.
func TestOpTraceGemma3NF4(t *testing.T) {
	dev := testBackend(t)
	c := familyConfigs["gemma3-local"]
	m := familyModel(t, c, 12)
	_, _, err := m.Quantize(quant.Default())
	must(t, err)
	rng := rand.New(rand.NewPCG(uint64(len("gemma3-local")), 1))
	var seqs [][]int
	for _, n := range []int{1, 9, 23, 40} {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(c.Vocab)
		}
		seqs = append(seqs, s)
	}
	pass := func(b backend.Backend) {
		must(t, m.Use(b))
		attach(t, m, b, 7)
		trainPass(t, m, seqs)
	}
	want, got := &opTrace{Backend: cpu.New()}, &opTrace{Backend: dev, local: true}
	pass(want)
	pass(got)
	if !slices.Equal(want.names, got.names) {
		t.Fatalf("the passes ran different ops:\n%v\n%v", want.names, got.names)
	}
	var b strings.Builder
	for i := range want.names {
		fmt.Fprintf(&b, "%3d %-32s %.4f\n", i, want.names[i], relL2(got.outs[i], want.outs[i]))
	}
	t.Logf("each op's output against the CPU's (relative L2), %d ops:\n%s", len(want.names), b.String())
	t.Logf("on the device's own inputs: Q4Linear within %.4f, RMSNormBackward within %.4f of the CPU's op", got.worstQ, got.worstN)
	if got.worstQ > 0.005 || got.worstN > 0.005 {
		t.Errorf("an op itself differs from the CPU's on the same inputs: Q4Linear %.4f, RMSNormBackward %.4f (want 0.005 at most)", got.worstQ, got.worstN)
	}
}
