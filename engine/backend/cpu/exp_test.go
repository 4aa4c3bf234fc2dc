package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	xcpu "golang.org/x/sys/cpu"
)

// expKernels lists the vector kernels this CPU can run, the pure-Go one first.
func expKernels() []string {
	ks := []string{"go"}
	if expKernel != "go" && xcpu.X86.HasAVX2 {
		ks = append(ks, "avx2")
	}
	if expKernel == "avx512" {
		ks = append(ks, "avx512")
	}
	return ks
}

// withExpKernel runs fn with kernel k selected.
func withExpKernel(k string, fn func()) {
	saved := expKernel
	expKernel = k
	defer func() { expKernel = saved }()
	fn()
}

// expInputs are values around everything expf treats specially: both cut-offs and their
// float32 neighbours, where 2ⁿ needs two steps, subnormal results, zeros, infinities, NaN,
// a dense sweep and random values of every magnitude.
func expInputs() []float32 {
	v := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, -0.5,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, 1e-30, -1e-30}
	for _, c := range []float32{88.72283, -87.33654, 88.376, 88.3763, -86.0, 0.34657359, -0.34657359} {
		x := c
		for range 8 {
			v = append(v, x)
			x = math.Nextafter32(x, float32(math.Inf(-1)))
		}
		x = c
		for range 8 {
			x = math.Nextafter32(x, float32(math.Inf(1)))
			v = append(v, x)
		}
	}
	for x := float32(-100); x < 100; x += 0.0137 {
		v = append(v, x)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		v = append(v, float32(r.NormFloat64()*math.Pow(10, r.Float64()*6-4)))
	}
	return v
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// Every kernel equals the scalar expf bit for bit, at every length (vector body and tail),
// for the affine forms the callers use, in place or not.
func TestExpAffineBitExact(t *testing.T) {
	in := expInputs()
	affine := [][3]float32{{1, 0, 0}, {-1, 0, 0}, {2, 0, 0}, {0.7, -3.25, 0}, {1.3, -1.5, -0.37}, {1, -20, -70}}
	for _, k := range expKernels() {
		withExpKernel(k, func() {
			for _, a := range affine {
				got := make([]float32, len(in))
				expAffine(got, in, a[0], a[1], a[2])
				for i, x := range in {
					want := expf(float32(x*a[0]) + a[1] + a[2])
					if !sameBits(got[i], want) {
						t.Fatalf("%s: exp(%g·%g + %g + %g) = %g (%#08x), expf %g (%#08x)", k, x, a[0], a[1], a[2],
							got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
					}
				}
			}
			for n := 0; n <= 40; n++ {
				src := append([]float32(nil), in[100:100+n]...)
				want := make([]float32, n)
				expAffineGo(want, src, 1.5, -0.25, 0)
				expAffine(src, src, 1.5, -0.25, 0) // in place
				for i := range want {
					if !sameBits(src[i], want[i]) {
						t.Fatalf("%s: length %d, index %d: %g, want %g", k, n, i, src[i], want[i])
					}
				}
			}
		})
	}
	t.Logf("kernels checked: %v", expKernels())
}

// BenchmarkExpAffine: exp over 4096 values by each kernel (ns per value = ns/op / 4096).
// run: go test ./engine/backend/cpu -run X -bench ExpAffine
func BenchmarkExpAffine(b *testing.B) {
	src := make([]float32, 4096)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range src {
		src[i] = float32(r.NormFloat64() * 4)
	}
	dst := make([]float32, len(src))
	for _, k := range expKernels() {
		b.Run(k, func(b *testing.B) {
			withExpKernel(k, func() {
				b.SetBytes(4 * int64(len(src)))
				for b.Loop() {
					expAffine(dst, src, 1, -0.5, 0)
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/value")
		})
	}
}

// The ops that use the vector exp give the bits of their former scalar loops (kept here as
// the reference), with every kernel. (On amd64, where the kernels run, Go never fuses a
// multiply and an add; elsewhere only the Go kernel is checked.)
func TestExpCallersBitExact(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the scalar references assume no fused multiply-add, as on amd64")
	}
	r := rand.New(rand.NewPCG(5, 6))
	randn := func(n int, s float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * s)
		}
		return v
	}
	same := func(k, what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%s: %s[%d] = %g, scalar loop %g", k, what, i, got[i], want[i])
			}
		}
	}
	const n = 1000 // not a multiple of the chunk or the vector width
	x, up, dout := randn(n, 3), randn(n, 1), randn(n, 1)
	x[7] = 0
	x[8] = float32(math.Copysign(0, -1))
	x[9] = 100
	x[10] = -100
	const rows, vocab = 3, 700
	logits := randn(rows*vocab, 4)
	targets := []int32{5, -1, 699}
	dlogp := []float32{0.3, 0.5, -1.2}
	const invTemp = 1 / float32(0.7)

	// The former scalar loops.
	wantGELU, wantGELUB := make([]float32, n), make([]float32, n)
	wantSw, wantSwG, wantSwU := make([]float32, n), make([]float32, n), make([]float32, n)
	for i, v := range x {
		wantGELU[i] = 0.5 * v * (1 + tanhf(geluC*(v+0.044715*v*v*v)))
		th := tanhf(geluC * (v + 0.044715*v*v*v))
		wantGELUB[i] += dout[i] * (0.5*(1+th) + 0.5*v*(1-th*th)*geluC*(1+3*0.044715*v*v))
		wantSw[i] = v / (1 + expf(-v)) * up[i]
		s := 1 / (1 + expf(-v))
		wantSwG[i] += dout[i] * up[i] * s * (1 + v*(1-s))
		wantSwU[i] += dout[i] * v * s
	}
	wantLP, wantH := make([]float32, rows), make([]float32, rows)
	wantD := make([]float32, rows*vocab)
	wantSoft := append([]float32(nil), logits[:vocab]...)
	for r := 0; r < rows; r++ {
		row := logits[r*vocab : (r+1)*vocab]
		mx := float32(math.Inf(-1))
		for _, v := range row {
			mx = max(mx, v*invTemp)
		}
		var s float64
		for _, v := range row {
			s += float64(expf(v*invTemp - mx))
		}
		lse := math.Log(s)
		if t := targets[r]; t >= 0 {
			wantLP[r] = float32(float64(row[t]*invTemp-mx) - lse)
			g, lsef := dlogp[r]*invTemp, float32(lse)
			for j, v := range row {
				wantD[r*vocab+j] -= g * expf(v*invTemp-mx-lsef)
			}
			wantD[r*vocab+int(t)] += g
		}
		var spz float64
		for _, v := range row {
			z := v*invTemp - mx
			spz += float64(expf(z-float32(lse)) * z)
		}
		wantH[r] = float32(lse - spz)
	}
	{
		mx := float32(math.Inf(-1))
		for _, v := range wantSoft {
			mx = max(mx, v)
		}
		var sum float64
		for j, v := range wantSoft {
			e := expf(v - mx)
			wantSoft[j] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		for j := range wantSoft {
			wantSoft[j] *= inv
		}
	}

	for _, k := range expKernels() {
		withExpKernel(k, func() {
			got := make([]float32, n)
			GELUForward(got, x, n)
			same(k, "GELUForward", got, wantGELU)
			clear(got)
			GELUBackward(got, dout, x, n)
			same(k, "GELUBackward", got, wantGELUB)
			SwiGLUForward(got, x, up, n)
			same(k, "SwiGLUForward", got, wantSw)
			dg, du := make([]float32, n), make([]float32, n)
			SwiGLUBackward(dg, du, dout, x, up, n)
			same(k, "SwiGLUBackward dgate", dg, wantSwG)
			same(k, "SwiGLUBackward dup", du, wantSwU)
			lp, h := make([]float32, rows), make([]float32, rows)
			LogProbForward(lp, h, logits, targets, rows, vocab, invTemp)
			same(k, "LogProbForward", lp, wantLP)
			same(k, "entropy", h, wantH)
			d := make([]float32, rows*vocab)
			LogProbBackward(d, dlogp, nil, logits, targets, rows, vocab, invTemp)
			same(k, "LogProbBackward", d, wantD)
			soft := append([]float32(nil), logits[:vocab]...)
			softmaxInPlace(soft)
			same(k, "softmax", soft, wantSoft)
		})
	}
}

