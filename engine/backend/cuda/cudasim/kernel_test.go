package main

import (
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

var (
	kernelsOnce sync.Once
	kernelsImg  []byte
)

// testKernels is testdata/kernels.cu compiled once for the test binary.
func testKernels(t testing.TB, a *api) []byte {
	t.Helper()
	kernelsOnce.Do(func() {
		src, err := os.ReadFile("testdata/kernels.cu")
		if err != nil {
			t.Fatal(err)
		}
		kernelsImg = a.compile(t, string(src), "kernels.cu")
	})
	if kernelsImg == nil {
		t.Fatal("testdata/kernels.cu did not compile")
	}
	return kernelsImg
}

func bf16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// nf4Code is the NF4 code book (QLoRA's normal-float quantiles).
var nf4Code = []float32{-1, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
	-0.18477343022823334, -0.09105003625154495, 0, 0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
	0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1}

// TestNF4Dequant: double-quantised NF4 to bf16, bit for bit against the Go reference.
func TestNF4Dequant(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	m := a.load(t, testKernels(t, a))
	f := m.fn(t, "nf4_dequant")
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 19207 // odd: the last byte holds one value
	blocks := (n + 63) / 64
	packed := make([]uint8, (n+1)/2)
	for i := range packed {
		packed[i] = uint8(rng.IntN(256))
	}
	q := make([]uint8, blocks)
	for i := range q {
		q[i] = uint8(rng.IntN(256))
	}
	abs2 := make([]float32, (blocks+255)/256)
	for i := range abs2 {
		abs2[i] = rng.Float32()*0.1 + 0.01
	}
	code8 := make([]float32, 256)
	for i := range code8 {
		code8[i] = float32(i-128) / 127 * rng.Float32()
	}
	const offset = 0.0123
	want := make([]uint16, n)
	for j := 0; j < n; j++ {
		b := j / 64
		s := float32(code8[q[b]]*abs2[b/256]) + offset
		c := packed[j/2] >> 4
		if j%2 == 1 {
			c = packed[j/2] & 15
		}
		want[j] = bf16Bits(float32(nf4Code[c] * s))
	}
	out := alloc(t, a, 2*n)
	dp, dq, da, dc, d4 := upload(t, a, packed), upload(t, a, q), upload(t, a, abs2), upload(t, a, code8), upload(t, a, nf4Code)
	threads := uint32(256)
	a.ok(t, "launch", a.launch(f, d1((uint32(len(packed))+threads-1)/threads, threads), 0, out, dp, dq, da, dc, d4, float32(offset), int64(n)))
	got := download[uint16](t, a, out, n)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %#04x, want %#04x", i, got[i], want[i])
		}
	}
}

// TestRMSNorm: 7 rows of 333 (a partial last warp of each row) against float64.
func TestRMSNorm(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	m := a.load(t, testKernels(t, a))
	f := m.fn(t, "rmsnorm")
	const rows, dim, eps = 7, 333, 1e-5
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, rows*dim)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	w := make([]float32, dim)
	for i := range w {
		w[i] = float32(1 + 0.1*rng.NormFloat64())
	}
	out := alloc(t, a, 4*rows*dim)
	a.ok(t, "launch", a.launch(f, d1(4, 64), 0, out, upload(t, a, x), upload(t, a, w), int32(rows), int32(dim), float32(eps)))
	got := download[float32](t, a, out, rows*dim)
	for r := 0; r < rows; r++ {
		var ss float64
		for i := 0; i < dim; i++ {
			v := float64(x[r*dim+i])
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/dim+eps)
		for i := 0; i < dim; i++ {
			want := float64(x[r*dim+i]) * inv * float64(w[i])
			if d := math.Abs(float64(got[r*dim+i]) - want); d > 2e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("row %d col %d: %v, want %v", r, i, got[r*dim+i], want)
			}
		}
	}
}

