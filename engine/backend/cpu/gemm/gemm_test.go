package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// u is float32's unit roundoff.
const u = 1.0 / (1 << 24)

// tolerance bounds |fast − ref| for one element of C. Both are float32 sums of the same k
// products in different orders (the fast path splits k into blocks, runs lanes and uses FMA);
// each has a worst-case error of at most (k+3)·u·(|alpha|·Σ|a·b| + |beta·c|) (k roundings in
// the sum, then alpha, beta and the blocked accumulation into C), so the two differ by at most
// twice that. A wrong element, row or tile is off by O(Σ|a·b|) and fails by orders of magnitude.
func tolerance(k int, scale float64) float64 { return 2 * float64(k+3+4) * u * scale }

type gemmCase struct {
	transA, transB bool
	m, n, k        int
	pad            int // extra stride beyond the row width, for every operand
	alpha, beta    float32
}

func (tc gemmCase) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_m%d_n%d_k%d_pad%d_a%g_b%g", t(tc.transA), t(tc.transB), tc.m, tc.n,
		tc.k, tc.pad, tc.alpha, tc.beta)
}

// operands makes A, B and C with their strides; C is filled with NaN when beta is 0, since
// Sgemm must then not read it.
func (tc gemmCase) operands(rng *rand.Rand) (a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	ar, ac := tc.m, tc.k
	if tc.transA {
		ar, ac = ac, ar
	}
	br, bc := tc.k, tc.n
	if tc.transB {
		br, bc = bc, br
	}
	lda, ldb, ldc = ac+tc.pad, bc+tc.pad, tc.n+tc.pad
	a = randSlice(rng, max(0, (ar-1)*lda+ac))
	b = randSlice(rng, max(0, (br-1)*ldb+bc))
	c = randSlice(rng, tc.m*ldc)
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	return
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = rng.Float32()*2 - 1
	}
	return s
}

// absBound is |alpha|·Σ_p|op(A)[i,p]·op(B)[p,j]| + |beta·C0[i,j]|, the scale of the rounding error.
func absBound(tc gemmCase, a []float32, lda int, b []float32, ldb int, c0 []float32, ldc, i, j int) float64 {
	var s float64
	for p := 0; p < tc.k; p++ {
		var av, bv float32
		if tc.transA {
			av = a[p*lda+i]
		} else {
			av = a[i*lda+p]
		}
		if tc.transB {
			bv = b[j*ldb+p]
		} else {
			bv = b[p*ldb+j]
		}
		s += math.Abs(float64(av) * float64(bv))
	}
	s *= math.Abs(float64(tc.alpha))
	if tc.beta != 0 {
		s += math.Abs(float64(tc.beta) * float64(c0[i*ldc+j]))
	}
	return s
}

// fixture is one case's operands, its SgemmRef result and each element's tolerance, made once
// and shared by every kernel, packer and goroutine count.
type fixture struct {
	a, b, c0, want []float32
	lda, ldb, ldc  int
	tol            []float64
}

var fixtures = map[gemmCase]*fixture{}

func fixtureFor(tc gemmCase) *fixture {
	if f := fixtures[tc]; f != nil {
		return f
	}
	rng := rand.New(rand.NewPCG(uint64(tc.m*1000003+tc.n*1009+tc.k), uint64(tc.pad)))
	f := &fixture{}
	f.a, f.lda, f.b, f.ldb, f.c0, f.ldc = tc.operands(rng)
	f.want = append([]float32(nil), f.c0...)
	SgemmRef(tc.transA, tc.transB, tc.m, tc.n, tc.k, tc.alpha, f.a, f.lda, f.b, f.ldb, tc.beta, f.want, f.ldc)
	f.tol = make([]float64, len(f.c0))
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.n; j++ {
			f.tol[i*f.ldc+j] = tolerance(tc.k, absBound(tc, f.a, f.lda, f.b, f.ldb, f.c0, f.ldc, i, j))
		}
	}
	fixtures[tc] = f
	return f
}

// compare checks got against the reference over the m×n window of C and that the padding
// between rows was left alone.
func compare(t *testing.T, tc gemmCase, f *fixture, got []float32) {
	t.Helper()
	bad := 0
	for i := 0; i < tc.m; i++ {
		for j := 0; j < f.ldc; j++ {
			x := i*f.ldc + j
			g, w := got[x], f.want[x]
			if j >= tc.n {
				if math.Float32bits(g) != math.Float32bits(f.c0[x]) {
					t.Errorf("C[%d,%d] in the row padding changed: %g → %g", i, j, f.c0[x], g)
					bad++
				}
				continue
			}
			if d := math.Abs(float64(g) - float64(w)); !(d <= f.tol[x]) {
				t.Errorf("C[%d,%d] = %g, reference %g (diff %.3g > tolerance %.3g)", i, j, g, w, d, f.tol[x])
				bad++
			}
			if bad > 10 {
				t.Fatal("too many mismatches")
			}
		}
	}
}

