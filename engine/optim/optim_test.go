package optim

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/internal/testref"
)

func TestAdamWClipScheduleMatchPyTorch(t *testing.T) {
	py := testref.Python(t)
	r := rand.New(rand.NewPCG(5, 6))
	b := cpu.New()
	// lr_scheduler_kwargs per kind, with transformers' names: what reference.py's formulas read.
	kwargs := map[string]ScheduleArgs{
		"cosine_with_min_lr":  {MinLRRate: 0.1},
		"polynomial":          {LREnd: 1e-4, Power: 2},
		"warmup_stable_decay": {NumDecaySteps: 4, DecayType: "linear", MinLRRatio: 0.05},
	}
	for _, kind := range Kinds {
		sizes := []int{7, 13}
		var init [][]float32
		var params []*Param
		var data, gradv [][]float32
		for _, n := range sizes {
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(r.NormFloat64())
			}
			init = append(init, append([]float32(nil), d...))
			g := make([]float32, n)
			params = append(params, &Param{Data: backend.HostF32(d), Grad: backend.HostF32(g)})
			data, gradv = append(data, d), append(gradv, g)
		}
		const steps = 12
		var grads [][][]float32
		for s := 0; s < steps; s++ {
			var gs [][]float32
			scale := 0.1
			if s%4 == 1 {
				scale = 5 // some steps exceed max_norm and are clipped
			}
			for _, n := range sizes {
				g := make([]float32, n)
				for i := range g {
					g[i] = float32(scale * r.NormFloat64())
				}
				gs = append(gs, g)
			}
			grads = append(grads, gs)
		}
		const lr, maxNorm = 1e-2, 1.0
		sched := Schedule{Kind: kind, Warmup: 3, Total: steps, Args: kwargs[kind], BaseLR: lr}
		if err := sched.Validate(); err != nil {
			t.Fatal(err)
		}
		a := kwargs[kind]
		opt, err := NewAdamW(b, params, 0.9, 0.999, 1e-8, 0.01)
		if err != nil {
			t.Fatal(err)
		}
		var norms []float64
		for s := 0; s < steps; s++ {
			for i := range params {
				copy(gradv[i], grads[s][i])
			}
			n, err := ClipGradNorm(b, params, maxNorm)
			if err != nil {
				t.Fatal(err)
			}
			norms = append(norms, n)
			if err := opt.Update(lr * sched.Factor(s)); err != nil {
				t.Fatal(err)
			}
		}
		in, _ := json.Marshal(map[string]any{"params": init, "grads": grads, "lr": lr, "beta1": 0.9,
			"beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01, "warmup": 3, "total": steps, "kind": kind, "max_norm": maxNorm,
			"kwargs": map[string]any{"min_lr_rate": a.MinLRRate, "lr_end": a.LREnd, "power": a.Power,
				"num_decay_steps": a.NumDecaySteps, "decay_type": a.DecayType, "min_lr_ratio": a.MinLRRatio}})
		cmd := exec.Command(py, filepath.Join("testdata", "reference.py"))
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("reference.py: %v", err)
		}
		var want struct {
			Params [][]float64
			Norms  []float64
		}
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatal(err)
		}
		for i := range params {
			for j, v := range data[i] {
				if math.Abs(float64(v)-want.Params[i][j]) > 1e-5*math.Max(1, math.Abs(want.Params[i][j])) {
					t.Errorf("%s: param[%d][%d] = %g, torch %g", kind, i, j, v, want.Params[i][j])
				}
			}
		}
		for s := range norms {
			if math.Abs(norms[s]-want.Norms[s]) > 1e-5*want.Norms[s] {
				t.Errorf("%s: step %d grad norm %g, torch %g", kind, s, norms[s], want.Norms[s])
			}
		}
	}
}

func TestScheduleHandValues(t *testing.T) {
	s := Schedule{Kind: "linear", Warmup: 2, Total: 10}
	for step, want := range map[int]float64{0: 0, 1: 0.5, 2: 1, 6: 0.5, 10: 0} {
		if got := s.Factor(step); math.Abs(got-want) > 1e-12 {
			t.Errorf("linear step %d: %g, want %g", step, got, want)
		}
	}
	c := Schedule{Kind: "cosine", Total: 4}
	if got := c.Factor(2); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("cosine half-way: %g", got)
	}
	if (Schedule{Kind: "exp"}).Validate() == nil {
		t.Error("unknown schedule must be refused")
	}
}

func TestClipLeavesNonFiniteAlone(t *testing.T) {
	g := []float32{float32(math.NaN())}
	p := &Param{Data: backend.HostF32([]float32{1}), Grad: backend.HostF32(g)}
	if n, err := ClipGradNorm(cpu.New(), []*Param{p}, 1); !math.IsNaN(n) || err != nil || !math.IsNaN(float64(g[0])) {
		t.Fatalf("norm %g, %v", n, err)
	}
}

func TestScheduleHoldContinuesPastTheHorizon(t *testing.T) {
	s := Schedule{Kind: "linear", Warmup: 1, Total: 10, Hold: true}
	last := s.Factor(9)
	if math.Abs(last-1.0/9) > 1e-12 {
		t.Fatalf("step 9: %g, want 1/9", last)
	}
	for _, step := range []int{10, 11, 50} {
		if got := s.Factor(step); got != last {
			t.Errorf("held step %d: %g, want %g (the horizon's last factor)", step, got, last)
		}
	}
	s.Hold = false
	if got := s.Factor(10); got != 0 {
		t.Errorf("without Hold step 10: %g, want 0 as transformers' linear schedule", got)
	}
}
