package backendtest

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
)

// broken is the CPU backend with one bug, for checking that the suite sees it.
type broken struct {
	*cpu.Backend
	bug string
}

func (b broken) GEMM(ta, tb bool, m, n, k int, alpha float32, a backend.Buf, lda int, x backend.Buf, ldb int, beta float32, c backend.Buf, ldc int) error {
	if b.bug == "GEMM reads C when beta is 0" && beta == 0 {
		beta = 1e-30
	}
	return b.Backend.GEMM(ta, tb, m, n, k, alpha, a, lda, x, ldb, beta, c, ldc)
}

func (b broken) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd backend.Buf, rows, dim int, offset float32) error {
	if b.bug == "RMSNormBackward overwrites" {
		clear(dinp.F32()[:rows*dim])
	}
	return b.Backend.RMSNormBackward(dinp, dweight, dout, inp, weight, rstd, rows, dim, offset)
}

func (b broken) AttentionForward(out, probs, q backend.Buf, spans []backend.Span, a backend.Attention) error {
	if b.bug == "AttentionForward ignores the window" {
		a.Window = 0
	}
	return b.Backend.AttentionForward(out, probs, q, spans, a)
}

func (b broken) Sample(logits backend.Buf, u []float64, rows, vocab int, temp float32, k int, p float32) ([]int32, []float32, error) {
	if b.bug == "Sample takes another row's uniform" {
		r := make([]float64, len(u))
		for i := range u {
			r[i] = u[(i+1)%len(u)]
		}
		u = r
	}
	return b.Backend.Sample(logits, u, rows, vocab, temp, k, p)
}

func (b broken) Q4Dequantize(out backend.Buf, w *backend.Q4) error {
	err := b.Backend.Q4Dequantize(out, w)
	if b.bug == "Q4Dequantize one ulp off" {
		o := out.F32()
		o[5] = math.Nextafter32(o[5], 2)
	}
	return err
}

func (b broken) GELUForward(out, inp backend.Buf, n int) error {
	err := b.Backend.GELUForward(out, inp, n)
	if b.bug == "GELUForward writes its input" {
		copy(inp.F32(), out.F32())
	}
	return err
}

func (b broken) HeadLogProbsBackward(dh, h, head, dlogp, dentropy, targets backend.Buf, rows, dim, vocab int, invT, softcap float32) error {
	if b.bug == "HeadLogProbsBackward drops the last row" {
		d := append([]float32(nil), dlogp.F32()[:rows]...)
		d[rows-1] = 0
		dlogp = backend.HostF32(d)
	}
	return b.Backend.HeadLogProbsBackward(dh, h, head, dlogp, dentropy, targets, rows, dim, vocab, invT, softcap)
}

func (b broken) CopyRows(dst backend.Buf, dstRows []int64, ldd int, src backend.Buf, srcRows []int64, lds int, n, cols int) error {
	if b.bug == "CopyRows ignores the source rows" {
		srcRows = nil
	}
	return b.Backend.CopyRows(dst, dstRows, ldd, src, srcRows, lds, n, cols)
}

// runGroup runs one group on b, returning the errors it found.
func runGroup(t *testing.T, b backend.Backend, name string) []string {
	var msgs []string
	s := &suite{b: b, ref: cpu.New(), tol: F32(), small: true, passed: map[string]int{}, failed: map[string]int{}}
	e := &env{suite: s, t: t, rng: rand.New(rand.NewPCG(1, 2)), sink: func(m string) { msgs = append(msgs, m) }}
	for _, g := range groups {
		if g.name == name {
			g.run(e)
			return msgs
		}
	}
	t.Fatalf("no group %q", name)
	return nil
}

// TestSuiteSeesBugs: each bug is reported by the group that covers its op.
func TestSuiteSeesBugs(t *testing.T) {
	for _, c := range []struct{ bug, group, op string }{
		{"GEMM reads C when beta is 0", "gemm", "GEMM"},
		{"RMSNormBackward overwrites", "norms", "RMSNormBackward"},
		{"AttentionForward ignores the window", "attention", "AttentionForward"},
		{"Sample takes another row's uniform", "sample", "SampleInto"}, // seen as SampleInto disagreeing
		{"Q4Dequantize one ulp off", "q4", "Q4Dequantize"},
		{"GELUForward writes its input", "elementwise", "GELUForward"},
		{"HeadLogProbsBackward drops the last row", "head", "HeadLogProbsBackward"},
		{"CopyRows ignores the source rows", "memory", "CopyRows"},
	} {
		msgs := runGroup(t, broken{cpu.New(), c.bug}, c.group)
		found := false
		for _, m := range msgs {
			found = found || strings.HasPrefix(m, c.op+" ")
		}
		if !found {
			t.Errorf("%s: not reported (%d other errors: %q)", c.bug, len(msgs), msgs)
		}
	}
	if msgs := runGroup(t, cpu.New(), "gemm"); len(msgs) > 0 {
		t.Errorf("the CPU against itself: %q", msgs)
	}
}

// TestFiniteDifferencesSeeBugs: a backward that is 10% off, or wrong on its last row only,
// fails the finite-difference check; the right one passes.
func TestFiniteDifferencesSeeBugs(t *testing.T) {
	ref := cpu.New()
	rows, dim := 5, 40
	rng := rand.New(rand.NewPCG(3, 4))
	x, w := make([]float32, rows*dim), make([]float32, dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(1 + 0.3*rng.NormFloat64())
	}
	for _, bug := range []string{"", "scaled", "last row"} {
		var msgs []string
		s := &suite{b: ref, ref: ref, tol: F32(), passed: map[string]int{}, failed: map[string]int{}}
		e := &env{suite: s, t: t, rng: rand.New(rand.NewPCG(5, 6)), sink: func(m string) { msgs = append(msgs, m) }}
		e.fd("RMSNormBackward", bug, fdCase{
			inputs: [][]float32{x}, diff: []int{0},
			forward: func(xs [][]float32) []float32 {
				out, r := zeros(rows*dim), zeros(rows)
				ref.RMSNormForward(hf(out), hf(r), hf(xs[0]), hf(w), rows, dim, 1e-5, 0)
				return out
			},
			backward: func(xs [][]float32, g []float32) [][]float32 {
				out, r := zeros(rows*dim), zeros(rows)
				ref.RMSNormForward(hf(out), hf(r), hf(xs[0]), hf(w), rows, dim, 1e-5, 0)
				dx := zeros(rows * dim)
				ref.RMSNormBackward(hf(dx), backend.Buf{}, hf(g), hf(xs[0]), hf(w), hf(r), rows, dim, 0)
				switch bug {
				case "scaled":
					for i := range dx {
						dx[i] *= 1.1
					}
				case "last row":
					clear(dx[(rows-1)*dim:])
				}
				return [][]float32{dx}
			},
		})
		if (bug == "") != (len(msgs) == 0) {
			t.Errorf("backward bug %q: errors %q", bug, msgs)
		}
	}
}