func testCases() []gemmCase {
	var cs []gemmCase
	sizes := [][3]int{
		{1, 1, 1}, {1, 7, 13}, {7, 1, 31}, {13, 31, 7}, {31, 65, 127}, {65, 127, 31},
		{127, 13, 65}, {14, 32, 256}, {28, 64, 513}, {300, 65, 129}, {33, 301, 300},
		{6, 16, 1}, {5, 300, 257}, {300, 16, 300}, {97, 3, 513},
	}
	ab := [][2]float32{{1, 0}, {1, 1}, {-0.75, 0}, {1.5, 0.5}, {1, -2}}
	i := 0
	for _, s := range sizes {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			// Rotate alpha, beta and padding through the shapes rather than taking every
			// combination: each still meets every transposition case and size.
			x := ab[i%len(ab)]
			pad := []int{0, 3, 17}[i%3]
			i++
			cs = append(cs, gemmCase{tr[0], tr[1], s[0], s[1], s[2], pad, x[0], x[1]})
		}
	}
	return cs
}

// runCase compares the kernel's path with SgemmRef on one case.
func runCase(t *testing.T, kr *kernel, tc gemmCase) {
	f := fixtureFor(tc)
	got := append([]float32(nil), f.c0...)
	sgemm(kr, tc.transA, tc.m, tc.n, tc.k, tc.alpha, f.a, f.lda, operandB{b: f.b, ld: f.ldb, trans: tc.transB}, tc.beta, got, f.ldc)
	compare(t, tc, f, got)
}

// TestKernels runs every kernel this CPU has, with each packing routine, on one, two and three
// goroutines, against SgemmRef.
func TestKernels(t *testing.T) {
	defer func(n int64, w int, tr bool) {
		threads.Store(n)
		minParallelWork = w
		asmPack = tr
	}(threads.Load(), minParallelWork, asmPack)
	minParallelWork = 0 // small cases too take the parallel path
	packers := []bool{false}
	if asmPack {
		packers = append(packers, true)
	}
	for _, kr := range testKernels() {
		for _, useAsm := range packers {
			for _, nt := range []int{1, 2, 3} {
				name := fmt.Sprintf("%s/asmpack=%v/threads%d", kr.name, useAsm, nt)
				t.Run(name, func(t *testing.T) {
					asmPack = useAsm
					SetThreads(nt)
					for _, tc := range testCases() {
						t.Run(tc.String(), func(t *testing.T) { runCase(t, kr, tc) })
					}
				})
			}
		}
	}
}

// testKernels is kernels() and their narrow variants plus, for each small-size path (dot,
// direct), one copy that sends every eligible case through it and one that never does, so
// that both paths meet every case.
func testKernels() []*kernel {
	var ks []*kernel
	var all []*kernel
	for _, kr := range kernels() {
		all = append(all, kr)
		if kr.narrow != nil {
			all = append(all, kr.narrow)
		}
	}
	for _, kr := range all {
		ks = append(ks, kr)
		if kr.dot != nil {
			always, never := *kr, *kr
			always.name, always.dotM, always.dotN = kr.name+"-alldot", math.MaxInt, math.MaxInt
			never.name, never.dotM, never.dotN = kr.name+"-nodot", 0, 0
			ks = append(ks, &always, &never)
		}
		if kr.direct != nil {
			always, never := *kr, *kr
			always.name, always.directM = kr.name+"-alldirect", math.MaxInt
			never.name, never.directM = kr.name+"-nodirect", 0
			ks = append(ks, &always, &never)
		}
	}
	return ks
}

