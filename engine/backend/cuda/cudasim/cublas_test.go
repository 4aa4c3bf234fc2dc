package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"rlhfstation/engine/backend/cpu/gemm"
)

const (
	dtF32  = 0
	dtF16  = 2
	dtBF16 = 14
)

func halfBits(f float32) uint16 {
	x := math.Float32bits(f)
	sign, ax := uint16(x>>16)&0x8000, x&0x7fffffff
	switch {
	case ax > 0x7f800000:
		return sign | 0x7e00
	case ax >= 0x477ff000:
		return sign | 0x7c00
	case ax < 0x38800000:
		return sign | uint16(math.RoundToEven(float64(math.Float32frombits(ax))*(1<<24)))
	}
	r := ax - 0x38000000
	return sign | uint16((r+0xfff+(r>>13)&1)>>13)
}

func halfValue(h uint16) float32 {
	s, e, m := uint32(h&0x8000)<<16, uint32(h>>10)&0x1f, uint32(h&0x3ff)
	switch e {
	case 0:
		v := float32(m) / (1 << 24)
		return math.Float32frombits(math.Float32bits(v) | s)
	case 31:
		return math.Float32frombits(s | 0x7f800000 | m<<13)
	}
	return math.Float32frombits(s | (e+112)<<23 | m<<13)
}

// matrix is device memory of one storage type with the float32 values it holds.
type matrix struct {
	p    uint64
	vals []float32
}

func elemSize(dt int32) int {
	if dt == dtF32 {
		return 4
	}
	return 2
}

// store rounds x to dt and puts it on the device.
func store(t *testing.T, a *api, dt int32, x []float32) matrix {
	m := matrix{vals: make([]float32, len(x))}
	switch dt {
	case dtF32:
		copy(m.vals, x)
		m.p = upload(t, a, m.vals)
	case dtBF16:
		b := make([]uint16, len(x))
		for i, v := range x {
			b[i] = bf16Bits(v)
			m.vals[i] = math.Float32frombits(uint32(b[i]) << 16)
		}
		m.p = upload(t, a, b)
	case dtF16:
		b := make([]uint16, len(x))
		for i, v := range x {
			b[i] = halfBits(v)
			m.vals[i] = halfValue(b[i])
		}
		m.p = upload(t, a, b)
	}
	return m
}

func fetch(t *testing.T, a *api, dt int32, p uint64, n int) []float32 {
	out := make([]float32, n)
	if dt == dtF32 {
		return download[float32](t, a, p, n)
	}
	for i, b := range download[uint16](t, a, p, n) {
		if dt == dtBF16 {
			out[i] = math.Float32frombits(uint32(b) << 16)
		} else {
			out[i] = halfValue(b)
		}
	}
	return out
}

type gemmCase struct {
	at, ct           int32
	ta, tb           bool
	m, n, k          int
	padA, padB, padC int // extra leading dimension
	alpha, beta      float32
	batch            int
	tf32             bool
}

func (c gemmCase) String() string {
	return fmt.Sprintf("types%d/%d_t%v%v_%dx%dx%d_pad%d%d%d_a%g_b%g_batch%d_tf32%v", c.at, c.ct, c.ta, c.tb, c.m, c.n, c.k,
		c.padA, c.padB, c.padC, c.alpha, c.beta, c.batch, c.tf32)
}

func tf32Round(f float32) float32 {
	u := math.Float32bits(f)
	if u&0x7f800000 == 0x7f800000 {
		return f
	}
	return math.Float32frombits((u + 0x1000) &^ 0x1fff)
}

