package cuda

import (
	"strings"
	"testing"
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
