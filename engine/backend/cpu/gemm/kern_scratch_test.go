package gemm

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

var _ = mk

func mk(name string, mr, nr int, f func(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)) *kernel {
	return &kernel{name: name, mr: mr, nr: nr, mc: 336, kc: 256, nc: 4096, run: func(kc int, a, b, c []float32, ldc int, alpha, beta float32, load bool) {
		_, _, _ = a[kc*mr-1], b[kc*nr-1], c[(mr-1)*ldc+nr-1]
		f(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, flag(load))
	}}
}

func variants() []*kernel {
	return []*kernel{avx512Kernel, avx2Kernel}
}

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}

func BenchmarkRawKernel(b *testing.B) {
	kc := envInt("KC", 256)
	for _, kr := range variants() {
		b.Run(kr.name, func(b *testing.B) {
			np := 336 / kr.mr
			a := make([]float32, kc*kr.mr*np)
			bb := make([]float32, kc*kr.nr)
			c := make([]float32, kr.mr*kr.nr*np)
			for b.Loop() {
				for i := 0; i < np; i++ {
					kr.run(kc, a[i*kc*kr.mr:], bb, c[i*kr.mr*kr.nr:], kr.nr, 1, 1, true)
				}
			}
			b.ReportMetric(float64(2*kc*kr.mr*kr.nr*np)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkTune(b *testing.B) {
	defer threads.Store(threads.Load())
	SetThreads(envInt("T", 1))
	for _, kr0 := range variants() {
		if os.Getenv("V") != "" && !contains(os.Getenv("V"), kr0.name) {
			continue
		}
		kr := *kr0
		kr.kc = envInt("KC", kr.kc)
		kr.mc = envInt("MC", kr.mc) / kr.mr * kr.mr
		kr.nc = envInt("NC", kr.nc) / kr.nr * kr.nr
		for _, s := range benchShapes {
			if os.Getenv("SHAPES") != "" && !contains(os.Getenv("SHAPES"), s.name) {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s", kr.name, s.name), func(b *testing.B) {
				a, bm := make([]float32, s.m*s.k), make([]float32, s.k*s.n)
				for i := range a {
					a[i] = float32(i % 7)
				}
				for i := range bm {
					bm[i] = float32(i % 5)
				}
				c := make([]float32, s.m*s.n)
				ld := func(t bool, r, c int) int {
					if t {
						return r
					}
					return c
				}
				op := operandB{b: bm, ld: ld(s.transB, s.k, s.n), trans: s.transB}
				run := func() { sgemm(&kr, s.transA, s.m, s.n, s.k, 1, a, ld(s.transA, s.m, s.k), op, 0, c, s.n) }
				run()
				for b.Loop() {
					run()
				}
				b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

func contains(list, s string) bool {
	for _, x := range splitComma(list) {
		if x == s {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

func BenchmarkSmall(b *testing.B) {
	defer threads.Store(threads.Load())
	SetThreads(envInt("T", 1))
	for _, m := range []int{1, 4, 8, 16, 32, 64} {
		for _, nk := range [][2]int{{1536, 512}, {512, 1536}, {8192, 512}} {
			for _, dot := range []bool{true, false} {
				kr := *avx512Kernel
				if dot {
					kr.smallM = 1 << 30
				} else {
					kr.smallM = 0
				}
				n, k := nk[0], nk[1]
				b.Run(fmt.Sprintf("m%d_n%d_k%d/dot=%v", m, n, k, dot), func(b *testing.B) {
					a, w, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
					run := func() { sgemm(&kr, false, m, n, k, 1, a, k, operandB{b: w, ld: k, trans: true}, 0, c, n) }
					run()
					for b.Loop() {
						run()
					}
					b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func BenchmarkThreshold(b *testing.B) {
	defer threads.Store(threads.Load())
	defer func(w int) { minParallelWork = w }(minParallelWork)
	minParallelWork = 0
	for _, sz := range []int{48, 64, 80, 96, 128, 160} {
		for _, nt := range []int{1, 2} {
			b.Run(fmt.Sprintf("%d/t%d", sz, nt), func(b *testing.B) {
				SetThreads(nt)
				a, w, c := make([]float32, sz*sz), make([]float32, sz*sz), make([]float32, sz*sz)
				for b.Loop() {
					Sgemm(false, false, sz, sz, sz, 1, a, sz, w, sz, 0, c, sz)
				}
				b.ReportMetric(2*float64(sz*sz*sz)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

var loraShapes = []benchShape{
	{"lora_xA_NT", false, true, 2048, 16, 512},
	{"lora_xaB_NT", false, true, 2048, 512, 16},
	{"lora_gB_TN", true, false, 512, 16, 2048},
	{"lora_dxa_NN", false, false, 2048, 16, 512},
	{"lora_gA_TN", true, false, 16, 512, 2048},
	{"lora_dx_NN", false, false, 2048, 512, 16},
}

func BenchmarkLora(b *testing.B) {
	for _, s := range loraShapes {
		for _, nt := range []int{2, 1} {
			b.Run(fmt.Sprintf("t%d/%s", nt, s.name), func(b *testing.B) { benchShapeRun(b, avx512Kernel, nt, s) })
		}
	}
}