func TestCollectives(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	m := a.load(t, testKernels(t, a))
	f := m.fn(t, "collectives")
	const n = 64
	in := make([]int32, n)
	for i := range in {
		in[i] = int32((i*37 + 11) % 101)
	}
	in[40] = 77
	out := alloc(t, a, 4*12*n)
	a.ok(t, "launch", a.launch(f, d1(1, n), 0, out, upload(t, a, in)))
	got := download[int32](t, a, out, 12*n)
	for i := 0; i < n; i++ {
		lane, base := i%32, i/32*32
		v := func(l int) int32 { return in[base+l] }
		var ballot uint32
		any, all := int32(0), int32(1)
		for l := 0; l < 32; l++ {
			if v(l)%3 == 0 {
				ballot |= 1 << l
			}
			if v(l) == 77 {
				any = 1
			}
			if v(l) < 0 {
				all = 0
			}
		}
		up := lane
		if lane >= 3 {
			up = lane - 3
		}
		down := lane
		if lane%16+5 < 16 {
			down = lane + 5
		}
		down1 := lane
		if lane+1 < 32 {
			down1 = lane + 1
		}
		up1 := lane
		if lane >= 1 {
			up1 = lane - 1
		}
		want := []int32{v(lane * 7 % 32), v(lane&^7 | (lane+3)&7), v(up), v(down), v(lane ^ 9&7 ^ 0) /* below */, int32(ballot), any, all,
			v(lane ^ 1), v(down1), v(up1), -1}
		// xor 9 within groups of 8: lane^9 leaves the group when bit 3 flips upward
		x := lane ^ 9
		if x >= lane|7+1 {
			x = lane
		}
		want[4] = v(x)
		if lane%2 == 0 {
			want[11] = v((lane + 2) % 32)
		}
		for k, w := range want {
			if got[12*i+k] != w {
				t.Errorf("thread %d result %d: %d, want %d", i, k, got[12*i+k], w)
			}
		}
	}
}

func TestBarrierReductions(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "barriers")
	const blocks, per = 3, 128
	in := make([]int32, blocks*per)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range in {
		in[i] = int32(rng.IntN(100))
	}
	in[per+7] = 42
	in[2*per+3] = -1
	out := alloc(t, a, 4*3*len(in))
	a.ok(t, "launch", a.launch(f, dims{grid: [3]uint32{blocks, 1, 1}, block: [3]uint32{16, 8, 1}}, 0, out, upload(t, a, in)))
	got := download[int32](t, a, out, 3*len(in))
	for b := 0; b < blocks; b++ {
		count, and, or := int32(0), int32(1), int32(0)
		for i := 0; i < per; i++ {
			v := in[b*per+i]
			if v > 50 {
				count++
			}
			if v < 0 {
				and = 0
			}
			if v == 42 {
				or = 1
			}
		}
		for i := 0; i < per; i++ {
			r := got[3*(b*per+i):]
			if r[0] != count || r[1] != and || r[2] != or {
				t.Fatalf("block %d thread %d: %v, want [%d %d %d]", b, i, r[:3], count, and, or)
			}
		}
	}
}

func TestAtomics(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "atomics")
	const blocks, threads = 40, 128
	counters := upload(t, a, []int32{0, 0})
	fsum := upload(t, a, []float32{0})
	umax := upload(t, a, []uint32{0})
	slots := make([]int32, 64)
	for i := range slots {
		slots[i] = -1
	}
	slot := upload(t, a, slots)
	per := alloc(t, a, 4*blocks)
	a.ok(t, "launch", a.launch(f, d1(blocks, threads), 0, counters, fsum, umax, slot, per))
	n := blocks * threads
	c := download[int32](t, a, counters, 2)
	if c[0] != int32(n) || c[1] != int32(n*(n-1)/2) {
		t.Errorf("counters %v, want [%d %d]", c, n, n*(n-1)/2)
	}
	if s := download[float32](t, a, fsum, 1)[0]; s != float32(n)/4 {
		t.Errorf("float sum %v, want %v", s, float32(n)/4)
	}
	var mx uint32
	for i := 0; i < n; i++ {
		mx = max(mx, uint32(i*7919%10007))
	}
	if u := download[uint32](t, a, umax, 1)[0]; u != mx {
		t.Errorf("max %d, want %d", u, mx)
	}
	for i, s := range download[int32](t, a, slot, 64) {
		if s < 0 || int(s)%64 != i {
			t.Errorf("slot %d holds %d", i, s)
		}
	}
	for b, h := range download[int32](t, a, per, blocks) {
		if h != 2*threads {
			t.Errorf("block %d: shared count %d, want %d", b, h, 2*threads)
		}
	}
}

