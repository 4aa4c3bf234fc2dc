//go:build !purego

package cpu

import (
	"math"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"

	"rlhfstation/quant"
)

const asmFile = "q4dot_amd64.s"

func tablesBytes(t *q4Tables) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(t)), unsafe.Sizeof(*t))
}

// simKernel loads TEXT ·name or fails the test.
func simKernel(t *testing.T, name string) *asmSim {
	t.Helper()
	s, err := loadAsmFunc(asmFile, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	for i := range b {
		seed = seed*6364136223846793005 + 1442695040888963407
		b[i] = byte(seed >> 33)
	}
	return b
}

func simSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: y[%d] = %v under the interpreter, %v on the CPU", what, i, got[i], want[i])
		}
	}
}

// TestAsmSimMatchesTheCPU holds the interpreter to the CPU: every AVX2 kernel of
// q4dot_amd64.s, run natively and under the interpreter on the same random inputs (several
// rows and chunks, strides, a y that is added to), must give the same bits. The kernels use
// every instruction the AVX-512 kernel shares with them (VPERMPS's operand order, VPMOVZXBD,
// the FMA's single rounding, the horizontal sums, the row and chunk loops).
func TestAsmSimMatchesTheCPU(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("no AVX2/FMA on this CPU: the native side of the comparison cannot run")
	}
	tables := newQ4Tables(quant.NF4Code)
	const rows, n = 5, 3
	packed := randBytes(rows*n*q4Chunk/2, 1)
	scales := randn(rows*n, 2)
	t.Run("q4row1", func(t *testing.T) {
		x, y := randn(n*q4Chunk, 3), randn(rows, 4)
		ys := append([]float32(nil), y...)
		q4row1(rows, n, &packed[0], &scales[0], &x[0], &y[0], tables)
		s := simKernel(t, "q4row1")
		s.Run(rows, n, s.ptr(packed), s.ptr(bytesOf(scales)), s.ptr(bytesOf(x)), s.ptr(bytesOf(ys)), s.ptr(tablesBytes(tables)))
		simSameBits(t, "q4row1", ys, y)
	})
	t.Run("q4row16", func(t *testing.T) {
		// an odd chunk count: the two-chunk loop and the one-chunk tail
		x16 := make([]int16, n*q4X16Len)
		quantX16(x16, randn(n*q4Chunk, 12))
		y := randn(rows, 13)
		ys := append([]float32(nil), y...)
		q4row16(rows, n, &packed[0], &scales[0], &x16[0], &y[0], tables)
		s := simKernel(t, "q4row16")
		s.Run(rows, n, s.ptr(packed), s.ptr(bytesOf(scales)), s.ptr(bytesOf(x16)), s.ptr(bytesOf(ys)), s.ptr(tablesBytes(tables)))
		simSameBits(t, "q4row16", ys, y)
	})
	for _, k := range []int{2, 4, 8} {
		t.Run("q4dot"+string(rune('0'+k)), func(t *testing.T) {
			ldx, ldy := n*q4Chunk+64, 3
			x, y := randn(k*ldx, 5), randn(k*ldy, 6)
			ys := append([]float32(nil), y...)
			fn := map[int]func(int, *byte, *float32, *float32, int, *float32, int, *q4Tables){2: q4dot2, 4: q4dot4, 8: q4dot8}[k]
			fn(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, tables)
			s := simKernel(t, "q4dot"+string(rune('0'+k)))
			s.Run(n, s.ptr(packed), s.ptr(bytesOf(scales)), s.ptr(bytesOf(x)), uint64(ldx), s.ptr(bytesOf(ys)), uint64(ldy), s.ptr(tablesBytes(tables)))
			simSameBits(t, "q4dot", ys, y)
		})
	}
	t.Run("quantX16AVX2", func(t *testing.T) {
		// every kind of chunk of x16Row: NaN, ±Inf, zeros, denormals, ties and near ties
		const n = 10
		x := x16Row(n, 5)
		got, want := make([]int16, n*q4X16Len), make([]int16, n*q4X16Len)
		quantX16AVX2(n, &x[0], &want[0])
		s := simKernel(t, "quantX16AVX2")
		s.Run(n, s.ptr(bytesOf(x)), s.ptr(bytesOf(got)))
		if i := slices.Compare(got, want); i != 0 {
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("chunk %d slot %d = %d under the interpreter, %d on the CPU", j/q4X16Len, j%q4X16Len, got[j], want[j])
				}
			}
		}
	})
	// The int16 kernels: x quantized per chunk (quantX16, so every row's factor differs),
	// the int16 code book.
	for _, k := range []int{2, 4, 8} {
		name := map[int]string{2: "q4row16x2", 4: "q4dot16x4", 8: "q4dot16x8"}[k]
		t.Run(name, func(t *testing.T) {
			ldx, ldy := n*q4X16Len+q4X16Len, 3
			xf := randn(k*ldx/q4X16Len*q4Chunk, 12)
			xf[5] = 30
			x := make([]int16, k*ldx)
			for i := 0; i < k; i++ {
				quantX16(x[i*ldx:(i+1)*ldx], xf[i*ldx/q4X16Len*q4Chunk:(i+1)*ldx/q4X16Len*q4Chunk])
			}
			y := randn(k*ldy+rows, 13)
			ys := append([]float32(nil), y...)
			s := simKernel(t, name)
			switch k {
			case 2: // the row loop too: rows weight rows into y[r] and y[ldy+r]
				ldy = rows + 1
				q4row16x2(rows, n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, tables)
				s.Run(rows, n, s.ptr(packed), s.ptr(bytesOf(scales)), s.ptr(bytesOf(x)), uint64(ldx), s.ptr(bytesOf(ys)), uint64(ldy), s.ptr(tablesBytes(tables)))
			case 4:
				q4dot16x4(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, tables)
			case 8:
				q4dot16x8(n, &packed[0], &scales[0], &x[0], ldx, &y[0], ldy, tables)
			}
			if k != 2 {
				s.Run(n, s.ptr(packed), s.ptr(bytesOf(scales)), s.ptr(bytesOf(x)), uint64(ldx), s.ptr(bytesOf(ys)), uint64(ldy), s.ptr(tablesBytes(tables)))
			}
			simSameBits(t, name, ys, y)
			// The kernel is not the identity on y: every row it writes moved.
			y0 := randn(k*ldy+rows, 13)
			for i := 0; i < k; i++ {
				if y[i*ldy] == y0[i*ldy] {
					t.Fatalf("%s: y[%d] unchanged", name, i*ldy)
				}
			}
		})
	}
	ldw := n*q4Chunk + 32
	wf := randn(rows*ldw, 7)
	wb := make([]uint16, len(wf))
	for i, v := range wf {
		wb[i] = uint16(math.Float32bits(v) >> 16)
	}
	t.Run("f32row1+bf16row1", func(t *testing.T) {
		for _, bf := range []bool{false, true} {
			x, y := randn(n*q4Chunk, 8), randn(rows, 9)
			ys := append([]float32(nil), y...)
			name := "f32row1"
			s := simKernel(t, map[bool]string{false: "f32row1", true: "bf16row1"}[bf])
			if bf {
				name = "bf16row1"
				bf16row1(rows, n, &wb[0], ldw, &x[0], &y[0])
				s.Run(rows, n, s.ptr(bytesOf(wb)), uint64(ldw), s.ptr(bytesOf(x)), s.ptr(bytesOf(ys)))
			} else {
				f32row1(rows, n, &wf[0], ldw, &x[0], &y[0])
				s.Run(rows, n, s.ptr(bytesOf(wf)), uint64(ldw), s.ptr(bytesOf(x)), s.ptr(bytesOf(ys)))
			}
			simSameBits(t, name, ys, y)
		}
	})
	for _, k := range []int{1, 2, 4, 8} {
		t.Run("f32dot+bf16dot"+string(rune('0'+k)), func(t *testing.T) {
			ldx, ldy := n*q4Chunk+16, 2
			for _, bf := range []bool{false, true} {
				x, y := randn(k*ldx, 10), randn(k*ldy, 11)
				ys := append([]float32(nil), y...)
				if bf {
					fn := map[int]func(int, *uint16, *float32, int, *float32, int){1: bf16dot1, 2: bf16dot2, 4: bf16dot4, 8: bf16dot8}[k]
					fn(n, &wb[0], &x[0], ldx, &y[0], ldy)
					s := simKernel(t, "bf16dot"+string(rune('0'+k)))
					s.Run(n, s.ptr(bytesOf(wb)), s.ptr(bytesOf(x)), uint64(ldx), s.ptr(bytesOf(ys)), uint64(ldy))
				} else {
					fn := map[int]func(int, *float32, *float32, int, *float32, int){1: f32dot1, 2: f32dot2, 4: f32dot4, 8: f32dot8}[k]
					fn(n, &wf[0], &x[0], ldx, &y[0], ldy)
					s := simKernel(t, "f32dot"+string(rune('0'+k)))
					s.Run(n, s.ptr(bytesOf(wf)), s.ptr(bytesOf(x)), uint64(ldx), s.ptr(bytesOf(ys)), uint64(ldy))
				}
				simSameBits(t, "dot", ys, y)
			}
		})
	}
}

