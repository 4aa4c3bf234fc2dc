package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"rlhfstation/engine/backend/cpu"
)

func TestKernelLogProb(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(13, 14))
	rows, vocab := 7, 5003
	logits := randn(rng, rows*vocab, 3)
	targets := []int32{0, 5002, -1, 17, 4000, 3, 2}
	lp := put(t, d, logits)
	tp := put(t, d, targets)
	for _, invT := range []float32{1, 1 / 0.7} {
		logp, ent := allocT[float32](t, d, rows), allocT[float32](t, d, rows)
		run(t, d, func(o *owner) error { return o.logprobs(logp, ent, lp, tp, rows, vocab, invT) })
		wl, we := make([]float32, rows), make([]float32, rows)
		cpu.LogProbForward(wl, we, logits, targets, rows, vocab, invT)
		closeTo(t, "log-prob", get(t, d, logp, rows), wl, 1e-4, 1e-5)
		closeTo(t, "entropy", get(t, d, ent, rows), we, 1e-4, 1e-5)

		dlogp, dent := randn(rng, rows, 1), randn(rng, rows, 1)
		dlogp[3] = 0
		dp, de := put(t, d, dlogp), put(t, d, dent)
		for _, withEnt := range []bool{false, true} {
			want := randn(rng, rows*vocab, 1e-3)
			dl, want := putBF16(t, d, want)
			var dep devptr[float32]
			var wantEnt []float32
			if withEnt {
				dep, wantEnt = de, dent
			}
			run(t, d, func(o *owner) error { return o.logprobsBack(bfBuf(dl, rows*vocab), lp, dp, dep, tp, rows, vocab, invT) })
			cpu.LogProbBackward(want, dlogp, wantEnt, logits, targets, rows, vocab, invT)
			closeTo(t, "log-prob backward", getBF16(t, d, dl, rows*vocab), want, 1e-5, 1/128.)
		}
	}

	// NTL's digit distribution
	ids := []int32{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 4321}
	vals := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7}
	out := allocT[float32](t, d, rows*10)
	ip, vp := put(t, d, ids), put(t, d, vals)
	run(t, d, func(o *owner) error { return o.digits(out, lp, ip, vp, len(ids), rows, vocab) })
	got := get(t, d, out, rows*10)
	for r := 0; r < rows; r++ {
		var m float64 = math.Inf(-1)
		for _, id := range ids {
			m = math.Max(m, float64(logits[r*vocab+int(id)]))
		}
		var s float64
		p := make([]float64, 10)
		for i, id := range ids {
			e := math.Exp(float64(logits[r*vocab+int(id)]) - m)
			s += e
			p[vals[i]] += e
		}
		for dg := 0; dg < 10; dg++ {
			if math.Abs(float64(got[r*10+dg])-p[dg]/s) > 1e-5 {
				t.Errorf("digit probability row %d digit %d: %v, want %v", r, dg, got[r*10+dg], p[dg]/s)
			}
		}
	}
}

// TestGEMMRowMajor checks the row-major to column-major mapping of every transpose
// combination, leading dimensions above the minimum, bf16 and f32, and a strided batch.
func TestGEMMRowMajor(t *testing.T) {
	d := device(t)
	rng := rand.New(rand.NewPCG(17, 18))
	m, n, k := 13, 9, 21
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			ar, ac := m, k
			if ta {
				ar, ac = k, m
			}
			br, bc := k, n
			if tb {
				br, bc = n, k
			}
			lda, ldb, ldc := ac+3, bc+1, n+2
			A, B := randn(rng, ar*lda, 1), randn(rng, br*ldb, 1)
			C0 := randn(rng, m*ldc, 1)
			ap, Ar := putBF16(t, d, A)
			bp, Br := putBF16(t, d, B)
			cp := put(t, d, C0)
			run(t, d, func(o *owner) error {
				return o.gemm(&gemmArgs{transA: ta, transB: tb, m: m, n: n, k: k, alpha: 0.5, beta: 2,
					a: uintptr(ap), aType: dtBF16, lda: lda, b: uintptr(bp), bType: dtBF16, ldb: ldb, c: uintptr(cp), cType: dtF32, ldc: ldc})
			})
			want := append([]float32(nil), C0...)
			refGEMM(ta, tb, m, n, k, 0.5, Ar, lda, Br, ldb, 2, want, ldc)
			closeTo(t, "gemm", get(t, d, cp, m*ldc), want, 1e-4, 1e-4)
		}
	}
	// strided batch of 3, f32
	batch := 3
	A, B := randn(rng, batch*m*k, 1), randn(rng, batch*k*n, 1)
	ap, bp := put(t, d, A), put(t, d, B)
	cp := allocT[float32](t, d, batch*m*n)
	run(t, d, func(o *owner) error {
		return o.gemm(&gemmArgs{m: m, n: n, k: k, alpha: 1, a: uintptr(ap), aType: dtF32, lda: k, strideA: int64(m * k),
			b: uintptr(bp), bType: dtF32, ldb: n, strideB: int64(k * n), c: uintptr(cp), cType: dtF32, ldc: n, strideC: int64(m * n), batch: batch})
	})
	want := make([]float32, batch*m*n)
	for i := 0; i < batch; i++ {
		refGEMM(false, false, m, n, k, 1, A[i*m*k:], k, B[i*k*n:], n, 0, want[i*m*n:], n)
	}
	closeTo(t, "batched gemm", get(t, d, cp, batch*m*n), want, 1e-4, 1e-4)
}

func refGEMM(ta, tb bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for l := 0; l < k; l++ {
				var av, bv float32
				if ta {
					av = a[l*lda+i]
				} else {
					av = a[i*lda+l]
				}
				if tb {
					bv = b[j*ldb+l]
				} else {
					bv = b[l*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			c[i*ldc+j] = alpha*float32(s) + beta*c[i*ldc+j]
		}
	}
}