// runGemm runs one cuBLAS product (column-major, strided batched when batch > 1) and checks
// each element against gemm.SgemmRef on the same values arranged row-major.
func runGemm(t *testing.T, a *api, h uintptr, c gemmCase, rng *rand.Rand) {
	ar, ac := c.m, c.k // A as stored, column-major: ar rows, ac columns
	if c.ta {
		ar, ac = c.k, c.m
	}
	br, bc := c.k, c.n
	if c.tb {
		br, bc = c.n, c.k
	}
	lda, ldb, ldc := max(ar, 1)+c.padA, max(br, 1)+c.padB, max(c.m, 1)+c.padC
	batch := max(c.batch, 1)
	// Batch items overlap where the stride is below the item's size, as attention's heads do.
	sa, sb, sc := int64(lda*ac), int64(ldb*bc), int64(ldc*c.n)
	if batch > 1 {
		sa, sb = int64(lda*ac)/2+1, 0 // overlapping items; one B for all
	}
	na, nb, nc := int(sa)*(batch-1)+lda*ac, int(sb)*(batch-1)+ldb*bc, int(sc)*(batch-1)+ldc*c.n
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	A, B := store(t, a, c.at, rnd(na)), store(t, a, c.at, rnd(nb))
	cinit := rnd(nc)
	if c.beta == 0 {
		for i := range cinit {
			cinit[i] = float32(math.NaN()) // never read when beta is 0
		}
	}
	C := store(t, a, c.ct, cinit)
	alpha, beta := c.alpha, c.beta
	ta, tb := int32(0), int32(0)
	if c.ta {
		ta = 1
	}
	if c.tb {
		tb = 1
	}
	a.ok(t, "cublasSetMathMode", statusToCU(a.cublasSetMathMode(h, map[bool]int32{false: 0, true: 3}[c.tf32])))
	var st int32
	if batch == 1 {
		st = a.cublasGemmEx(h, ta, tb, int32(c.m), int32(c.n), int32(c.k), &alpha, A.p, c.at, int32(lda), B.p, c.at, int32(ldb), &beta,
			C.p, c.ct, int32(ldc), 68, -1)
	} else {
		st = a.cublasGemmStridedBatchedEx(h, ta, tb, int32(c.m), int32(c.n), int32(c.k), &alpha, A.p, c.at, int32(lda), sa, B.p, c.at,
			int32(ldb), sb, &beta, C.p, c.ct, int32(ldc), sc, int32(batch), 68, -1)
	}
	if st != 0 {
		t.Fatalf("%v: status %d", c, st)
	}
	got := fetch(t, a, c.ct, C.p, nc)
	u := math.Pow(2, -24)
	outEps := map[int32]float64{dtF32: 0, dtBF16: math.Pow(2, -8), dtF16: math.Pow(2, -11)}[c.ct]
	for bi := 0; bi < batch; bi++ {
		// op(A) and op(B) as dense row-major matrices for the reference.
		opA, opB := make([]float32, c.m*c.k), make([]float32, c.k*c.n)
		absA, absB := make([]float32, c.m*c.k), make([]float32, c.k*c.n)
		for i := 0; i < c.m; i++ {
			for p := 0; p < c.k; p++ {
				idx := i + p*lda
				if c.ta {
					idx = p + i*lda
				}
				v := A.vals[int(sa)*bi+idx]
				if c.tf32 && c.at == dtF32 {
					v = tf32Round(v)
				}
				opA[i*c.k+p], absA[i*c.k+p] = v, float32(math.Abs(float64(v)))
			}
		}
		for p := 0; p < c.k; p++ {
			for j := 0; j < c.n; j++ {
				idx := p + j*ldb
				if c.tb {
					idx = j + p*ldb
				}
				v := B.vals[int(sb)*bi+idx]
				if c.tf32 && c.at == dtF32 {
					v = tf32Round(v)
				}
				opB[p*c.n+j], absB[p*c.n+j] = v, float32(math.Abs(float64(v)))
			}
		}
		want := make([]float32, c.m*c.n)
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				want[i*c.n+j] = C.vals[int(sc)*bi+i+j*ldc]
			}
		}
		bound := make([]float32, c.m*c.n)
		gemm.SgemmRef(false, false, c.m, c.n, c.k, alpha, opA, c.k, opB, c.n, beta, want, c.n)
		gemm.SgemmRef(false, false, c.m, c.n, c.k, float32(math.Abs(float64(alpha))), absA, c.k, absB, c.n, 0, bound, c.n)
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				w := float64(want[i*c.n+j])
				g := float64(got[int(sc)*bi+i+j*ldc])
				tol := 2*float64(c.k+4)*u*float64(bound[i*c.n+j]) + outEps*math.Abs(w) + 1e-30
				if c.beta != 0 {
					tol += 4 * u * math.Abs(float64(c.beta)*float64(C.vals[int(sc)*bi+i+j*ldc]))
				}
				if !(math.Abs(g-w) <= tol) {
					t.Fatalf("%v: batch %d C(%d,%d) = %v, want %v (tolerance %.3g)", c, bi, i, j, g, w, tol)
				}
			}
		}
		// The padding between columns is left alone.
		for j := 0; j < c.n && c.padC > 0; j++ {
			i := c.m
			if idx := int(sc)*bi + i + j*ldc; idx < nc && !(math.IsNaN(float64(got[idx])) && math.IsNaN(float64(C.vals[idx]))) && got[idx] != C.vals[idx] {
				t.Fatalf("%v: padding C(%d,%d) written: %v", c, i, j, got[idx])
			}
		}
	}
}

func statusToCU(st int32) int32 { return st }

