package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend"
	"rlhfstation/engine/backend/cpu"
	"rlhfstation/quant"
)

// Each kernel against the CPU backend's function of the same op, on inputs rounded to bf16
// first (so the only differences are the GPU's bf16 outputs and float32 sums), with shapes
// that leave partial warps, blocks and tiles.

func TestKernelElementwise(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3*1024 + 77
	a, ar := putBF16(t, d, randn(rng, n, 2))
	b, br := putBF16(t, d, randn(rng, n, 2))
	out := allocT[bf16](t, d, n)
	want := make([]float32, n)

	run(t, d, func(o *owner) error { return o.residual(bfBuf(out, n), bfBuf(a, n), bfBuf(b, n), n) })
	cpu.ResidualForward(want, ar, br, n)
	closeTo(t, "residual", getBF16(t, d, out, n), want, 1e-6, 1/128.)
	// the float32 stream plus a bf16 projection, in place
	x := put(t, d, ar)
	run(t, d, func(o *owner) error { return o.residual(f32Buf(x, n), f32Buf(x, n), bfBuf(b, n), n) })
	closeTo(t, "residual f32 += bf16", get(t, d, x, n), want, 1e-6, 1e-6)

	run(t, d, func(o *owner) error { return o.gelu(out, a, n) })
	cpu.GELUForward(want, ar, n)
	closeTo(t, "gelu", getBF16(t, d, out, n), want, 1e-5, 1/128.)

	run(t, d, func(o *owner) error { return o.swiglu(out, a, b, n) })
	cpu.SwiGLUForward(want, ar, br, n)
	closeTo(t, "swiglu", getBF16(t, d, out, n), want, 1e-5, 1/128.)

	// backward kernels accumulate
	dout, doutr := putBF16(t, d, randn(rng, n, 1))
	acc0 := randn(rng, n, 1)
	da, dar := putBF16(t, d, acc0)
	db, dbr := putBF16(t, d, acc0)
	run(t, d, func(o *owner) error { return o.geluBack(da, dout, a, n) })
	cpu.GELUBackward(dar, doutr, ar, n)
	closeTo(t, "gelu backward", getBF16(t, d, da, n), dar, 2e-2, 1/64.)

	da, dar = putBF16(t, d, acc0)
	run(t, d, func(o *owner) error { return o.swigluBack(da, db, dout, a, b, n) })
	cpu.SwiGLUBackward(dar, dbr, doutr, ar, br, n)
	closeTo(t, "swiglu dgate", getBF16(t, d, da, n), dar, 2e-2, 1/64.)
	closeTo(t, "swiglu dup", getBF16(t, d, db, n), dbr, 2e-2, 1/64.)

	// casts round to nearest even, bit-exact
	f := randn(rng, n, 3)
	f[0], f[1] = float32(math.Inf(1)), 1+1.0/256 // a tie: rounds to even
	fp := put(t, d, f)
	run(t, d, func(o *owner) error { return o.castF32ToBF16(out, fp, n) })
	got := get(t, d, devptr[uint16](out), n)
	for i := range f {
		if got[i] != bf16Bits(f[i]) {
			t.Fatalf("cast_f32_bf16(%v) = %#x, want %#x", f[i], got[i], bf16Bits(f[i]))
		}
	}
	back := allocT[float32](t, d, n)
	run(t, d, func(o *owner) error { return o.castBF16ToF32(back, out, n) })
	for i, v := range get(t, d, back, n) {
		if v != bf16Round(f[i]) {
			t.Fatalf("cast_bf16_f32 at %d: %v, want %v", i, v, bf16Round(f[i]))
		}
	}
}

func TestKernelBias(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(3, 4))
	rows, cols := 37, 301
	x := randn(rng, rows*cols, 1)
	out, want := putBF16(t, d, x)
	bias := randn(rng, cols, 1)
	bp := put(t, d, bias)
	run(t, d, func(o *owner) error { return o.bias(out, bp, rows, cols) })
	cpu.BiasForward(want, bias, rows, cols)
	closeTo(t, "bias", getBF16(t, d, out, rows*cols), want, 1e-6, 1/128.)

	dout, doutr := putBF16(t, d, randn(rng, rows*cols, 1))
	db0 := randn(rng, cols, 1)
	db := put(t, d, db0)
	run(t, d, func(o *owner) error { return o.biasBack(db, dout, rows, cols) })
	cpu.BiasBackward(db0, doutr, rows, cols)
	closeTo(t, "bias backward", get(t, d, db, cols), db0, 1e-4, 1e-5)
}

