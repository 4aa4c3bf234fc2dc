package lora

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/internal/testref"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// newLayer is NewLayer on the CPU.
func newLayer(t testing.TB, module string, in, out int, c Config, rng *rand.Rand) *Layer {
	l, err := NewLayer(cpu.New(), module, in, out, c, rng)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// linear computes y = x·Wᵀ + LoRA, as the model's linear layer will (the dropout seed drawn
// from rng).
func linear(t testing.TB, l *Layer, w, x []float32, rows int, act *Activations, rng *rand.Rand) []float32 {
	y := make([]float32, rows*l.Out)
	gemm.Sgemm(false, true, rows, l.Out, l.In, 1, x, l.In, w, l.In, 0, y, l.Out)
	if err := l.Forward(backend.HostF32(y), backend.HostF32(x), rows, act != nil, rng.Uint64(), act); err != nil {
		t.Fatal(err)
	}
	return y
}

func backward(t testing.TB, l *Layer, dx, dy, x []float32, act *Activations) {
	if err := l.Backward(backend.HostF32(dx), backend.HostF32(dy), backend.HostF32(x), act); err != nil {
		t.Fatal(err)
	}
}

func TestForwardBackwardMatchPyTorch(t *testing.T) {
	py := testref.Python(t)
	r := rand.New(rand.NewPCG(7, 8))
	const rows, in, out, rank = 5, 11, 7, 3
	cfg := Config{R: rank, Alpha: 6, RSLoRA: true}
	l := newLayer(t, "model.layers.0.mlp.up_proj", in, out, cfg, r)
	copy(l.B.F32(), randSlice(r, l.B.Len())) // a trained adapter, not the zero init
	w, x, dy := randSlice(r, out*in), randSlice(r, rows*in), randSlice(r, rows*out)
	var act Activations
	y := linear(t, l, w, x, rows, &act, r)
	dx := make([]float32, rows*in)
	gemm.Sgemm(false, false, rows, in, out, 1, dy, out, w, in, 0, dx, in) // base share of dx
	backward(t, l, dx, dy, x, &act)

	in64 := map[string]any{"rows": rows, "in": in, "out": out, "r": rank, "scale": cfg.Scale(),
		"x": x, "w": w, "a": l.A.F32(), "b": l.B.F32(), "dy": dy}
	b, _ := json.Marshal(in64)
	cmd := exec.Command(py, filepath.Join("testdata", "reference.py"))
	cmd.Stdin = bytes.NewReader(b)
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v", err)
	}
	var want struct{ Y, DX, DA, DB []float64 }
	if err := json.Unmarshal(res, &want); err != nil {
		t.Fatal(err)
	}
	check := func(name string, got []float32, want []float64) {
		scale := 0.0
		for _, v := range want {
			scale = math.Max(scale, math.Abs(v))
		}
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 1e-5*scale {
				t.Errorf("%s[%d] = %g, torch %g", name, i, got[i], want[i])
			}
		}
	}
	check("y", y, want.Y)
	check("dx", dx, want.DX)
	check("dA", l.GradA.F32(), want.DA)
	check("dB", l.GradB.F32(), want.DB)
}

func TestInitAsPEFT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	l := newLayer(t, "q_proj", 64, 32, Config{R: 8, Alpha: 16}, r)
	bound := float32(1 / math.Sqrt(64))
	maxAbs := float32(0)
	for _, v := range l.A.F32() {
		maxAbs = max(maxAbs, float32(math.Abs(float64(v))))
	}
	if maxAbs > bound || maxAbs < 0.9*bound {
		t.Fatalf("A should fill U(−%g, %g): max |A| = %g", bound, bound, maxAbs)
	}
	for _, v := range l.B.F32() {
		if v != 0 {
			t.Fatal("B must start at zero")
		}
	}
	if l.Scale != 2 {
		t.Fatalf("scale alpha/r = %g", l.Scale)
	}
}

