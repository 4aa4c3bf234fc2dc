package cpu

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/internal/testref"
)

// tensor is one named input of an op case.
type tensor struct {
	Shape []int     `json:"shape"`
	Data  []float32 `json:"data"`
}

// opCase is one op with random inputs: forward gives the output, backward the gradients
// of Σ dout·out with respect to the inputs named in diff.
type opCase struct {
	op       string
	inputs   map[string]*tensor
	attrs    map[string]any
	diff     []string
	outSize  int
	forward  func(in map[string][]float32) []float32
	backward func(in map[string][]float32, dout []float32) map[string][]float32
}

func randTensor(rng *rand.Rand, scale float64, shape ...int) *tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	t := &tensor{Shape: shape, Data: make([]float32, n)}
	for i := range t.Data {
		t.Data[i] = float32(rng.NormFloat64() * scale)
	}
	return t
}

func values(in map[string]*tensor) map[string][]float32 {
	out := map[string][]float32{}
	for k, t := range in {
		out[k] = t.Data
	}
	return out
}

func int32s(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

// opCases builds every op's case with a fixed seed.
func opCases() []opCase {
	rng := rand.New(rand.NewPCG(42, 1))
	var cases []opCase
	const R, I, O = 11, 24, 13

	cases = append(cases, opCase{op: "matmul", diff: []string{"x", "w", "b"}, outSize: R * O,
		inputs: map[string]*tensor{"x": randTensor(rng, 1, R, I), "w": randTensor(rng, 0.5, O, I), "b": randTensor(rng, 1, O)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, R*O)
			MatmulForward(out, in["x"], in["w"], in["b"], R, I, O)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"x": make([]float32, R*I), "w": make([]float32, O*I), "b": make([]float32, O)}
			MatmulBackward(g["x"], g["w"], g["b"], dout, in["x"], in["w"], R, I, O)
			return g
		}})

	const D = 20
	ln := randTensor(rng, 2, R, D)
	for i := range ln.Data {
		ln.Data[i] += 0.5 // a non-zero mean
	}
	lnw := randTensor(rng, 0.3, D)
	for i := range lnw.Data {
		lnw.Data[i] += 1
	}
	cases = append(cases, opCase{op: "layernorm", diff: []string{"x", "w", "b"}, outSize: R * D, attrs: map[string]any{"eps": 1e-5},
		inputs: map[string]*tensor{"x": ln, "w": lnw, "b": randTensor(rng, 1, D)},
		forward: func(in map[string][]float32) []float32 {
			out, mean, rstd := make([]float32, R*D), make([]float32, R), make([]float32, R)
			LayerNormForward(out, mean, rstd, in["x"], in["w"], in["b"], R, D, 1e-5)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			out, mean, rstd := make([]float32, R*D), make([]float32, R), make([]float32, R)
			LayerNormForward(out, mean, rstd, in["x"], in["w"], in["b"], R, D, 1e-5)
			g := map[string][]float32{"x": make([]float32, R*D), "w": make([]float32, D), "b": make([]float32, D)}
			LayerNormBackward(g["x"], g["w"], g["b"], dout, in["x"], in["w"], mean, rstd, R, D)
			return g
		}})

	cases = append(cases, opCase{op: "rmsnorm", diff: []string{"x", "w"}, outSize: R * D, attrs: map[string]any{"eps": 1e-6},
		inputs: map[string]*tensor{"x": randTensor(rng, 1.5, R, D), "w": lnw},
		forward: func(in map[string][]float32) []float32 {
			out, rstd := make([]float32, R*D), make([]float32, R)
			RMSNormForward(out, rstd, in["x"], in["w"], R, D, 1e-6, 0)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			out, rstd := make([]float32, R*D), make([]float32, R)
			RMSNormForward(out, rstd, in["x"], in["w"], R, D, 1e-6, 0)
			g := map[string][]float32{"x": make([]float32, R*D), "w": make([]float32, D)}
			RMSNormBackward(g["x"], g["w"], dout, in["x"], in["w"], rstd, R, D, 0)
			return g
		}})

	const Vocab, P = 9, 7
	ids, pos := make([]int, R), make([]int, R)
	for i := range ids {
		ids[i], pos[i] = rng.IntN(Vocab), rng.IntN(P) // repeated ids and positions
	}
	cases = append(cases, opCase{op: "embedding", diff: []string{"wte", "wpe"}, outSize: R * D,
		attrs:  map[string]any{"ids": ids, "pos": pos},
		inputs: map[string]*tensor{"wte": randTensor(rng, 1, Vocab, D), "wpe": randTensor(rng, 1, P, D)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, R*D)
			EmbeddingForward(out, int32s(ids), int32s(pos), in["wte"], in["wpe"], D)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"wte": make([]float32, Vocab*D), "wpe": make([]float32, P*D)}
			EmbeddingBackward(g["wte"], g["wpe"], dout, int32s(ids), int32s(pos), D)
			return g
		}})

	const H, HD = 3, 8
	inv := []float64{1, 0.3, 0.05, 0.001}
	rpos := make([]int, R)
	for i := range rpos {
		rpos[i] = rng.IntN(40)
	}
	table := NewRoPETable(inv, 40)
	cases = append(cases, opCase{op: "rope", diff: []string{"x"}, outSize: R * H * HD,
		attrs:  map[string]any{"inv_freq": inv, "pos": rpos},
		inputs: map[string]*tensor{"x": randTensor(rng, 1, R, H*HD)},
		forward: func(in map[string][]float32) []float32 {
			out := append([]float32(nil), in["x"]...)
			RoPEForward(out, int32s(rpos), H, table)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			dx := append([]float32(nil), dout...)
			RoPEBackward(dx, int32s(rpos), H, table)
			return map[string][]float32{"x": dx}
		}})

	for _, window := range []int{0, 4} {
		att := Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: float32(1 / math.Sqrt(8)), Window: window}
		spans := [][2]int{{0, 9}, {9, 1}, {10, 12}} // (first row, rows)
		rows := 22
		qw, kw := att.Heads*att.HeadDim, att.KVHeads*att.HeadDim
		mk := func(in map[string][]float32, dk, dv []float32) []Span {
			var sp []Span
			for _, s := range spans {
				x := Span{Row: s[0], N: s[1], K: in["k"][s[0]*kw : (s[0]+s[1])*kw], V: in["v"][s[0]*kw : (s[0]+s[1])*kw]}
				if dk != nil {
					x.DK, x.DV = dk[s[0]*kw:(s[0]+s[1])*kw], dv[s[0]*kw:(s[0]+s[1])*kw]
				}
				sp = append(sp, x)
			}
			return sp
		}
		cases = append(cases, opCase{op: "attention", diff: []string{"q", "k", "v"}, outSize: rows * qw,
			attrs: map[string]any{"heads": att.Heads, "kv_heads": att.KVHeads, "head_dim": att.HeadDim, "window": window, "spans": spans},
			inputs: map[string]*tensor{"q": randTensor(rng, 1, rows, qw), "k": randTensor(rng, 1, rows, kw),
				"v": randTensor(rng, 1, rows, kw)},
			forward: func(in map[string][]float32) []float32 {
				out := make([]float32, rows*qw)
				sp := mk(in, nil, nil)
				AttentionForward(out, make([]float32, ProbSize(att, sp)), in["q"], sp, att)
				return out
			},
			backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
				g := map[string][]float32{"q": make([]float32, rows*qw), "k": make([]float32, rows*kw), "v": make([]float32, rows*kw)}
				sp := mk(in, g["k"], g["v"])
				probs := make([]float32, ProbSize(att, sp))
				AttentionForward(make([]float32, rows*qw), probs, in["q"], sp, att)
				AttentionBackward(g["q"], dout, probs, in["q"], sp, att)
				return g
			}})
	}

	const N = 150
	cases = append(cases, opCase{op: "gelu", diff: []string{"x"}, outSize: N,
		inputs: map[string]*tensor{"x": randTensor(rng, 2.5, N)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, N)
			GELUForward(out, in["x"], N)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"x": make([]float32, N)}
			GELUBackward(g["x"], dout, in["x"], N)
			return g
		}})
	cases = append(cases, opCase{op: "swiglu", diff: []string{"gate", "up"}, outSize: N,
		inputs: map[string]*tensor{"gate": randTensor(rng, 3, N), "up": randTensor(rng, 1, N)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, N)
			SwiGLUForward(out, in["gate"], in["up"], N)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"gate": make([]float32, N), "up": make([]float32, N)}
			SwiGLUBackward(g["gate"], g["up"], dout, in["gate"], in["up"], N)
			return g
		}})
	cases = append(cases, opCase{op: "residual", diff: []string{"a", "b"}, outSize: N,
		inputs: map[string]*tensor{"a": randTensor(rng, 1, N), "b": randTensor(rng, 1, N)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, N)
			ResidualForward(out, in["a"], in["b"], N)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"a": make([]float32, N), "b": make([]float32, N)}
			ResidualBackward(g["a"], g["b"], dout, N)
			return g
		}})

	const LR, LV = 6, 37
	targets := make([]int, LR)
	for i := range targets {
		targets[i] = rng.IntN(LV)
	}
	invT := float32(1 / 0.7)
	cases = append(cases, opCase{op: "logprob", diff: []string{"logits"}, outSize: LR,
		attrs:  map[string]any{"targets": targets, "inv_temp": invT},
		inputs: map[string]*tensor{"logits": randTensor(rng, 3, LR, LV)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, LR)
			LogProbForward(out, nil, in["logits"], int32s(targets), LR, LV, invT)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"logits": make([]float32, LR*LV)}
			LogProbBackward(g["logits"], dout, nil, in["logits"], int32s(targets), LR, LV, invT)
			return g
		}})
	// entropy has no backward here (it is only reported); its forward is checked.
	cases = append(cases, opCase{op: "entropy", outSize: LR,
		attrs:  map[string]any{"targets": targets, "inv_temp": invT},
		inputs: map[string]*tensor{"logits": randTensor(rng, 3, LR, LV)},
		forward: func(in map[string][]float32) []float32 {
			lp, ent := make([]float32, LR), make([]float32, LR)
			LogProbForward(lp, ent, in["logits"], int32s(targets), LR, LV, invT)
			return ent
		}})
	return cases
}