func TestKernelNorms(t *testing.T) {
	d := device(t)
	b := &Backend{d: d}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range []struct{ rows, dim int }{{1, 7}, {19, 333}, {64, 1024}, {3, 4096}, {2, 8200}} {
		for _, stream := range []DType{F32, BF16} { // the residual stream's type
			rows, dim := sh.rows, sh.dim
			x := randn(rng, rows*dim, 1.5)
			in, inr := upStream(t, b, stream, x)
			w := randn(rng, dim, 1)
			bias := randn(rng, dim, 0.1)
			wp, bp := up(t, b, F32, w), up(t, b, F32, bias)
			out, _ := b.Alloc(BF16, rows*dim)
			rstd, _ := b.Alloc(F32, rows)
			mean, _ := b.Alloc(F32, rows)
			want, wr, wm := make([]float32, rows*dim), make([]float32, rows), make([]float32, rows)

			must(t, b.RMSNormForward(out, rstd, in, wp, rows, dim, 1e-5, 0))
			cpu.RMSNormForward(want, wr, inr, w, rows, dim, 1e-5, 0)
			closeTo(t, "rmsnorm", down(t, b, out), want, 1e-3, 1/100.)
			closeTo(t, "rmsnorm rstd", down(t, b, rstd), wr, 0, 1e-5)
			if stream == F32 {
				o32, _ := b.Alloc(F32, rows*dim)
				must(t, b.RMSNormForward(o32, rstd, in, wp, rows, dim, 1e-5, 0))
				closeTo(t, "rmsnorm to f32", down(t, b, o32), want, 1e-5, 1e-5)
			}
			if dim > normEach*1024 { // the forward's walked row (a decode norm longer than its block holds); the weight gradients' shared sums stop at 6,144
				continue
			}

			dout, doutr := upStream(t, b, stream, randn(rng, rows*dim, 1))
			dx0 := randn(rng, rows*dim, 0.5)
			dx, dxr := upStream(t, b, stream, dx0)
			dw0 := randn(rng, dim, 1)
			dw := up(t, b, F32, dw0)
			must(t, b.RMSNormBackward(dx, dw, dout, in, wp, rstd, rows, dim, 0))
			cpu.RMSNormBackward(dxr, dw0, doutr, inr, w, wr, rows, dim, 0)
			tol := 2e-2
			if stream == F32 {
				tol = 1e-4
			}
			closeTo(t, "rmsnorm dx", down(t, b, dx), dxr, tol, tol)
			closeTo(t, "rmsnorm dweight", down(t, b, dw), dw0, 1e-3, 1e-3)

			must(t, b.LayerNormForward(out, mean, rstd, in, wp, bp, rows, dim, 1e-5))
			cpu.LayerNormForward(want, wm, wr, inr, w, bias, rows, dim, 1e-5)
			closeTo(t, "layernorm", down(t, b, out), want, 1e-3, 1/100.)
			closeTo(t, "layernorm mean", down(t, b, mean), wm, 1e-6, 1e-5)

			dx, dxr = upStream(t, b, stream, dx0)
			dw0, db0 := randn(rng, dim, 1), randn(rng, dim, 1)
			dw, db := up(t, b, F32, dw0), up(t, b, F32, db0)
			must(t, b.LayerNormBackward(dx, dw, db, dout, in, wp, mean, rstd, rows, dim))
			cpu.LayerNormBackward(dxr, dw0, db0, doutr, inr, w, wm, wr, rows, dim)
			closeTo(t, "layernorm dx", down(t, b, dx), dxr, tol, tol)
			closeTo(t, "layernorm dweight", down(t, b, dw), dw0, 1e-3, 1e-3)
			closeTo(t, "layernorm dbias", down(t, b, db), db0, 1e-3, 1e-3)
		}
	}
}