// With dropout the gradient must still be that of the function actually computed: check it by
// finite differences under a fixed mask (the same seed draws the same mask).
func TestDropoutGradientFiniteDifferences(t *testing.T) {
	const rows, in, out = 3, 6, 4
	seedRNG := func() *rand.Rand { return rand.New(rand.NewPCG(42, 42)) }
	r := rand.New(rand.NewPCG(9, 9))
	l := newLayer(t, "m", in, out, Config{R: 2, Alpha: 2, Dropout: 0.5}, r)
	copy(l.B.F32(), randSlice(r, l.B.Len()))
	w, x, dy := randSlice(r, out*in), randSlice(r, rows*in), randSlice(r, rows*out)
	loss := func() float64 {
		y := linear(t, l, w, x, rows, &Activations{}, seedRNG())
		s := 0.0
		for i := range y {
			s += float64(y[i] * dy[i])
		}
		return s
	}
	var act Activations
	linear(t, l, w, x, rows, &act, seedRNG())
	dx := make([]float32, rows*in)
	backward(t, l, dx, dy, x, &act)
	zeros := 0
	for i := 0; i < rows*in; i++ {
		if !backend.DropoutKeep(act.seed, i, l.Dropout) {
			zeros++
		}
	}
	if zeros == 0 || zeros == rows*in {
		t.Fatalf("dropout 0.5 dropped %d of %d", zeros, rows*in)
	}
	const h = 1e-2
	A, gradA := l.A.F32(), l.GradA.F32()
	for i := range A {
		v := A[i]
		A[i] = v + h
		up := loss()
		A[i] = v - h
		down := loss()
		A[i] = v
		if fd := (up - down) / (2 * h); math.Abs(fd-float64(gradA[i])) > 1e-2*math.Max(1, math.Abs(fd)) {
			t.Errorf("dA[%d] = %g, finite difference %g", i, gradA[i], fd)
		}
	}
	for i := range x {
		v := x[i]
		x[i] = v + h
		up := loss()
		x[i] = v - h
		down := loss()
		x[i] = v
		// only the LoRA share: remove the base share from the finite difference
		base := 0.0
		row, col := i/in, i%in
		for o := 0; o < out; o++ {
			base += float64(dy[row*out+o] * w[o*in+col])
		}
		if fd := (up-down)/(2*h) - base; math.Abs(fd-float64(dx[i])) > 1e-2*math.Max(1, math.Abs(fd)) {
			t.Errorf("dx[%d] = %g, finite difference %g", i, dx[i], fd)
		}
	}
}

func TestSelectsAndNames(t *testing.T) {
	cases := []struct {
		targets []string
		module  string
		want    bool
	}{
		{[]string{"q_proj", "v_proj"}, "model.layers.3.self_attn.q_proj", true},
		{[]string{"q_proj"}, "model.layers.3.self_attn.k_proj", false},
		{[]string{"proj"}, "model.layers.3.self_attn.q_proj", false},
		{[]string{"all-linear"}, "transformer.h.0.attn.c_attn", true},
	}
	for _, c := range cases {
		if got := Selects(c.targets, c.module); got != c.want {
			t.Errorf("Selects(%v, %s) = %v", c.targets, c.module, got)
		}
	}
	a, b := TensorNames("model.layers.0.self_attn.q_proj")
	if a != "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" || !strings.HasSuffix(b, "q_proj.lora_B.weight") {
		t.Fatalf("names %s %s", a, b)
	}
}

func TestSetLoadChecksShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	cfg := Config{R: 2, Alpha: 4, TargetModules: []string{"q_proj"}}
	s := NewSet(cfg, []*Layer{newLayer(t, "model.layers.0.self_attn.q_proj", 4, 4, cfg, r)})
	tensors, err := s.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	s2 := NewSet(cfg, []*Layer{newLayer(t, "model.layers.0.self_attn.q_proj", 4, 4, cfg, r)})
	if err := s2.Load("ckpt", tensors); err != nil {
		t.Fatal(err)
	}
	if s2.Layers[0].A.F32()[3] != s.Layers[0].A.F32()[3] {
		t.Fatal("weights not copied")
	}
	bad := NewSet(cfg, []*Layer{newLayer(t, "model.layers.0.self_attn.q_proj", 8, 4, cfg, r)})
	if err := bad.Load("ckpt", tensors); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("shape mismatch: %v", err)
	}
	if got := s.AdapterConfig("m", false); got.R != 2 || got.TargetModules[0] != "q_proj" {
		t.Fatalf("adapter config %+v", got)
	}
}
