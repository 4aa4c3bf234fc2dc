package model

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/engine/backend/cpu/gemm"
	"rlhfstation/quant"
	"rlhfstation/safetensors"
)

// near1e5 is the "same op, two paths" tolerance: |got − want| ≤ 1e-5·max(1, |want|).
func near1e5(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %g, dequantized dense %g", what, i, got[i], want[i])
		}
	}
}

// The 4-bit linear and the same weight dequantized to float32 are one op by two paths: they
// agree to 1e-5, forward and input gradient, at odd shapes and both types.
func TestQuantizedEqualsDequantizedDense(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][3]int{{5, 33, 70}, {17, 128, 64}, {3, 200, 130}, {1, 96, 32}} {
		for _, opt := range []quant.Options{quant.Default(), {Type: quant.FP4, BlockSize: 128}} {
			rows, out, in := sh[0], sh[1], sh[2]
			w := make([]float32, out*in)
			for i := range w {
				w[i] = float32(r.NormFloat64() * 0.05)
			}
			qw, err := quant.Quantize(w, out, in, "float32", opt)
			if err != nil {
				t.Fatal(err)
			}
			dense := make([]float32, out*in)
			qw.Dequantize(dense)
			x, dy := make([]float32, rows*in), make([]float32, rows*out)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for i := range dy {
				dy[i] = float32(r.NormFloat64())
			}
			q := &Quantized{W: qw}
			b := cpu.New()
			y, want := make([]float32, rows*out), make([]float32, rows*out)
			if err := q.MulT(b, backend.HostF32(y), backend.HostF32(x), rows); err != nil {
				t.Fatal(err)
			}
			gemm.SgemmRef(false, true, rows, out, in, 1, x, in, dense, in, 0, want, out)
			near1e5(t, "MulT", y, want)
			if err := (&Dense{Out: out, In: in, W: dense}).MulT(b, backend.HostF32(want), backend.HostF32(x), rows); err != nil {
				t.Fatal(err)
			}
			near1e5(t, "MulT vs Dense", y, want)
			dx, wantDX := make([]float32, rows*in), make([]float32, rows*in)
			for i := range dx {
				dx[i], wantDX[i] = 0.5, 0.5
			}
			if err := q.MulAcc(b, backend.HostF32(dx), backend.HostF32(dy), rows); err != nil {
				t.Fatal(err)
			}
			gemm.SgemmRef(false, false, rows, in, out, 1, dy, out, dense, in, 1, wantDX, in)
			near1e5(t, "MulAcc", dx, wantDX)
		}
	}
}

// quantTestConfigs are the families a quantized model is checked on.
var quantTestConfigs = []string{"gpt2-untied", "llama-gqa", "qwen2-bias", "gemma2-softcap", "phi3-partial"}

// A model quantized in memory, and the same model read back from a folder in bitsandbytes'
// layout, give the logits of its float32 dequantization to 1e-5 (and, through every 4-bit
// linear's input gradient, its embedding and norm gradients to 1e-5 of each tensor's largest).
func TestQuantizedModelMatchesDequantized(t *testing.T) {
	for _, name := range quantTestConfigs {
		t.Run(name, func(t *testing.T) {
			c := tinyConfigs()[name]
			m := randomModel(t, c, 7)
			before := m.NumParams()
			dense, packed, err := m.Quantize(quant.Default())
			if err != nil {
				t.Fatal(err)
			}
			if m.NumParams() != before {
				t.Errorf("NumParams %d after quantizing, %d before", m.NumParams(), before)
			}
			qp, qb := m.QuantStats()
			if dense != 4*qp || packed != qb || len(m.Data())+int(qp) != before {
				t.Errorf("Quantize reported %d → %d bytes, QuantStats %d params %d bytes, %d float32 left of %d", dense, packed, qp, qb, len(m.Data()), before)
			}
			for _, l := range m.Linears() {
				if _, ok := l.W.(*Quantized); !ok {
					t.Fatalf("%s not quantized", l.Name)
				}
			}
			d, err := m.Dequantize()
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			loaded, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			seqs := [][]int{randomIDs(rng, 11, c.Vocab), randomIDs(rng, 6, c.Vocab)}
			want := logitsOf(t, d, seqs)
			near1e5(t, "in memory", logitsOf(t, m, seqs), want)
			near1e5(t, "from the folder", logitsOf(t, loaded, seqs), want)

			// Backward: every gradient of a float32 parameter reaches it through the 4-bit
			// linears' input gradients. Sums over many tokens cancel, so the measure is
			// relative to the tensor's largest gradient (relErr), bounded at 1e-5.
			dlogp := [][]float32{make([]float32, 11), make([]float32, 6)}
			for s := range dlogp {
				for i := 1; i < len(dlogp[s]); i++ {
					dlogp[s][i] = float32(rng.NormFloat64())
				}
			}
			gq, gd := fullGrads(t, loaded, seqs, dlogp), fullGrads(t, d, seqs, dlogp)
			worst := 0.0
			for _, p := range loaded.Params {
				dp, _ := d.Param(p.Name)
				e := relErr(gq.Of(p).F32(), gd.Of(dp).F32())
				if e > 1e-5 {
					t.Errorf("gradient of %s: relative error %.2e", p.Name, e)
				}
				worst = max(worst, e)
			}
			t.Logf("largest gradient relative error %.2e", worst)
		})
	}
}

