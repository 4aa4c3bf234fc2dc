package quant

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/safetensors"
)

func gaussian(n int, seed uint64, std float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

// maxHalfGap is the largest half distance between neighbouring codes: the worst rounding error
// of a value in [-1, 1].
func maxHalfGap(t Type) float64 {
	var s []float64
	for _, v := range t.Code() {
		s = append(s, float64(v))
	}
	slices.Sort(s)
	g := 0.0
	for i := 1; i < len(s); i++ {
		g = max(g, (s[i]-s[i-1])/2)
	}
	return g
}

type errStats struct {
	meanAbs, maxAbs    float64 // over all values
	worstBlockMean     float64 // largest per-block mean |error|
	worstBlockRelMax   float64 // largest per-block max |error| / absmax
	relFrobenius       float64
	boundViolations    int
	worstScaleRelError float64
}

func measure(t *testing.T, x []float32, w *Weight, absmax []float32) errStats {
	t.Helper()
	y := make([]float32, len(x))
	w.Dequantize(y)
	var s errStats
	var num, den float64
	hg := maxHalfGap(w.Type)
	for b := 0; b < w.Blocks(); b++ {
		lo, hi := b*w.BlockSize, min(len(x), (b+1)*w.BlockSize)
		scale := float64(w.Scale(b))
		var sum, mx float64
		for i := lo; i < hi; i++ {
			e := math.Abs(float64(x[i]) - float64(y[i]))
			sum += e
			mx = max(mx, e)
			num += e * e
			den += float64(x[i]) * float64(x[i])
			// Rounding to the nearest code of x/scale (clipped to [-1, 1]) errs by at most
			// half a gap of the scale, plus what the scale itself is off when nested.
			if e > hg*scale+math.Abs(float64(absmax[b])-scale)+1e-6*scale {
				s.boundViolations++
			}
		}
		s.meanAbs += sum
		s.maxAbs = max(s.maxAbs, mx)
		s.worstBlockMean = max(s.worstBlockMean, sum/float64(hi-lo))
		s.worstBlockRelMax = max(s.worstBlockRelMax, mx/float64(absmax[b]))
		s.worstScaleRelError = max(s.worstScaleRelError, math.Abs(scale-float64(absmax[b]))/float64(absmax[b]))
	}
	s.meanAbs /= float64(len(x))
	s.relFrobenius = math.Sqrt(num / den)
	return s
}

// TestRoundTripGaussian prints the error statistics of each format on N(0, 0.02²) weights and
// bounds them.
func TestRoundTripGaussian(t *testing.T) {
	const rows, cols = 256, 1000 // cols not a multiple of the block size: blocks straddle rows
	x := gaussian(rows*cols, 1, 0.02)
	cases := []struct {
		opt     Options
		maxFrob float64
	}{
		{Options{NF4, 64, false}, 0.105},
		{Options{NF4, 64, true}, 0.105},
		{Options{FP4, 64, false}, 0.16},
		{Options{NF4, 32, true}, 0.10},
		{Options{NF4, 256, true}, 0.115},
		{Options{NF4, 4096, false}, 0.13},
	}
	for _, c := range cases {
		w, err := Quantize(x, rows, cols, "float32", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		absmax := make([]float32, w.Blocks())
		for b := range absmax {
			absmax[b] = blockAbsmax(x[b*c.opt.BlockSize : min(len(x), (b+1)*c.opt.BlockSize)])
		}
		s := measure(t, x, w, absmax)
		t.Logf("%s bs=%-4d dq=%-5v mean|e|=%.3g (%.3f σ) max|e|=%.3g worst block mean|e|=%.3g worst block max|e|/absmax=%.4f rel.Frobenius=%.4f scale rel.err≤%.2g bits/param=%.3f",
			c.opt.Type, c.opt.BlockSize, c.opt.DoubleQuant, s.meanAbs, s.meanAbs/0.02, s.maxAbs, s.worstBlockMean,
			s.worstBlockRelMax, s.relFrobenius, s.worstScaleRelError, w.BitsPerParam())
		if s.boundViolations > 0 {
			t.Errorf("%v: %d values err more than half a code gap", c.opt, s.boundViolations)
		}
		if s.relFrobenius > c.maxFrob {
			t.Errorf("%v: relative Frobenius error %.4f above %.3f", c.opt, s.relFrobenius, c.maxFrob)
		}
		if s.worstBlockRelMax > maxHalfGap(c.opt.Type)+s.worstScaleRelError+1e-6 {
			t.Errorf("%v: a block errs by %.4f of its absmax", c.opt, s.worstBlockRelMax)
		}
		if c.opt.DoubleQuant && s.worstScaleRelError > 0.02 {
			t.Errorf("%v: double-quantized absmax off by %.3g relative", c.opt, s.worstScaleRelError)
		}
	}
}

// TestDoubleQuant checks the nested absmax: offset = mean, the 8-bit round trip within half a
// dynamic-code gap of the nested scale, and Scale = code·nested + offset in float32.
func TestDoubleQuant(t *testing.T) {
	x := gaussian(300*64+17, 3, 1)
	w, err := Quantize(x, 1, len(x), "", Default())
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := Quantize(x, 1, len(x), "", Options{NF4, 64, false})
	if !slices.Equal(plain.Packed, w.Packed) {
		t.Fatal("double quantization changed the 4-bit codes")
	}
	absmax := plain.Absmax
	var mean float64
	for _, a := range absmax {
		mean += float64(a)
	}
	mean /= float64(len(absmax))
	if w.Offset != float32(mean) {
		t.Errorf("offset %v, mean %v", w.Offset, mean)
	}
	if len(w.QAbsmax) != 301 || len(w.NestedAbsmax) != 2 || w.NestedBlockSize != 256 || w.DType != "float32" {
		t.Fatalf("nested sizes %d %d %d", len(w.QAbsmax), len(w.NestedAbsmax), w.NestedBlockSize)
	}
	for nb := range w.NestedAbsmax {
		var m float32
		for b := nb * 256; b < min(len(absmax), (nb+1)*256); b++ {
			m = max(m, float32(math.Abs(float64(absmax[b]-w.Offset))))
		}
		if w.NestedAbsmax[nb] != m {
			t.Errorf("nested absmax %d = %v, want %v", nb, w.NestedAbsmax[nb], m)
		}
	}
	for b, a := range absmax {
		want := float32(DynamicCode[w.QAbsmax[b]]*w.NestedAbsmax[b/256]) + w.Offset
		if w.Scale(b) != want {
			t.Fatalf("Scale(%d) = %v, want %v", b, w.Scale(b), want)
		}
		// Gaps of the dynamic code are at most 0.0140625 in [0.1, 1]: half of that, of the
		// nested absmax, bounds the error (values below 0.1 of it are finer still).
		if d := math.Abs(float64(w.Scale(b) - a)); d > 0.00704*float64(w.NestedAbsmax[b/256])+1e-6 {
			t.Errorf("block %d: scale %v vs absmax %v", b, w.Scale(b), a)
		}
	}
}

func TestBitsPerParam(t *testing.T) {
	// 4 bits per value, 8 per 64-value block for its absmax code, 32 per 256 blocks for the
	// nested absmax: 4 + 1/8 + 1/512 = 4.127, plus the two code books (1088 bytes), the offset.
	w, err := Quantize(make([]float32, 2048*2048), 2048, 2048, "", Default())
	if err != nil {
		t.Fatal(err)
	}
	n := 2048 * 2048
	wantBytes := n/2 + n/64 + 4*(n/64/256) + 4*256 + 4*16 + 4
	if w.Bytes() != wantBytes {
		t.Errorf("Bytes = %d, want %d", w.Bytes(), wantBytes)
	}
	bits := w.BitsPerParam()
	if math.Abs(bits-(4+8.0/64+32.0/64/256)) > 0.003 || math.Abs(bits-4.13) > 0.005 {
		t.Errorf("bits per parameter %.4f, want ≈ 4.127", bits)
	}
	plain, _ := Quantize(make([]float32, 64*64), 64, 64, "", Options{NF4, 64, false})
	if got := plain.BitsPerParam(); math.Abs(got-(4.5+8*64.0/4096)) > 1e-9 {
		t.Errorf("plain bits per parameter %.4f", got)
	}
	t.Logf("NF4 bs=64 double quant: %.4f bits/param (2048×2048); without: 4.5 + code book", bits)
}

func TestDequantizeRows(t *testing.T) {
	for _, opt := range []Options{{NF4, 32, true}, {FP4, 64, false}} {
		rows, cols := 9, 37 // odd total, blocks straddle rows, rows start on low nibbles
		x := gaussian(rows*cols, 5, 1)
		w, err := Quantize(x, rows, cols, "", opt)
		if err != nil {
			t.Fatal(err)
		}
		full := make([]float32, rows*cols)
		w.Dequantize(full)
		// Reference: element by element from the definition.
		code := opt.Type.Code()
		for i := range full {
			q := w.Packed[i/2] >> 4
			if i%2 == 1 {
				q = w.Packed[i/2] & 15
			}
			if want := code[q] * w.Scale(i/opt.BlockSize); full[i] != want {
				t.Fatalf("%v: value %d = %v, want %v", opt, i, full[i], want)
			}
		}
		for r0 := 0; r0 <= rows; r0++ {
			for r1 := r0; r1 <= rows; r1++ {
				part := make([]float32, (r1-r0)*cols)
				w.DequantizeRows(part, r0, r1)
				if !slices.Equal(part, full[r0*cols:r1*cols]) {
					t.Fatalf("%v: rows %d..%d differ", opt, r0, r1)
				}
			}
		}
		for lo := 0; lo < 40; lo++ {
			part := make([]float32, 70)
			w.DequantizeRange(part, lo)
			if !slices.Equal(part, full[lo:lo+70]) {
				t.Fatalf("%v: range at %d differs", opt, lo)
			}
		}
	}
	// Large enough to take the parallel path.
	x := gaussian(512*301, 6, 1)
	w, _ := Quantize(x, 512, 301, "", Default())
	full := make([]float32, len(x))
	w.Dequantize(full)
	part := make([]float32, 100*301)
	w.DequantizeRows(part, 211, 311)
	if !slices.Equal(part, full[211*301:311*301]) {
		t.Fatal("parallel rows differ")
	}
	for i := 0; i < len(x); i += 997 {
		var one [1]float32
		w.DequantizeRange(one[:], i)
		if one[0] != full[i] {
			t.Fatalf("value %d differs", i)
		}
	}
}

func TestQuantizeRefuses(t *testing.T) {
	x := []float32{1, 2, 3, 4}
	cases := []struct {
		x          []float32
		rows, cols int
		opt        Options
		want       string
	}{
		{x, 2, 2, Options{"nf5", 64, true}, `unknown quant_type "nf5"`},
		{x, 2, 2, Options{NF4, 48, true}, "blocksize 48 not allowed"},
		{x, 3, 2, Default(), "weight of 4 values is not [3, 2]"},
		{[]float32{1, float32(math.NaN()), 0, 0}, 2, 2, Default(), "weight value 1 (row 0, column 1) is NaN"},
		{[]float32{1, 0, 0, float32(math.Inf(-1))}, 2, 2, Default(), "is -Inf"},
	}
	for _, c := range cases {
		if _, err := Quantize(c.x, c.rows, c.cols, "", c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Quantize error = %v, want %q", err, c.want)
		}
	}
}

func writeWeights(t *testing.T, tensors []safetensors.Tensor) *safetensors.Set {
	t.Helper()
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Write(p, tensors, nil); err != nil {
		t.Fatal(err)
	}
	s, err := safetensors.OpenSet(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestFileRoundTrip(t *testing.T) {
	x := gaussian(48*40, 8, 0.5)
	for _, opt := range []Options{Default(), {FP4, 128, false}, {NF4, 32, true}, {FP4, 64, true}} {
		w, err := Quantize(x, 48, 40, "bfloat16", opt)
		if err != nil {
			t.Fatal(err)
		}
		ts := w.Tensors("model.layers.0.mlp.up_proj")
		byName := map[string]safetensors.Tensor{}
		for _, tt := range ts {
			byName[tt.Name] = tt
		}
		packed := byName["model.layers.0.mlp.up_proj.weight"]
		if packed.DType != safetensors.U8 || !reflect.DeepEqual(packed.Shape, []int{960, 1}) {
			t.Errorf("packed weight %s %v, want U8 [960 1]", packed.DType, packed.Shape)
		}
		state := byName["model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__"+string(opt.Type)]
		wantState := `{"quant_type": "` + string(opt.Type) + `", "blocksize": ` + strconv.Itoa(opt.BlockSize) +
			`, "dtype": "bfloat16", "shape": [48, 40]`
		if opt.DoubleQuant {
			wantState += `, "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": ` + pyFloat(float64(w.Offset))
		}
		wantState += "}"
		if string(state.Data) != wantState {
			t.Errorf("quant state\n got %s\nwant %s", state.Data, wantState)
		}
		wantKeys := 4
		if opt.DoubleQuant {
			wantKeys = 6
		}
		if len(ts) != wantKeys {
			t.Errorf("%d tensors, want %d", len(ts), wantKeys)
		}
		set := writeWeights(t, append(ts, safetensors.F32Tensor("model.norm.weight", []int{2}, []float32{1, 1})))
		back, ok, err := LoadWeight(set, "model.layers.0.mlp.up_proj")
		if err != nil || !ok {
			t.Fatalf("LoadWeight: %v %v", ok, err)
		}
		if !reflect.DeepEqual(back, w) {
			t.Errorf("%v: loaded weight differs from the written one", opt)
		}
		if _, ok, err := LoadWeight(set, "model.norm"); ok || err != nil {
			t.Errorf("model.norm reported as quantized: %v %v", ok, err)
		}
	}
}

func TestPyFloat(t *testing.T) {
	cases := map[float64]string{
		0.0123: "0.0123", 1: "1.0", 0.0001: "0.0001", 1e-05: "1e-05", 0.5: "0.5",
		float64(float32(0.1)): "0.10000000149011612", 1e16: "1e+16", 123456789: "123456789.0", -2.5e-7: "-2.5e-07",
	}
	for v, want := range cases {
		if got := pyFloat(v); got != want {
			t.Errorf("pyFloat(%v) = %s, want %s", v, got, want)
		}
	}
}

// TestLoadRefuses mutates a valid layout into each inconsistent state.
func TestLoadRefuses(t *testing.T) {
	const p = "model.layers.3.self_attn.q_proj"
	const base = p + ".weight"
	const stateKey = base + ".quant_state.bitsandbytes__nf4"
	w, err := Quantize(gaussian(32*40, 9, 1), 32, 40, "float16", Default())
	if err != nil {
		t.Fatal(err)
	}
	good := w.Tensors(p)
	with := func(edit func(m map[string]safetensors.Tensor)) []safetensors.Tensor {
		m := map[string]safetensors.Tensor{}
		for _, tt := range good {
			m[tt.Name] = tt
		}
		edit(m)
		var out []safetensors.Tensor
		for _, tt := range m {
			out = append(out, tt)
		}
		return out
	}
	setState := func(js string) func(m map[string]safetensors.Tensor) {
		return func(m map[string]safetensors.Tensor) {
			m[stateKey] = safetensors.Tensor{Name: stateKey, DType: safetensors.U8, Shape: []int{len(js)}, Data: []byte(js)}
		}
	}
	u8 := func(name string, n int) func(m map[string]safetensors.Tensor) {
		return func(m map[string]safetensors.Tensor) {
			m[name] = safetensors.Tensor{Name: name, DType: safetensors.U8, Shape: []int{n}, Data: make([]byte, n)}
		}
	}
	f32 := func(name string, v []float32) func(m map[string]safetensors.Tensor) {
		return func(m map[string]safetensors.Tensor) { m[name] = safetensors.F32Tensor(name, []int{len(v)}, v) }
	}
	del := func(name string) func(m map[string]safetensors.Tensor) {
		return func(m map[string]safetensors.Tensor) { delete(m, name) }
	}
	nested := `, "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.5}`
	badMap := NF4Code
	badMap[3] += 0.01
	cases := []struct {
		name   string
		edit   func(m map[string]safetensors.Tensor)
		tensor string
		want   string
	}{
		{"absmax count", u8(base+".absmax", 39), base + ".absmax", "has 39 values (shape [39]), want 20"},
		{"truncated weight", u8(base, 639), base, "has 639 values (shape [639]), want 640"},
		{"weight dtype", f32(base, make([]float32, 640)), base, "dtype F32, want U8"},
		{"missing weight", del(base), base, "missing"},
		{"missing quant_map", del(base + ".quant_map"), base + ".quant_map", "missing"},
		{"wrong quant_map", f32(base+".quant_map", badMap[:]), base + ".quant_map", "value 3 is"},
		{"short quant_map", f32(base+".quant_map", NF4Code[:8]), base + ".quant_map", "has 8 values"},
		{"nested absmax count", f32(base+".nested_absmax", []float32{1, 1}), base + ".nested_absmax", "has 2 values (shape [2]), want 1"},
		{"nested map", f32(base+".nested_quant_map", make([]float32, 255)), base + ".nested_quant_map", "want 256"},
		{"nested absmax missing", del(base + ".nested_absmax"), base + ".nested_absmax", "missing, but the quant state is nested"},
		{"nested absmax NaN", f32(base+".nested_absmax", []float32{float32(math.NaN())}), base + ".nested_absmax", "nested_absmax[0] is NaN"},
		{"quant_type mismatch", setState(`{"quant_type": "fp4", "blocksize": 64, "dtype": "float16", "shape": [32, 40]` + nested), stateKey, `quant_type "fp4" does not match the key's "nf4"`},
		{"unknown quant_type", func(m map[string]safetensors.Tensor) {
			s := m[stateKey]
			delete(m, stateKey)
			s.Name = base + ".quant_state.bitsandbytes__int4"
			m[s.Name] = s
		}, base + ".quant_state.bitsandbytes__int4", `unknown quant_type "int4"`},
		{"blocksize", setState(`{"quant_type": "nf4", "blocksize": 48, "dtype": "float16", "shape": [32, 40]` + nested), stateKey, "blocksize 48 not allowed"},
		{"no blocksize", setState(`{"quant_type": "nf4", "dtype": "float16", "shape": [32, 40]` + nested), stateKey, "no blocksize"},
		{"shape 1-D", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [1280]` + nested), stateKey, "shape [1280] is not a 2-D weight"},
		{"shape mismatch", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 41]` + nested), base, "want 656"},
		{"dtype", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "int8", "shape": [32, 40]` + nested), stateKey, `dtype "int8"`},
		{"bad json", setState(`{"quant_type": "nf4", "blocksize": 64,`), stateKey, "not valid JSON"},
		{"unknown key", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40], "zero_point": 3` + nested), stateKey, `unknown field "zero_point"`},
		{"nested blocksize", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40], "nested_blocksize": 100, "nested_offset": 0.5}`), stateKey, "nested_blocksize 100 not allowed"},
		{"nested without offset", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40], "nested_blocksize": 256}`), stateKey, "needs nested_blocksize and nested_offset"},
		{"state not nested", setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40]}`), stateKey, "but no nested_blocksize"},
		{"plain absmax dtype", func(m map[string]safetensors.Tensor) {
			setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40]}`)(m)
			delete(m, base+".nested_absmax")
			delete(m, base+".nested_quant_map")
		}, base + ".absmax", "dtype U8"},
		{"plain absmax Inf", func(m map[string]safetensors.Tensor) {
			setState(`{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [32, 40]}`)(m)
			delete(m, base+".nested_absmax")
			delete(m, base+".nested_quant_map")
			v := make([]float32, 20)
			v[7] = float32(math.Inf(1))
			f32(base+".absmax", v)(m)
		}, base + ".absmax", "absmax[7] is +Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set := writeWeights(t, with(c.edit))
			_, ok, err := LoadWeight(set, p)
			if err == nil {
				t.Fatalf("loaded (ok=%v), want error %q", ok, c.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, `"`+c.tensor+`"`) || !strings.Contains(msg, "model.safetensors") {
				t.Errorf("error = %v\nwant tensor %q, file, and %q", err, c.tensor, c.want)
			}
		})
	}
}

