//go:build !purego

package cpu

import (
	"fmt"
	"math"
	"testing"

	"golang.org/x/sys/cpu"

	"rlhfstation/quant"
)

// TestQ4Row512MatchesDequantized: the AVX-512 one-row kernel (and the Go reference in its
// order of x) against x·dequantize(W)ᵀ summed in float64, on shapes whose rows split unevenly
// over the goroutines, NF4 and FP4, blocks of 64 and 256, with an outlier block. It runs only
// where the CPU has AVX-512 (the project's Zen 3 has none); elsewhere it says so and skips.
func TestQ4Row512MatchesDequantized(t *testing.T) {
	if !cpu.X86.HasAVX512F || q4dotKernel != "avx2" {
		t.Skip("no AVX-512 on this CPU: the AVX-512 one-row kernel is not run here")
	}
	defer func(on, on16 bool, k string) { q4row512, q4row16On, q4dotKernel = on, on16, k }(q4row512, q4row16On, q4dotKernel)
	q4row16On = false // one row alone: the AVX-512 kernel, not the int16 one
	cases := []struct {
		out, in int
		opt     quant.Options
	}{
		{1, 64, quant.Default()},
		{7, 128, quant.Options{Type: quant.NF4, BlockSize: 64}},
		{131, 896, quant.Default()},
		{37, 4864, quant.Options{Type: quant.FP4, BlockSize: 256, DoubleQuant: true}},
		{300, 192, quant.Options{Type: quant.NF4, BlockSize: 128, DoubleQuant: true}},
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
		for _, rows := range []int{1, 3, 9, 33} {
			x := randn(rows*c.in, uint64(500+rows))
			for _, k := range []string{"avx2", "go"} {
				q4row512, q4dotKernel = true, k
				y := randn(rows*c.out, 7) // overwritten
				d.MulT(y, x, rows)
				for r := 0; r < rows; r++ {
					for o := 0; o < c.out; o++ {
						var s, a float64
						for i := 0; i < c.in; i++ {
							p := float64(x[r*c.in+i]) * float64(dense[o*c.in+i])
							s += p
							a += math.Abs(p)
						}
						got := float64(y[r*c.out+o])
						if e := math.Abs(got - s); e > 1e-6*a || math.IsNaN(got) {
							t.Fatalf("avx512 (%s) %d×%d %v rows=%d: y[%d,%d] = %v, want %v", k, c.out, c.in, c.opt, rows, r, o, got, s)
						}
					}
				}
			}
		}
	}
}

// BenchmarkQ4Row512: the one-row NF4 product with the AVX-512 kernel against the AVX2 one, on
// Qwen2.5-0.5B's MLP shapes; GB/s counts the codes and the scales the kernels read. Skips
// without AVX-512.
// run: go test ./engine/backend/cpu -run X -bench Q4Row512 -cpu 1
func BenchmarkQ4Row512(b *testing.B) {
	if !cpu.X86.HasAVX512F || q4dotKernel != "avx2" {
		b.Skip("no AVX-512 on this CPU")
	}
	defer func(on, on16 bool) { q4row512, q4row16On = on, on16 }(q4row512, q4row16On)
	q4row16On = false
	for _, s := range []struct{ out, in int }{{4864, 896}, {896, 4864}} {
		w, err := quant.Quantize(randn(s.out*s.in, 1), s.out, s.in, "", quant.Default())
		if err != nil {
			b.Fatal(err)
		}
		d := NewQ4Dot(w)
		x := randn(s.in, 2)
		y := make([]float32, s.out)
		for _, on := range []bool{false, true} {
			name := map[bool]string{false: "avx2", true: "avx512"}[on]
			b.Run(fmt.Sprintf("%dx%d/%s", s.out, s.in, name), func(b *testing.B) {
				q4row512 = on
				benchBytes(b, len(w.Packed)+d.Bytes(), func() { d.MulT(y, x, 1) })
			})
		}
		q4row512 = false
		// The int16 one-row kernels: q4row16 and, with AVX-512BW, q4row16AVX512.
		for _, on := range []bool{false, true} {
			if on && !cpu.X86.HasAVX512BW {
				continue
			}
			name := map[bool]string{false: "avx2-int16", true: "avx512-int16"}[on]
			b.Run(fmt.Sprintf("%dx%d/%s", s.out, s.in, name), func(b *testing.B) {
				defer func(a, b bool) { q4row16On, q4row16On512 = a, b }(q4row16On, q4row16On512)
				q4row16On, q4row16On512 = true, on
				benchBytes(b, len(w.Packed)+d.Bytes(), func() { d.MulT(y, x, 1) })
			})
		}
	}
}