func logitsOf(t *testing.T, m *Model, seqs [][]int) []float32 {
	t.Helper()
	var out []float32
	for _, s := range seqs {
		lg, err := m.Forward(m.NewCache(1, len(s)), [][]int{s}, false, AdaptersOn)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lg...)
	}
	return out
}

func fullGrads(t *testing.T, m *Model, seqs [][]int, dlogp [][]float32) *Grads {
	t.Helper()
	tape := m.NewTape()
	if err := m.ForwardTrain(tape, seqs, TrainOptions{}); err != nil {
		t.Fatal(err)
	}
	g := newGrads(t, m)
	if err := m.Backward(tape, dlogp, g); err != nil {
		t.Fatal(err)
	}
	return g
}

// Saving a quantized model writes bitsandbytes' layout: the 4-bit tensors unchanged, a
// quantization_config, float weights in the dtype asked for; Load gives the weights back bit
// for bit.
func TestSaveQuantizedLayout(t *testing.T) {
	m := randomModel(t, tinyConfigs()["gpt2-tied"], 2)
	if _, _, err := m.Quantize(quant.Options{Type: quant.FP4, BlockSize: 32}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveAs(dir, safetensors.BF16); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	qc, ok, err := quant.IsQuantized(raw)
	if err != nil || !ok || qc.QuantType != quant.FP4 || qc.DoubleQuant || qc.ComputeDType != "bfloat16" || qc.SkipModules != nil {
		t.Fatalf("quantization_config %+v %v %v", qc, ok, err)
	}
	set, err := safetensors.OpenSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := set.Info("transformer.h.0.attn.c_attn.weight")
	emb, _ := set.Info("transformer.wte.weight")
	set.Close()
	if info.DType != safetensors.U8 || info.Shape[1] != 1 || emb.DType != safetensors.BF16 {
		t.Errorf("c_attn stored %s %v, wte %s", info.DType, info.Shape, emb.DType)
	}
	back, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ml, bl := m.Linears(), back.Linears()
	for i := range ml {
		a, b := ml[i].W.(*Quantized).W, bl[i].W.(*Quantized).W
		if !slices.Equal(a.Packed, b.Packed) || !slices.Equal(a.Absmax, b.Absmax) || a.Rows != b.Rows || a.Cols != b.Cols {
			t.Fatalf("%s changed through save and load", ml[i].Name)
		}
	}
	// Linears left dense among 4-bit ones are skipped modules, with the head.
	m2 := randomModel(t, tinyConfigs()["llama-gqa"], 2)
	if _, _, err := m2.Quantize(quant.Default()); err != nil {
		t.Fatal(err)
	}
	d2, _ := m2.Dequantize()
	m2.Layers[1].Down.W = d2.Layers[1].Down.W
	m2.Layers[1].Down.weight = d2.Layers[1].Down.weight
	m2.Params = append(m2.Params, d2.Layers[1].Down.weight)
	if err := m2.Save(dir); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "config.json"))
	qc, _, _ = quant.IsQuantized(raw)
	if !slices.Equal(qc.SkipModules, []string{"model.layers.1.mlp.down_proj", "lm_head"}) {
		t.Errorf("skip modules %v", qc.SkipModules)
	}
	back, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Layers[1].Down.W.(*Dense); !ok || !back.Layers[0].Down.isQuantized() {
		t.Errorf("a skipped module did not load dense beside 4-bit ones")
	}
	// Mixed quant types cannot be one bitsandbytes config.
	m2.Layers[0].Q.W = &Quantized{W: mustQuantize(t, d2.Layers[0].Q, quant.Options{Type: quant.FP4, BlockSize: 64})}
	if err := m2.Save(t.TempDir()); err == nil || !strings.Contains(err.Error(), "one setting") {
		t.Errorf("mixed types saved: %v", err)
	}
}

func (l *Linear) isQuantized() bool { _, ok := l.W.(*Quantized); return ok }

