package cuda

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"rlhfstation/quant"
)

// Every kernel declares its cost, and every declaration reads parameters its kernel has.
func TestLedgerCostsDeclared(t *testing.T) {
	if u := undeclaredKernels(); len(u) > 0 {
		t.Fatalf("kernels without a cost in costs.go: %v", u)
	}
	for id, name := range kernelNames {
		var slots [maxKernelArgs]uint64
		a := costArgs{params: kernelParams[id], slots: &slots, d: grid1(1, 32)}
		kernelCosts[name](&a)
		if a.bad != "" {
			t.Errorf("%s: the cost reads a parameter %q the kernel does not have", name, a.bad)
		}
	}
}

// The ledger counts each kind of call with the bytes and flops it declares, and a graph's
// work once per replay, as nodes.
func TestLedgerCounts(t *testing.T) {
	d := device(t)
	const n = 1000
	x := put(t, d, make([]float32, n))
	y := allocT[bf16](t, d, n)
	before := d.Ledger()
	run(t, d, func(o *owner) error { return o.castF32ToBF16(y, x, n) })
	got := make([]uint16, n)
	if err := d.download(bytesOf(got), uintptr(y)); err != nil {
		t.Fatal(err)
	}
	l := d.Ledger().Sub(before)
	if c := l.Kernels["cast_f32_bf16"]; c.N != 1 || c.Read != 4*n || c.Written != 2*n {
		t.Errorf("cast of %d values: %+v, want 1 launch reading %d and writing %d bytes", n, c, 4*n, 2*n)
	}
	if l.Launches() != 1 || l.DtoH.N != 1 || l.DtoH.Read != 2*n || l.HtoD.N != 0 || l.Syncs < 1 {
		t.Errorf("ledger %+v: want 1 launch, 1 download of %d bytes, no upload, a sync", l, 2*n)
	}

	// a product: 2·m·n·k flops, one cuBLAS call
	const m, k, nn = 4, 64, 32
	a, b, c := allocT[bf16](t, d, m*k), allocT[bf16](t, d, k*nn), allocT[float32](t, d, m*nn)
	before = d.Ledger()
	run(t, d, func(o *owner) error {
		return o.gemm(&gemmArgs{m: m, n: nn, k: k, alpha: 1, a: uintptr(a), b: uintptr(b), c: uintptr(c), aType: dtBF16, bType: dtBF16, cType: dtF32, lda: k, ldb: nn, ldc: nn})
	})
	l = d.Ledger().Sub(before)
	if l.BLAS.N != 1 || l.BLAS.Flops != 2*m*nn*k || l.BLAS.Read != 2*(m*k+k*nn) || l.BLAS.Written != 4*m*nn {
		t.Errorf("product %dx%dx%d: %+v", m, nn, k, l.BLAS)
	}

	// a graph of two casts and a fill: nothing counted at capture, three nodes a replay
	before = d.Ledger()
	g, err := d.Capture(func() error {
		d.enqueue(func(o *owner) error {
			if err := o.castF32ToBF16(y, x, n); err != nil {
				return err
			}
			if err := o.memset(uintptr(c), 0, 4*m*nn); err != nil {
				return err
			}
			return o.castF32ToBF16(y, x, n/2)
		})
		return nil
	})
	if err != nil {
		t.Skipf("no graph capture here: %v", err)
	}
	defer g.Close()
	if l := d.Ledger().Sub(before); l.Launches() != 0 || l.GraphNodes() != 0 || l.Memset.N != 0 {
		t.Errorf("capturing counted work: %+v", l)
	}
	g.Launch()
	g.Launch()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	l = d.Ledger().Sub(before)
	if l.GraphLaunches != 2 || l.GraphNodes() != 6 || l.Launches() != 0 || l.Launched("cast_f32_bf16") != 4 || l.LaunchedPrefix("cast_") != 4 {
		t.Errorf("two replays of a 3-node graph: %d launches, %d nodes, %d launches outside, %d casts", l.GraphLaunches, l.GraphNodes(), l.Launches(), l.Launched("cast_f32_bf16"))
	}
	if c := l.Nodes["cast_f32_bf16"]; c.Read != 2*(4*n+4*(n/2)) {
		t.Errorf("replayed casts read %d bytes, want %d", c.Read, 2*(4*n+4*(n/2)))
	}
	s := l.String()
	for _, want := range []string{"2 graph launches (6 nodes)", "cast_f32_bf16", "graph", "memset"} {
		if !strings.Contains(s, want) {
			t.Errorf("the printed ledger lacks %q:\n%s", want, s)
		}
	}
	if testing.Verbose() {
		t.Logf("\n%s", s)
	}
	run(t, d, func(o *owner) error {
		if o.costErr != "" {
			t.Errorf("a cost declaration failed: %s", o.costErr)
		}
		return nil
	})
}