// TestQ4Row512UnderTheInterpreter runs the AVX-512 one-row kernel's own text (q4row1AVX512)
// under the interpreter, which this CPU cannot run natively: against the Go reference in the
// kernel's order of x (the same sums in the same order: within a few float32 roundings) and
// against x·dequantize(W)ᵀ in float64, on NF4 and FP4, blocks of 64 and 256, an outlier block.
// A kernel that read the nibbles in the other order, or x in the AVX2 kernel's order, fails.
func TestQ4Row512UnderTheInterpreter(t *testing.T) {
	cases := []struct {
		out, in int
		opt     quant.Options
	}{
		{1, 64, quant.Default()},
		{7, 128, quant.Options{Type: quant.NF4, BlockSize: 64}},
		{13, 896, quant.Default()},
		{3, 4864, quant.Options{Type: quant.FP4, BlockSize: 256, DoubleQuant: true}},
	}
	for ci, c := range cases {
		wf := randn(c.out*c.in, uint64(40+ci))
		wf[3] = -11
		w, err := quant.Quantize(wf, c.out, c.in, "", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		dense := make([]float32, c.out*c.in)
		w.Dequantize(dense)
		x := randn(c.in, uint64(500+ci))
		n := c.in / q4Chunk
		for _, order := range []*[q4Chunk]uint8{&q4Row1AVX512, &q4Row1AVX2} {
			xp := make([]float32, c.in)
			for g := 0; g < c.in; g += q4Chunk {
				for s, v := range order {
					xp[g+s] = x[g+int(v)]
				}
			}
			y := make([]float32, c.out)
			s := simKernel(t, "q4row1AVX512")
			s.Run(uint64(c.out), uint64(n), s.ptr(w.Packed), s.ptr(bytesOf(d.scales)), s.ptr(bytesOf(xp)), s.ptr(bytesOf(y)), s.ptr(tablesBytes(d.tables)))
			ref := make([]float32, c.out)
			q4row1Go(n, w.Packed, d.scales, xp, ref, d.tables, &q4Row1AVX512)
			bad := 0
			for o := 0; o < c.out; o++ {
				var sum, abs float64
				for i := 0; i < c.in; i++ {
					p := float64(x[i]) * float64(dense[o*c.in+i])
					sum += p
					abs += math.Abs(p)
				}
				if e := math.Abs(float64(y[o]) - sum); e > 1e-6*abs || math.IsNaN(float64(y[o])) {
					bad++
					if order == &q4Row1AVX512 {
						t.Errorf("%d×%d %v: y[%d] = %v under the interpreter, want %v (x·Wᵀ in float64)", c.out, c.in, c.opt, o, y[o], sum)
					}
				}
				if e := math.Abs(float64(y[o]) - float64(ref[o])); order == &q4Row1AVX512 && e > 1e-6*abs {
					t.Errorf("%d×%d: y[%d] = %v under the interpreter, %v from the Go reference in its order", c.out, c.in, o, y[o], ref[o])
				}
			}
			// The check can fail: x in the AVX2 kernel's order gives wrong sums.
			if order == &q4Row1AVX2 && bad == 0 && c.in > q4Chunk/2 {
				t.Errorf("%d×%d: x in the AVX2 order went unnoticed", c.out, c.in)
			}
		}
	}
}

// TestQ4Row16On512UnderTheInterpreter runs the AVX-512 int16 one-row kernel's text
// (q4row16AVX512) under the interpreter (natively too where the CPU has AVX-512BW, which must
// give the same bits) on q4row16's cases: each output within check16's bound of the exact
// product, and within float32 rounding of the Go reference's identical integer sums. x with
// each half of a chunk in the bytes' own order (the kernel's VPERMQ left out) must fail.
func TestQ4Row16On512UnderTheInterpreter(t *testing.T) {
	var natural [q4Chunk]uint8 // slot s: value 2s, then 2(s-32)+1
	for s := range natural {
		natural[s] = uint8(2*(s%32) + s/32)
	}
	for ci, c := range q4Row16Cases {
		wf := randn(c.out*c.in, uint64(60+ci))
		wf[5] = 9
		w, err := quant.Quantize(wf, c.out, c.in, "", c.opt)
		if err != nil {
			t.Fatal(err)
		}
		d := NewQ4Dot(w)
		n := c.in / q4Chunk
		x := row16X(c.in, uint64(700+ci))
		sl := newRow16Slips(d, x, n)
		run := func(xq []int16) []float32 {
			y := make([]float32, c.out)
			s := simKernel(t, "q4row16AVX512")
			s.Run(uint64(c.out), uint64(n), s.ptr(w.Packed), s.ptr(bytesOf(d.scales)), s.ptr(bytesOf(xq)), s.ptr(bytesOf(y)), s.ptr(tablesBytes(d.tables)))
			return y
		}
		y := run(sl.good)
		if err := check16(d, x, y); err != nil {
			t.Fatalf("%d×%d %v under the interpreter: %v", c.out, c.in, c.opt, err)
		}
		ref := make([]float32, c.out)
		q4row16Go(n, w.Packed, d.scales, sl.good, ref, d.tables)
		for o := range ref {
			if e := math.Abs(float64(y[o]) - float64(ref[o])); e > 1e-6*mag16(d, sl.good, o) {
				t.Fatalf("%d×%d: y[%d] = %v under the interpreter, the Go reference %v", c.out, c.in, o, y[o], ref[o])
			}
		}
		if cpu.X86.HasAVX512BW {
			yn := make([]float32, c.out)
			q4row16AVX512(c.out, n, &w.Packed[0], &d.scales[0], &sl.good[0], &yn[0], d.tables)
			simSameBits(t, "q4row16AVX512", y, yn)
		}
		if c.in > q4Chunk/2 && check16(d, x, run(sl.requant(x16Max, &natural))) == nil {
			t.Errorf("%d×%d: x in the bytes' own order went unnoticed", c.out, c.in)
		}
	}
}