func TestMath(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "math")
	in := []float32{-3.7, -1, -0.49, -0.0001, 0, 0.25, 0.5, 0.75, 1, 2.5, 7.3, 1e-20}
	n := len(in)
	out := alloc(t, a, 4*16*n)
	a.ok(t, "launch", a.launch(f, d1(1, 32), 0, out, upload(t, a, in), int32(n)))
	got := download[float32](t, a, out, 16*n)
	for i, x32 := range in {
		x := float64(x32)
		sat := math.Min(math.Max(x, 0), 1)
		bits := math.Float32bits(x32)
		want := []float64{math.Exp(x), math.Exp(x), math.Log(math.Abs(x) + 1), math.Log1p(math.Abs(x)), math.Sqrt(math.Abs(x)),
			1 / math.Sqrt(math.Abs(x)+1), math.Tanh(x), math.Erf(x), math.Max(x, 0.5) + math.Min(x, -0.5), x / 3,
			math.Pow(math.Abs(x), 1.5), math.Floor(x) + math.Ceil(x), math.RoundToEven(float64(x32 * 10)), -x,
			float64(min(int32(bits&7), 5) + 4), sat}
		for k, w := range want {
			g := float64(got[16*i+k])
			if d := math.Abs(g - w); d > 2e-6*math.Max(1, math.Abs(w)) {
				t.Errorf("input %v result %d: %v, want %v", x32, k, g, w)
			}
		}
	}
}

func TestFastMath(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "fast_math")
	out := alloc(t, a, 16)
	a.ok(t, "launch", a.launch(f, d1(1, 1), 0, out))
	got := download[float32](t, a, out, 4)
	one, big := float32(1), float32(1e38)
	if got[0] != 0 || got[1] != one/big || got[2] != 1 || got[3] != 0 {
		t.Errorf("fast math %v, want [0 %v 1 0]", got, one/big)
	}
}

func TestCoordinates(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "coords")
	d := dims{grid: [3]uint32{3, 2, 2}, block: [3]uint32{4, 3, 2}}
	n := 12 * 24
	out := alloc(t, a, 4*6*n)
	a.ok(t, "launch", a.launch(f, d, 0, out))
	got := download[int32](t, a, out, 6*n)
	i := 0
	for bz := 0; bz < 2; bz++ {
		for by := 0; by < 2; by++ {
			for bx := 0; bx < 3; bx++ {
				for tz := 0; tz < 2; tz++ {
					for ty := 0; ty < 3; ty++ {
						for tx := 0; tx < 4; tx++ {
							want := []int32{int32(bx), int32(by), int32(bz), int32(tx), int32(ty), int32(tz)}
							for k := range want {
								if got[6*i+k] != want[k] {
									t.Fatalf("thread %d: %v, want %v", i, got[6*i:6*i+6], want)
								}
							}
							i++
						}
					}
				}
			}
		}
	}
}

func TestDynamicShared(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "reverse")
	const blocks, threads = 5, 96
	in := make([]float32, blocks*threads)
	for i := range in {
		in[i] = float32(i)
	}
	out := alloc(t, a, 4*len(in))
	d := d1(blocks, threads)
	d.shared = 4 * threads
	a.ok(t, "launch", a.launch(f, d, 0, out, upload(t, a, in)))
	got := download[float32](t, a, out, len(in))
	for b := 0; b < blocks; b++ {
		for i := 0; i < threads; i++ {
			if got[b*threads+i] != in[b*threads+threads-1-i] {
				t.Fatalf("block %d element %d: %v", b, i, got[b*threads+i])
			}
		}
	}
}

// TestDataDependentBarrier: blocks differ in whether they wait; none may be run as if no
// block ever waited.
func TestDataDependentBarrier(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, testKernels(t, a)).fn(t, "maybe_wait")
	const blocks, threads = 24, 128
	flags := make([]int32, blocks)
	for i := range flags {
		flags[i] = int32(i % 3 / 2) // waits in blocks 2, 5, 8, …
	}
	out := alloc(t, a, 4*blocks*threads)
	a.ok(t, "launch", a.launch(f, d1(blocks, threads), 0, out, upload(t, a, flags)))
	got := download[float32](t, a, out, blocks*threads)
	for b := 0; b < blocks; b++ {
		for i := 0; i < threads; i++ {
			want := float32(-1)
			if flags[b] != 0 {
				want = float32(threads - 1 - i)
			}
			if got[b*threads+i] != want {
				t.Fatalf("block %d thread %d: %v, want %v", b, i, got[b*threads+i], want)
			}
		}
	}
}