// upStream uploads x as the residual stream's type, returning the values the device holds.
func upStream(t *testing.T, b *Backend, dt DType, x []float32) (Buf, []float32) {
	if dt == BF16 {
		return upBF16(t, b, x)
	}
	return up(t, b, F32, x), append([]float32(nil), x...)
}

func bfBuf(p devptr[bf16], n int) Buf     { return backend.Device(BF16, uintptr(p), n) }
func f32Buf(p devptr[float32], n int) Buf { return backend.Device(F32, uintptr(p), n) }

func TestKernelRoPEAndEmbedding(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(7, 8))
	rows, heads, hd, maxPos := 23, 3, 12, 40
	half := hd / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = math.Pow(10000, -2*float64(i)/float64(hd))
	}
	cs, sn := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := 0; p < maxPos; p++ {
		for i, f := range inv {
			s, c := math.Sincos(float64(p) * f)
			cs[p*half+i], sn[p*half+i] = float32(c), float32(s)
		}
	}
	pos := make([]int32, rows)
	for i := range pos {
		pos[i] = int32(rng.IntN(maxPos))
	}
	x, xr := putBF16(t, d, randn(rng, rows*heads*hd, 1))
	pp := put(t, d, pos)
	cp, sp := put(t, d, cs), put(t, d, sn)
	run(t, d, func(o *owner) error { return o.rope(x, pp, cp, sp, rows, heads, half, 2*half, 1) })
	tab := cpu.NewRoPETable(inv, maxPos)
	cpu.RoPEForward(xr, pos, heads, tab)
	closeTo(t, "rope", getBF16(t, d, x, rows*heads*hd), xr, 1e-2, 1/64.)
	run(t, d, func(o *owner) error { return o.rope(x, pp, cp, sp, rows, heads, half, 2*half, -1) })
	cpu.RoPEBackward(xr, pos, heads, tab)
	closeTo(t, "rope back", getBF16(t, d, x, rows*heads*hd), xr, 2e-2, 1/32.)

	vocab, dim := 50, 37
	wte, wter := putBF16(t, d, randn(rng, vocab*dim, 1))
	wpe, wper := putBF16(t, d, randn(rng, maxPos*dim, 1))
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab))
	}
	ip := put(t, d, ids)
	out := allocT[bf16](t, d, rows*dim)
	want := make([]float32, rows*dim)
	run(t, d, func(o *owner) error {
		return o.embed(bfBuf(out, rows*dim), ip, pp, bfBuf(wte, vocab*dim), bfBuf(wpe, maxPos*dim), rows, dim)
	})
	cpu.EmbeddingForward(want, ids, pos, wter, wper, dim)
	closeTo(t, "embedding", getBF16(t, d, out, rows*dim), want, 1e-6, 1/128.)
	out32 := allocT[float32](t, d, rows*dim)
	run(t, d, func(o *owner) error {
		return o.embed(f32Buf(out32, rows*dim), ip, pp, bfBuf(wte, vocab*dim), bfBuf(wpe, maxPos*dim), rows, dim)
	})
	closeTo(t, "embedding into f32", get(t, d, out32, rows*dim), want, 1e-6, 1e-6)
	run(t, d, func(o *owner) error {
		return o.embed(bfBuf(out, rows*dim), ip, pp, bfBuf(wte, vocab*dim), Buf{}, rows, dim)
	})
	cpu.EmbeddingForward(want, ids, pos, wter, nil, dim)
	closeTo(t, "embedding without positions", getBF16(t, d, out, rows*dim), want, 0, 0)

	doutr := randn(rng, rows*dim, 1)
	dout := put(t, d, doutr)
	dwte0 := randn(rng, vocab*dim, 1)
	dwte := put(t, d, dwte0)
	run(t, d, func(o *owner) error { return o.embedBack(dwte, 0, dout, ip, pp, rows, dim) })
	cpu.EmbeddingBackward(dwte0, nil, doutr, ids, pos, dim)
	closeTo(t, "embedding backward", get(t, d, dwte, vocab*dim), dwte0, 1e-5, 1e-5)
}