// relMax is max|got − want| / max|want|.
func relMax(got []float32, want []float64) float64 {
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
	}
	if s == 0 {
		return d
	}
	return d / s
}

// TestOpsMatchPyTorch: every op's forward (1e-5) and gradients (1e-3, relative to the
// largest entry) against PyTorch autograd.
func TestOpsMatchPyTorch(t *testing.T) {
	py := testref.Python(t)
	cases := append(opCases(), familyOpCases()...)
	douts := make([][]float32, len(cases))
	type pyCase struct {
		Op     string             `json:"op"`
		Inputs map[string]*tensor `json:"inputs"`
		Attrs  map[string]any     `json:"attrs"`
		Dout   []float32          `json:"dout"`
		Diff   []string           `json:"diff"`
	}
	var req []pyCase
	rng := rand.New(rand.NewPCG(7, 7))
	for i, c := range cases {
		douts[i] = randTensor(rng, 1, c.outSize).Data
		diff := c.diff
		if diff == nil {
			diff = []string{}
		}
		req = append(req, pyCase{Op: c.op, Inputs: c.inputs, Attrs: c.attrs, Dout: douts[i], Diff: diff})
	}
	body, _ := json.Marshal(map[string]any{"cases": req})
	cmd := exec.Command(py, filepath.Join("testdata", "ops_reference.py"))
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ops_reference.py: %v\n%s", err, stderr.String())
	}
	var resp struct {
		Results []struct {
			Out   []float64            `json:"out"`
			Grads map[string][]float64 `json:"grads"`
		}
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		ref := resp.Results[i]
		in := values(c.inputs)
		if e := relMax(c.forward(in), ref.Out); e > 1e-5 {
			t.Errorf("%s: forward differs by %.2g relative", c.op, e)
		}
		if c.backward == nil {
			continue
		}
		g := c.backward(in, douts[i])
		for _, name := range c.diff {
			e := relMax(g[name], ref.Grads[name])
			if e > 1e-3 {
				t.Errorf("%s: gradient of %s differs by %.2g relative (tolerance 1e-3)", c.op, name, e)
			} else {
				t.Logf("%s: d%s within %.2g", c.op, name, e)
			}
		}
	}
}

// TestOpsFiniteDifferences: every op's backward against central differences of
// Σ dout·forward (summed in float64), at sampled coordinates of each input.
func TestOpsFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, c := range append(opCases(), familyOpCases()...) {
		if c.backward == nil {
			continue
		}
		dout := randTensor(rng, 1, c.outSize).Data
		in := values(c.inputs)
		g := c.backward(in, dout)
		loss := func() float64 {
			var s float64
			for i, v := range c.forward(in) {
				s += float64(v) * float64(dout[i])
			}
			return s
		}
		for _, name := range c.diff {
			x := in[name]
			var scale float64
			for _, v := range g[name] {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			worst := 0.0
			for k := 0; k < 16; k++ {
				i := rng.IntN(len(x))
				const eps = 1e-2
				orig := x[i]
				x[i] = orig + eps
				lp := loss()
				x[i] = orig - eps
				lm := loss()
				x[i] = orig
				fd := (lp - lm) / (2 * eps)
				worst = math.Max(worst, math.Abs(fd-float64(g[name][i]))/scale)
			}
			if worst > 2e-3 {
				t.Errorf("%s: d%s differs from finite differences by %.2g (relative to its largest entry)", c.op, name, worst)
			}
		}
	}
}