// TestPanelSource checks that op(B) from a PanelSource gives bit for bit what the slice gives,
// with the source written the way a quantized weight's is: W stored [n,k], each micro-panel
// expanded from a scratch strip of nr rows of W.
func TestPanelSource(t *testing.T) {
	defer func(n int64) { threads.Store(n) }(threads.Load())
	for _, kr := range kernels() {
		// The slice side must take the packed path too: the small-M one sums in another order.
		packed := *kr
		packed.dotM, packed.dotN = 0, 0
		for _, nt := range []int{1, 2} {
			SetThreads(nt)
			for _, s := range [][3]int{{1, 1, 1}, {31, 65, 127}, {300, 97, 300}, {64, 512, 520}} {
				for _, transA := range []bool{false, true} {
					tc := gemmCase{transA: transA, transB: true, m: s[0], n: s[1], k: s[2], pad: 5, alpha: 0.5, beta: 0}
					rng := rand.New(rand.NewPCG(uint64(s[0]), uint64(s[2])))
					a, lda, w, ldw, c0, ldc := tc.operands(rng)
					want := append([]float32(nil), c0...)
					sgemm(&packed, transA, tc.m, tc.n, tc.k, tc.alpha, a, lda, operandB{b: w, ld: ldw, trans: true}, 0, want, ldc)
					got := append([]float32(nil), c0...)
					sgemm(kr, transA, tc.m, tc.n, tc.k, tc.alpha, a, lda, operandB{src: stripSource{w: w, ld: ldw}}, 0, got, ldc)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s threads%d %v: C[%d] = %g from the source, %g from the slice", kr.name, nt, tc, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// stripSource is op(B) = Wᵀ for W [n,k], packed one micro-panel at a time through a scratch strip.
type stripSource struct {
	w  []float32
	ld int
}

func (s stripSource) PackB(dst []float32, p0, kc, j0, nc, nr int) {
	strip := make([]float32, nr*kc)
	for q := 0; q*nr < nc; q++ {
		rows := min(nr, nc-q*nr)
		for r := 0; r < rows; r++ {
			row := (j0 + q*nr + r) * s.ld
			copy(strip[r*kc:(r+1)*kc], s.w[row+p0:row+p0+kc])
		}
		PackB(dst[q*kc*nr:], strip, kc, true, 0, kc, 0, rows, nr)
	}
}

// TestSpecialCases covers the BLAS conventions: k = 0 or alpha = 0 scale C by beta without
// touching A and B, and beta = 0 clears C even when it holds NaN.
func TestSpecialCases(t *testing.T) {
	nan := float32(math.NaN())
	c := []float32{nan, 2, 9, 3, nan, 9}
	Sgemm(false, false, 2, 2, 0, 1, nil, 1, nil, 2, 0, c, 3)
	if c[0] != 0 || c[1] != 0 || c[3] != 0 || c[4] != 0 || c[2] != 9 {
		t.Errorf("k=0, beta=0: C = %v, want zeros in the 2×2 window", c)
	}
	c = []float32{1, 2, 3, 4}
	a := []float32{nan, nan}
	Sgemm(false, false, 2, 2, 1, 0, a, 1, []float32{nan, nan}, 2, 2, c, 2)
	if c[0] != 2 || c[1] != 4 || c[2] != 6 || c[3] != 8 {
		t.Errorf("alpha=0, beta=2: C = %v, want [2 4 6 8]", c)
	}
	Sgemm(false, false, 0, 5, 5, 1, nil, 5, make([]float32, 25), 5, 0, nil, 5)
}

// TestBadArguments checks that a slice too short for its shape panics with a message naming
// the operand before any kernel touches memory.
func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func()
		want string
	}{
		{"short A", func() {
			Sgemm(false, false, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
		}, "A has 15"},
		{"short B", func() {
			Sgemm(false, true, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 15), 4, 0, make([]float32, 16), 4)
		}, "B has 15"},
		{"short C", func() {
			Sgemm(true, false, 4, 4, 4, 1, make([]float32, 16), 4, make([]float32, 16), 4, 0, make([]float32, 15), 4)
		}, "C has 15"},
		{"small lda", func() {
			Sgemm(false, false, 4, 4, 4, 1, make([]float32, 16), 3, make([]float32, 16), 4, 0, make([]float32, 16), 4)
		}, "ldA=3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, tc.want) {
					t.Errorf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

// TestConcurrentCalls runs Sgemm from several goroutines at once, as the model's layers may:
// the workspaces are per call, so results must not mix.
func TestConcurrentCalls(t *testing.T) {
	const m, n, k = 100, 120, 130
	rng := rand.New(rand.NewPCG(7, 7))
	a, b := randSlice(rng, m*k), randSlice(rng, k*n)
	want := make([]float32, m*n)
	Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	errs := make(chan string, 8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			c := make([]float32, m*n)
			for range 20 {
				Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
				for i := range c {
					if c[i] != want[i] {
						errs <- fmt.Sprintf("goroutine %d: C[%d] = %g, want %g", g, i, c[i], want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestParallelFor checks that every item runs exactly once whatever the goroutine count.
func TestParallelFor(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 100} {
		for _, g := range []int{1, 2, 3, 16} {
			counts := make([]atomic.Int32, n)
			parallelFor(n, g, func(i int) { counts[i].Add(1) })
			for i := range counts {
				if c := counts[i].Load(); c != 1 {
					t.Errorf("n=%d goroutines=%d: item %d ran %d times", n, g, i, c)
				}
			}
		}
	}
}

// TestProbeCounts: with Probe on, every call that splits (n, t > 1) counts once, from any
// number of goroutines at once (-race checks the counters and the batch's start time), a
// helped call's start is counted with it, and a call made with Probe off counts nothing.
func TestProbeCounts(t *testing.T) {
	const callers, calls = 4, 50
	c0, h0 := Probe.Calls.Load(), Probe.Helped.Load()
	Probe.On.Store(true)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				var s atomic.Int64
				parallelFor(8, 3, func(i int) { s.Add(int64(i)) })
				parallelFor(1, 3, func(int) {}) // one item: no split, not counted
			}
		})
	}
	wg.Wait()
	Probe.On.Store(false)
	parallelFor(8, 3, func(int) {})
	if c := Probe.Calls.Load() - c0; c != callers*calls {
		t.Fatalf("Probe counted %d calls, want %d", c, callers*calls)
	}
	if h := Probe.Helped.Load() - h0; h < 0 || h > callers*calls {
		t.Fatalf("Probe counted %d helped calls of %d", h, callers*calls)
	}
	if Probe.CallerNs.Load() <= 0 || Probe.TailNs.Load() < 0 || Probe.StartNs.Load() < 0 {
		t.Fatalf("Probe's times: caller %d ns, tail %d ns, start %d ns", Probe.CallerNs.Load(), Probe.TailNs.Load(), Probe.StartNs.Load())
	}
}

// TestRanges checks Ranges' guided scheduling under 1..4 workers: every index runs exactly
// once, in contiguous ranges that do not overlap, each of grain items at least but the one
// ending at n, and, in index order, never longer than the one before (what is left over 2t
// shrinks). One range sleeps so a helper's range is still running when the caller's are done:
// the counts read after the call would miss it (and -race would flag the read) if Ranges
// returned before every range was done. Called from a parallelFor item too, where the
// helpers are busy and plain goroutines take the ranges.
func TestRanges(t *testing.T) {
	check := func(t *testing.T, n, grain, workers int) {
		counts := make([]atomic.Int32, n)
		var mu sync.Mutex
		var got [][2]int
		var slept atomic.Bool
		Ranges(n, grain, workers, func(lo, hi int) {
			if lo >= hi || lo < 0 || hi > n {
				t.Errorf("range [%d, %d) of n=%d", lo, hi, n)
				return
			}
			if lo > 0 && slept.CompareAndSwap(false, true) {
				time.Sleep(2 * time.Millisecond)
			}
			for i := lo; i < hi; i++ {
				counts[i].Add(1)
			}
			mu.Lock()
			got = append(got, [2]int{lo, hi})
			mu.Unlock()
		})
		for i := range counts {
			if c := counts[i].Load(); c != 1 {
				t.Errorf("n=%d grain=%d workers=%d: item %d ran %d times", n, grain, workers, i, c)
				return
			}
		}
		sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] })
		next, prev := 0, n+1
		for _, r := range got {
			size := r[1] - r[0]
			if r[0] != next {
				t.Errorf("n=%d grain=%d workers=%d: ranges %v are not contiguous", n, grain, workers, got)
				return
			}
			if r[1] != n && (size < max(grain, 1) || size > prev) {
				t.Errorf("n=%d grain=%d workers=%d: range [%d, %d) in %v: want ≥ %d and ≤ the one before", n, grain, workers, r[0], r[1], got, grain)
				return
			}
			next, prev = r[1], size
		}
		if workers <= 1 || n <= max(grain, 1) {
			if n > 0 && len(got) != 1 {
				t.Errorf("n=%d grain=%d workers=%d: %d ranges, want 1 (no split)", n, grain, workers, len(got))
				return
			}
		}
	}
	for workers := 1; workers <= 4; workers++ {
		for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 100, 1000, 4864} {
			for _, grain := range []int{-1, 0, 1, 2, 7, 8, 64, 5000} {
				check(t, n, grain, workers)
			}
		}
	}
	t.Run("nested", func(t *testing.T) {
		parallelFor(4, 3, func(int) { check(t, 1000, 8, 3) })
	})
	t.Run("concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					check(t, 777, 5, 4)
				}
			})
		}
		wg.Wait()
	})
}