func mustQuantize(t *testing.T, l *Linear, opt quant.Options) *quant.Weight {
	t.Helper()
	w, err := quant.Quantize(l.weight.Data, l.Out, l.In, "", opt)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A broken 4-bit folder is refused with an error naming the tensor (and file) at fault.
func TestLoadQuantizedErrors(t *testing.T) {
	m := randomModel(t, tinyConfigs()["llama-gqa"], 5)
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		t.Fatal(err)
	}
	const q = "model.layers.0.self_attn.q_proj.weight"
	edit := func(fn func(ts []safetensors.Tensor) []safetensors.Tensor) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, safetensors.SingleFile)
			f, err := safetensors.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			var ts []safetensors.Tensor
			for _, n := range f.Names() {
				info, _ := f.Info(n)
				b, _ := f.Bytes(n)
				ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(b)})
			}
			f.Close()
			if err := safetensors.Write(path, fn(ts), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace := func(name string, fn func(*safetensors.Tensor)) func(t *testing.T, dir string) {
		return edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == name {
					fn(&ts[i])
				}
			}
			return ts
		})
	}
	state := q + ".quant_state.bitsandbytes__nf4"
	setState := func(from, to string) func(*safetensors.Tensor) {
		return func(x *safetensors.Tensor) {
			x.Data = []byte(strings.Replace(string(x.Data), from, to, 1))
			x.Shape = []int{len(x.Data)}
		}
	}
	cases := []struct {
		name string
		edit func(t *testing.T, dir string)
		want []string
	}{
		{"absmax count", replace(q+".absmax", func(x *safetensors.Tensor) { x.Data = x.Data[:len(x.Data)-1]; x.Shape = []int{len(x.Data)} }),
			[]string{"model.safetensors", q + ".absmax", "values"}},
		{"blocksize", replace(state, setState(`"blocksize": 64`, `"blocksize": 48`)), []string{state, "blocksize 48 not allowed"}},
		{"unknown type", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			for i := range ts {
				if ts[i].Name == state {
					ts[i].Name = q + ".quant_state.bitsandbytes__int4"
				}
			}
			return ts
		}), []string{"int4", "unknown quant_type"}},
		{"shape", replace(state, setState(`"shape": [64, 64]`, `"shape": [32, 128]`)), []string{q, "quantized with shape [32 128], expected [64 64]"}},
		{"packed truncated", replace(q, func(x *safetensors.Tensor) { x.Data = x.Data[:100]; x.Shape = []int{100, 1} }), []string{q, "100 values"}},
		{"no quant state", edit(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return strings.HasPrefix(x.Name, q+".") })
		}), []string{q, "has shape [2048 1]", "declares 4-bit weights"}},
		{"8-bit config", func(t *testing.T, dir string) {
			editConfig(t, dir, func(c map[string]any) {
				c["quantization_config"] = map[string]any{"quant_method": "bitsandbytes", "load_in_8bit": true}
			})
		}, []string{"config.json", "8-bit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := m.Save(dir); err != nil {
				t.Fatal(err)
			}
			c.edit(t, dir)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// ResidentBytes counts float32 parameters at 4 bytes and 4-bit ones at their packed size:
// NF4 with blocks of 64 and double quantization is 4 + 8/64 + 32/(64·256) bits per parameter,
// plus one shared 16- and 256-entry code book.
func TestResidentBytes(t *testing.T) {
	c := builtinShape()
	m, err := NewRandom(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	fp32 := m.ResidentBytes()
	if fp32 != 4*int64(m.NumParams()) {
		t.Fatalf("float32 resident %d, want %d", fp32, 4*m.NumParams())
	}
	heap := func() int64 {
		runtime.GC()
		var s runtime.MemStats
		runtime.ReadMemStats(&s)
		return int64(s.HeapAlloc)
	}
	h0 := heap()
	if _, _, err := m.Quantize(quant.Default()); err != nil {
		t.Fatal(err)
	}
	// The float32 copies are really given back, not kept reachable.
	if freed := h0 - heap(); freed < (fp32-m.ResidentBytes())/2 {
		t.Errorf("quantizing freed %d bytes of heap; the weights shrank by %d", freed, fp32-m.ResidentBytes())
	}
	qp, qb := m.QuantStats()
	var want float64
	for _, l := range m.Linears() {
		n := float64(l.In * l.Out)
		blocks := math.Ceil(n / 64)
		want += n/2 + blocks + 4*math.Ceil(blocks/256) + 4
	}
	if float64(qb) != want {
		t.Errorf("4-bit bytes %d, want %.0f", qb, want)
	}
	bits := 8 * float64(qb) / float64(qp)
	if bits < 4.12 || bits > 4.16 {
		t.Errorf("%.4f bits per quantized parameter", bits)
	}
	nf4 := m.ResidentBytes()
	if nf4 != 4*int64(len(m.Data()))+qb+16*4+256*4 {
		t.Errorf("resident %d", nf4)
	}
	t.Logf("built-in shape (%d parameters, %d in linears): float32 %d bytes (%.2f MiB), NF4 %d bytes (%.2f MiB, %.1f%%); linears %.4f bits per parameter",
		m.NumParams(), qp, fp32, float64(fp32)/(1<<20), nf4, float64(nf4)/(1<<20), 100*float64(nf4)/float64(fp32), bits)
}

// builtinShape is the built-in model's configuration (DESIGN §14).
func builtinShape() Config {
	return Config{ModelType: "llama", Vocab: 2048, Dim: 192, Layers: 4, Heads: 6, KVHeads: 2, HeadDim: 32,
		Hidden: 512, MaxPos: 256, NormEps: 1e-5, RopeTheta: 10000, TieEmbed: true, BOS: -1, EOS: []int{0}}
}
