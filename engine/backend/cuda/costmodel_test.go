package cuda

import (
	"math"
	"strings"
	"testing"
)

// The cost model's arithmetic: each bound alone, the sync added, the constants printed.
func TestCostModelPhase(t *testing.T) {
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12+1e-9*want {
			t.Errorf("%s: %g s, want %g s", what, got, want)
		}
	}
	e := EstimatePhase(H100, PhaseForward, Calls{Host: 1000, Syncs: 2}, Work{OtherBytes: 1.5e9}, 100)
	near("1000 launches and 0.5 ms of memory", e.Time, 4e-3+20e-6)
	if e.Bound != "launches" {
		t.Errorf("bound %s, want launches", e.Bound)
	}
	e = EstimatePhase(H100, PhaseForward, Calls{Host: 10}, Work{GEMMBytes: 3e9, GEMMFlops: 8e11, OtherBytes: 3e9}, 1000)
	near("3 GB of products and 3 GB besides", e.Time, 2e-3)
	if e.Bound != "memory" || e.TokensPerSecond() != 1000/e.Time {
		t.Errorf("bound %s, %g tokens/s", e.Bound, e.TokensPerSecond())
	}
	e = EstimatePhase(RTX4090, PhaseBackward, Calls{Host: 10}, Work{GEMMBytes: 1e9, GEMMFlops: 165e12}, 1)
	near("165 TFLOP on an RTX 4090", e.Time, 1)
	if e.Bound != "compute" {
		t.Errorf("bound %s, want compute", e.Bound)
	}
	e = EstimatePhase(H100, PhaseDecode, Calls{Host: 2, Nodes: 400, Syncs: 1}, Work{OtherBytes: 3e8}, 8)
	near("400 graph nodes over 0.1 ms of memory", e.Time, 400*1.5e-6+10e-6)
	for _, want := range []string{"3.0 TB/s", "800 TFLOP/s", "4.0 µs a launch", "1.5 µs a graph node", "10 µs a sync"} {
		if !strings.Contains(H100.String(), want) {
			t.Errorf("%q lacks %q", H100, want)
		}
	}
}

// The workloads' shapes: Qwen2.5-0.5B's linears hold 357,826,560 weights (its 494,032,768
// parameters less the tied 151,936 × 896 embedding, the q/k/v biases and the norms); a decode
// token of the fused path reads them in 4 bits, plus the bf16 head.
func TestCostModelWork(t *testing.T) {
	if n := Qwen05B.linearParams() * float64(Qwen05B.Layers); n != 357826560 {
		t.Errorf("Qwen2.5-0.5B linears: %.0f weights", n)
	}
	if n := Llama8B.linearParams()*float64(Llama8B.Layers) + 2*float64(Llama8B.Vocab*Llama8B.Dim); math.Abs(n-8.03e9) > 0.01e9 {
		t.Errorf("Llama-3.1-8B: %.3g parameters without the norms, want 8.03e9", n)
	}
	w := Qwen05B.Work(PhaseDecode, Path{DecodeFused: true})
	weights := nf4Bytes*357826560 + 2*151936*896
	if b := w.GEMMBytes + w.OtherBytes; b < weights || b > 1.5*weights {
		t.Errorf("a 0.5B decode token moves %.3g bytes, want a little above its weights' %.3g", b, weights)
	}
	expand := Qwen05B.Work(PhaseForward, Path{DequantPerPass: true})
	kept := Qwen05B.Work(PhaseForward, Path{})
	if d := (expand.GEMMBytes + expand.OtherBytes) - (kept.GEMMBytes + kept.OtherBytes); math.Abs(d-(nf4Bytes+2)*357826560) > 1 {
		t.Errorf("expanding per pass adds %.4g bytes, want the 4-bit read and the bf16 write of every linear", d)
	}
}
