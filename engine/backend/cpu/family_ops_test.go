package cpu

import (
	"math"
	"math/rand/v2"

	"rlhfstation/engine/backend"
)

// familyOpCases are the ops the qwen3, gemma and phi3 families add: (1 + w) RMSNorm,
// GeGLU, soft-capping (alone, in attention, in the chunked LM head) and partial rotary.
func familyOpCases() []opCase {
	rng := rand.New(rand.NewPCG(43, 2))
	var cases []opCase
	const R, D = 11, 20

	w := randTensor(rng, 0.3, D) // gemma's norm weights sit around 0: the scale is 1 + w
	cases = append(cases, opCase{op: "rmsnorm", diff: []string{"x", "w"}, outSize: R * D, attrs: map[string]any{"eps": 1e-6, "offset": 1},
		inputs: map[string]*tensor{"x": randTensor(rng, 1.5, R, D), "w": w},
		forward: func(in map[string][]float32) []float32 {
			out, rstd := make([]float32, R*D), make([]float32, R)
			RMSNormForward(out, rstd, in["x"], in["w"], R, D, 1e-6, 1)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			out, rstd := make([]float32, R*D), make([]float32, R)
			RMSNormForward(out, rstd, in["x"], in["w"], R, D, 1e-6, 1)
			g := map[string][]float32{"x": make([]float32, R*D), "w": make([]float32, D)}
			RMSNormBackward(g["x"], g["w"], dout, in["x"], in["w"], rstd, R, D, 1)
			return g
		}})

	const N = 600 // more than one exp chunk
	cases = append(cases, opCase{op: "geglu", diff: []string{"gate", "up"}, outSize: N,
		inputs: map[string]*tensor{"gate": randTensor(rng, 2.5, N), "up": randTensor(rng, 1, N)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, N)
			GeGLUForward(out, in["gate"], in["up"], N)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			g := map[string][]float32{"gate": make([]float32, N), "up": make([]float32, N)}
			GeGLUBackward(g["gate"], g["up"], dout, in["gate"], in["up"], N)
			return g
		}})

	const capV = 2.5
	cases = append(cases, opCase{op: "softcap", diff: []string{"x"}, outSize: N, attrs: map[string]any{"cap": capV},
		inputs: map[string]*tensor{"x": randTensor(rng, 4, N)},
		forward: func(in map[string][]float32) []float32 {
			out := make([]float32, N)
			SoftcapForward(out, in["x"], N, capV)
			return out
		},
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			out := append([]float32(nil), in["x"]...)
			SoftcapForward(out, out, N, capV) // in place, as the LM head does
			g := map[string][]float32{"x": make([]float32, N)}
			SoftcapBackward(g["x"], dout, out, N, capV)
			return g
		}})

	// partial rotary: 6 of each head's 10 dimensions rotated
	const H, HD = 3, 10
	inv := []float64{1, 0.2, 0.01}
	rpos := make([]int, R)
	for i := range rpos {
		rpos[i] = rng.IntN(40)
	}
	table := NewRoPETable(inv, 40)
	table.HeadDim = HD
	cases = append(cases, opCase{op: "rope", diff: []string{"x"}, outSize: R * H * HD,
		attrs:  map[string]any{"inv_freq": inv, "pos": rpos, "head_dim": HD},
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

	// soft-capped attention: stored probabilities and recomputed ones, full and windowed, the
	// block path (training) and the row path (short spans without probabilities: decoding)
	for _, window := range []int{0, 4} {
		for _, stored := range []bool{true, false} {
			att := Attention{Heads: 4, KVHeads: 2, HeadDim: 8, Scale: float32(1 / math.Sqrt(8)), Window: window, Softcap: 1.5}
			spans := [][2]int{{0, 9}, {9, 1}, {10, 12}, {22, 3}}
			rows := 25
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
				attrs: map[string]any{"heads": att.Heads, "kv_heads": att.KVHeads, "head_dim": att.HeadDim, "window": window,
					"spans": spans, "softcap": att.Softcap},
				inputs: map[string]*tensor{"q": randTensor(rng, 2, rows, qw), "k": randTensor(rng, 2, rows, kw),
					"v": randTensor(rng, 1, rows, kw)},
				forward: func(in map[string][]float32) []float32 {
					out := make([]float32, rows*qw)
					sp := mk(in, nil, nil)
					var probs []float32
					if stored {
						probs = make([]float32, ProbSize(att, sp))
					}
					AttentionForward(out, probs, in["q"], sp, att)
					return out
				},
				backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
					g := map[string][]float32{"q": make([]float32, rows*qw), "k": make([]float32, rows*kw), "v": make([]float32, rows*kw)}
					sp := mk(in, g["k"], g["v"])
					var probs []float32
					if stored {
						probs = make([]float32, ProbSize(att, sp))
						AttentionForward(make([]float32, rows*qw), probs, in["q"], sp, att)
					}
					AttentionBackward(g["q"], dout, probs, in["q"], sp, att)
					return g
				}})
		}
	}

	// the chunked LM head with final-logit soft-capping, through the Backend (frozen head)
	const HR, HDim, V, headCap = 7, 12, 50, 3.0
	targets := make([]int, HR)
	for i := range targets {
		targets[i] = rng.IntN(V)
	}
	targets[2] = -1 // a row outside the loss
	invT := float32(1 / 0.8)
	b := New()
	headLogp := func(in map[string][]float32) []float32 {
		lp := make([]float32, HR)
		if err := b.HeadLogProbs(backend.HostF32(lp), backend.Buf{}, backend.HostF32(in["h"]), backend.HostF32(in["w"]),
			backend.HostI32(int32s(targets)), HR, HDim, V, invT, headCap); err != nil {
			panic(err)
		}
		return lp
	}
	cases = append(cases, opCase{op: "head_logprob", diff: []string{"h"}, outSize: HR,
		attrs:   map[string]any{"targets": targets, "inv_temp": invT, "softcap": headCap},
		inputs:  map[string]*tensor{"h": randTensor(rng, 1, HR, HDim), "w": randTensor(rng, 0.6, V, HDim)},
		forward: headLogp,
		backward: func(in map[string][]float32, dout []float32) map[string][]float32 {
			dh := make([]float32, HR*HDim)
			if err := b.HeadLogProbsBackward(backend.HostF32(dh), backend.HostF32(in["h"]), backend.HostF32(in["w"]),
				backend.HostF32(dout), backend.Buf{}, backend.HostI32(int32s(targets)), HR, HDim, V, invT, headCap); err != nil {
				panic(err)
			}
			return map[string][]float32{"h": dh}
		}})
	return cases
}