// TestQuantizeRows: quantizing a chunk of rows at a time through a small staging buffer gives
// Quantize's weight exactly (chunks end on block boundaries, also where a row is not a whole
// number of blocks and the length is odd), reads every row once in order, and a non-finite
// value in a later chunk is named by its place in the whole weight.
func TestQuantizeRows(t *testing.T) {
	for _, shape := range [][2]int{{37, 50}, {33, 45}, {300, 128}, {5, 4096}} {
		rows, cols := shape[0], shape[1]
		x := gaussian(rows*cols, uint64(rows), 0.3)
		for _, opt := range []Options{Default(), {FP4, 128, false}, {NF4, 32, true}} {
			want, err := Quantize(x, rows, cols, "bfloat16", opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, staging := range []int{0, 100, 5000, StagingLen} {
				next, reads := 0, 0
				got, err := QuantizeRows(rows, cols, "bfloat16", opt, make([]float32, staging), func(dst []float32, r0 int) error {
					if r0 != next || len(dst)%cols != 0 {
						t.Fatalf("read rows from %d (%d values), want from %d", r0, len(dst), next)
					}
					next, reads = r0+len(dst)/cols, reads+1
					copy(dst, x[r0*cols:])
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if next != rows || !reflect.DeepEqual(got, want) {
					t.Errorf("[%d %d] %+v staging %d: %d rows read in %d chunks; the weight differs from Quantize's", rows, cols, opt, staging, next, reads)
				}
				if rows == 300 && staging == 5000 && reads != 8 { // 39 rows of 128 at a time
					t.Errorf("[300 128] staging 5000: %d chunks, want 8", reads)
				}
			}
		}
	}
	x := gaussian(300*128, 1, 0.3)
	x[250*128+7] = float32(math.Inf(1))
	_, err := QuantizeRows(300, 128, "", Default(), make([]float32, 1024), func(dst []float32, r0 int) error {
		copy(dst, x[r0*128:])
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "weight value 32007 (row 250, column 7) is +Inf") {
		t.Errorf("QuantizeRows error = %v", err)
	}
}