// A 4-bit weight is expanded to bf16 once and kept: the products of later passes (forward
// and input gradient, any number of rows above the fused product's) read the expansion, and
// give what expanding per product gives, bit for bit.
func TestLedgerQ4ExpandedOnce(t *testing.T) {
	b := testBackend(t)
	rng := rand.New(rand.NewPCG(41, 42))
	out, in, rows := 70, 96, 40
	w, err := quant.Quantize(randn(rng, out*in, 0.05), out, in, "float32", quant.Default())
	must(t, err)
	x, _ := upBF16(t, b, randn(rng, rows*in, 1))
	dy, _ := upBF16(t, b, randn(rng, rows*out, 1))
	pass := func(q *Q4) (y, dx []float32) {
		yb, _ := b.Alloc(BF16, rows*out)
		dxb := up(t, b, F32, make([]float32, rows*in))
		must(t, b.Q4MulT(yb, x, q, rows))
		must(t, b.Q4MulAcc(dxb, dy, q, rows))
		y, dx = down(t, b, yb), down(t, b, dxb)
		_ = b.Free(yb)
		_ = b.Free(dxb)
		return
	}
	b.d.noKeep = true
	q0, err := b.UploadQ4(w)
	must(t, err)
	before := b.Ledger()
	wantY, wantDX := pass(q0)
	if n := b.Ledger().Sub(before).LaunchedPrefix("dequant4_"); n != 2 {
		t.Errorf("expanding per product: %d expansions for two products, want 2", n)
	}
	b.FreeQ4(q0)
	b.d.noKeep = false

	q, err := b.UploadQ4(w)
	must(t, err)
	defer b.FreeQ4(q)
	before = b.Ledger()
	for pass3 := 0; pass3 < 3; pass3++ { // reference, forward, backward
		y, dx := pass(q)
		if !slices.Equal(y, wantY) || !slices.Equal(dx, wantDX) {
			t.Fatalf("pass %d with the kept expansion differs from expanding per product", pass3)
		}
	}
	if n := b.Ledger().Sub(before).LaunchedPrefix("dequant4_"); n != 1 {
		t.Errorf("three passes of two products: %d expansions, want 1 (kept)", n)
	}
	// an allocation that fails drops the kept expansions: the next pass expands again
	var dropped int64
	run(t, b.d, func(o *owner) error { dropped = o.dropExpanded(); return nil })
	if want := int64(2 * out * in); dropped < want { // and those of earlier tests
		t.Errorf("dropped %d bytes of expansions, want at least %d", dropped, want)
	}
	before = b.Ledger()
	if y, dx := pass(q); !slices.Equal(y, wantY) || !slices.Equal(dx, wantDX) {
		t.Errorf("the pass after the expansions were dropped differs")
	}
	if n := b.Ledger().Sub(before).LaunchedPrefix("dequant4_"); n != 1 {
		t.Errorf("after dropping: %d expansions, want 1", n)
	}
}