func TestKernelDequantBitExact(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct {
		rows, cols int
		opt        quant.Options
	}{
		{37, 190, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: true}},
		{64, 300, quant.Options{Type: quant.NF4, BlockSize: 64, DoubleQuant: false}},
		{33, 129, quant.Options{Type: quant.FP4, BlockSize: 32, DoubleQuant: true}},
		{300, 257, quant.Options{Type: quant.NF4, BlockSize: 256, DoubleQuant: true}},
	} {
		w, err := quant.Quantize(randn(rng, c.rows*c.cols, 0.05), c.rows, c.cols, "float32", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		q := uploadQ4(t, d, w)
		n := w.Len()
		out := allocT[bf16](t, d, n)
		run(t, d, func(o *owner) error { return o.dequant(out, q) })
		got := get(t, d, devptr[uint16](out), n)
		ref := make([]float32, n)
		w.Dequantize(ref)
		bad := 0
		for i := range ref {
			if got[i] != bf16Bits(ref[i]) {
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%+v [%d,%d]: %d of %d dequantized values differ from the CPU's (bf16-rounded)", c.opt, c.rows, c.cols, bad, n)
		}

		// the fused 4-bit product of a few rows against the dense product of the expansion
		for _, m := range []int{1, 3, 8} {
			x, xr := putBF16(t, d, randn(rng, m*c.cols, 1))
			y := allocT[bf16](t, d, m*c.rows)
			run(t, d, func(o *owner) error { return o.gemv4(y, c.rows, x, c.cols, q, m) })
			want := make([]float32, m*c.rows)
			cpu.MatmulForward(want, xr, ref, nil, m, c.cols, c.rows)
			closeTo(t, "gemv4", getBF16(t, d, y, m*c.rows), want, 2e-3, 1/64.)
		}
	}
}

func uploadQ4(t testing.TB, d *Device, w *quant.Weight) *q4 {
	t.Helper()
	shift, err := blockShift(w.BlockSize)
	if err != nil {
		t.Fatal(err)
	}
	code := w.Type.Code()
	q := &q4{rows: w.Rows, cols: w.Cols, blockShift: shift, packed: put(t, d, w.Packed), code: put(t, d, code[:]), offset: w.Offset}
	if w.Nested() {
		q.qabsmax, q.nestedAbsmax, q.nestedCode = put(t, d, w.QAbsmax), put(t, d, w.NestedAbsmax), put(t, d, w.NestedCode[:])
	} else {
		q.absmax = put(t, d, w.Absmax)
	}
	return q
}

func TestKernelDropout(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(21, 22))
	n, p := 20011, float32(0.3)
	x, xr := putBF16(t, d, randn(rng, n, 1))
	out := allocT[bf16](t, d, n)
	run(t, d, func(o *owner) error { return o.dropout(out, x, n, 12345, p) })
	got := getBF16(t, d, out, n)
	kept := 0
	for i, v := range got {
		if v != 0 {
			kept++
			if want := bf16Round(xr[i] / (1 - p)); v != want {
				t.Fatalf("kept value %d: %v, want %v", i, v, want)
			}
		}
	}
	// 20011 draws at 0.7: the kept share within 5 standard deviations (0.016)
	if frac := float64(kept) / float64(n); math.Abs(frac-0.7) > 0.016 {
		t.Errorf("kept %.4f of the values, want 0.7", frac)
	}
	// the backward applies the forward's mask (same seed), accumulating
	dout, doutr := putBF16(t, d, randn(rng, n, 1))
	dx, _ := putBF16(t, d, make([]float32, n))
	run(t, d, func(o *owner) error { return o.dropoutBack(dx, dout, n, 12345, p) })
	for i, v := range getBF16(t, d, dx, n) {
		want := float32(0)
		if got[i] != 0 || xr[i] == 0 {
			want = bf16Round(doutr[i] / (1 - p))
		}
		if got[i] == 0 && xr[i] != 0 {
			want = 0
		}
		if v != want {
			t.Fatalf("dropout backward %d: %v, want %v", i, v, want)
		}
	}
	// another seed, another mask
	run(t, d, func(o *owner) error { return o.dropout(out, x, n, 54321, p) })
	same := 0
	for i, v := range getBF16(t, d, out, n) {
		if (v != 0) == (got[i] != 0) {
			same++
		}
	}
	if same > n*7/10 {
		t.Errorf("masks of two seeds agree on %d of %d values", same, n)
	}
}