// BenchmarkExpOps times the ops that use the vector exp at a 25M model's step shapes (2048
// rows; vocabulary 8192; MLP 1536; attention rows of 256), with the pure-Go kernel and the
// CPU's vector kernel interleaved in one loop; x_go is how many times faster the vector one is.
// run: go test ./engine/backend/cpu -run X -bench ExpOps -benchtime 5x
func BenchmarkExpOps(b *testing.B) {
	ks := expKernels()
	fast := ks[len(ks)-1]
	r := rand.New(rand.NewPCG(1, 1))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 3)
		}
		return v
	}
	const rows, vocab, mlp = 2048, 8192, 1536
	logits, dlogits := randn(rows*vocab), make([]float32, rows*vocab)
	targets, lp, h, dlp := make([]int32, rows), make([]float32, rows), make([]float32, rows), randn(rows)
	for i := range targets {
		targets[i] = int32(r.IntN(vocab))
	}
	gate, up, out, dout := randn(rows*mlp), randn(rows*mlp), make([]float32, rows*mlp), randn(rows*mlp)
	dg, du := make([]float32, rows*mlp), make([]float32, rows*mlp)
	scores := randn(rows * 256)
	ops := []struct {
		name string
		fn   func()
	}{
		{"LogProbForward+entropy", func() { LogProbForward(lp, h, logits, targets, rows, vocab, 1) }},
		{"LogProbBackward", func() { LogProbBackward(dlogits, dlp, nil, logits, targets, rows, vocab, 1) }},
		{"SwiGLUForward", func() { SwiGLUForward(out, gate, up, rows*mlp) }},
		{"SwiGLUBackward", func() { SwiGLUBackward(dg, du, dout, gate, up, rows*mlp) }},
		{"GELUForward", func() { GELUForward(out, gate, rows*mlp) }},
		{"GELUBackward", func() { GELUBackward(dg, dout, gate, rows*mlp) }},
		{"softmax", func() {
			For(rows, 16, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					softmaxInPlace(scores[i*256 : (i+1)*256])
				}
			})
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			var tGo, tFast time.Duration
			timed := func(k string, d *time.Duration) {
				withExpKernel(k, func() {
					t0 := time.Now()
					op.fn()
					*d += time.Since(t0)
				})
			}
			for b.Loop() {
				timed("go", &tGo)
				timed(fast, &tFast)
			}
			b.ReportMetric(float64(tGo.Microseconds())/float64(b.N), "go_us")
			b.ReportMetric(float64(tFast.Microseconds())/float64(b.N), fast+"_us")
			b.ReportMetric(tGo.Seconds()/tFast.Seconds(), "x_go")
		})
	}
}