func TestCUBLAS(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	var h uintptr
	a.ok(t, "cublasCreate", a.cublasCreate(&h))
	defer a.cublasDestroy(h)
	rng := rand.New(rand.NewPCG(7, 8))
	var cases []gemmCase
	for _, ty := range [][2]int32{{dtF32, dtF32}, {dtBF16, dtBF16}, {dtBF16, dtF32}, {dtF16, dtF16}, {dtF16, dtF32}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			cases = append(cases, gemmCase{at: ty[0], ct: ty[1], ta: tr[0], tb: tr[1], m: 37, n: 29, k: 45, padA: 3, padB: 1, padC: 2, alpha: 1.5, beta: 0})
		}
		cases = append(cases, gemmCase{at: ty[0], ct: ty[1], m: 130, n: 270, k: 300, alpha: 1, beta: 0.5},
			gemmCase{at: ty[0], ct: ty[1], ta: true, m: 17, n: 9, k: 64, padA: 5, alpha: -1, beta: 1, batch: 3})
	}
	cases = append(cases,
		gemmCase{at: dtF32, ct: dtF32, m: 5, n: 7, k: 0, alpha: 1, beta: 0.5},
		gemmCase{at: dtF32, ct: dtF32, m: 5, n: 7, k: 3, alpha: 0, beta: 2},
		gemmCase{at: dtF32, ct: dtF32, m: 1, n: 1, k: 1000, alpha: 1, beta: 0},
		gemmCase{at: dtF32, ct: dtF32, tb: true, m: 64, n: 50, k: 70, alpha: 1, beta: 0, tf32: true},
	)
	for _, c := range cases {
		runGemm(t, a, h, c, rng)
	}
	// TF32 math: the result is the product of TF32-rounded inputs, not the exact one.
	x := []float32{1 + 1.0/(1<<20), 1}
	A := upload(t, a, x[:1])
	B := upload(t, a, x[1:])
	C := alloc(t, a, 4)
	one, zero := float32(1), float32(0)
	a.cublasSetMathMode(h, 3)
	a.cublasSgemm(h, 0, 0, 1, 1, 1, &one, A, 1, B, 1, &zero, C, 1)
	if got := download[float32](t, a, C, 1)[0]; got != 1 {
		t.Errorf("TF32 product %v, want 1 (the input rounded to 10 mantissa bits)", got)
	}
	a.cublasSetMathMode(h, 0)
	a.cublasSgemm(h, 0, 0, 1, 1, 1, &one, A, 1, B, 1, &zero, C, 1)
	if got := download[float32](t, a, C, 1)[0]; got != x[0] {
		t.Errorf("float32 product %v, want %v", got, x[0])
	}
}

func TestCUBLASArguments(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	var h uintptr
	a.ok(t, "cublasCreate", a.cublasCreate(&h))
	defer a.cublasDestroy(h)
	p := alloc(t, a, 4096)
	one := float32(1)
	gemmEx := func(ta int32, m, lda int32, at, ct, compute int32) int32 {
		return a.cublasGemmEx(h, ta, 0, m, 4, 4, &one, p, at, lda, p, at, 4, &one, p, ct, max(m, 1), compute, -1)
	}
	for _, c := range []struct {
		what string
		got  int32
		want int32
	}{
		{"valid", gemmEx(0, 4, 4, dtF32, dtF32, 68), 0},
		{"lda below m", gemmEx(0, 4, 3, dtF32, dtF32, 68), 7},
		{"lda below k (transposed)", gemmEx(1, 8, 3, dtF32, dtF32, 68), 7},
		{"bad transpose", gemmEx(3, 4, 4, dtF32, dtF32, 68), 7},
		{"negative m", gemmEx(0, -1, 4, dtF32, dtF32, 68), 7},
		{"f32 inputs into bf16", gemmEx(0, 4, 4, dtF32, dtBF16, 68), 15},
		{"half accumulation", gemmEx(0, 4, 4, dtF16, dtF16, 64), 15},
		{"compute type as a data type", gemmEx(0, 4, 4, dtF32, dtF32, 0), 7},
		{"misaligned workspace", a.cublasSetWorkspace(h, p+16, 1024), 7},
		{"aligned workspace", a.cublasSetWorkspace(h, p, 1024), 0},
		{"unknown math mode", a.cublasSetMathMode(h, 7), 7},
		{"destroyed handle", a.cublasGemmEx(h+8, 0, 0, 1, 1, 1, &one, p, 0, 1, p, 0, 1, &one, p, 0, 1, 68, -1), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: status %d, want %d", c.what, c.got, c.want)
		}
	}
	a.ok(t, "cuCtxSynchronize", a.cuCtxSynchronize())
	_ = unsafe.Pointer(nil)
}
