package cuda

import (
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"unsafe"

	"rlhfstation/internal/testref"
)

var (
	testDevOnce sync.Once
	testDev     *Device
	testDevErr  error
)

// device opens the device the tests run on: the stand-in or GPU named by
// RLHFSTATION_CUDA_LIBS, else a real device when there is one.
func device(t *testing.T) *Device {
	t.Helper()
	testDevOnce.Do(func() {
		if os.Getenv(LibsEnv) == "" {
			if _, err := Probe(); err != nil {
				testDevErr = err
				return
			}
		}
		testDev, testDevErr = Open()
	})
	if testDevErr != nil {
		if os.Getenv(LibsEnv) != "" {
			t.Fatalf("opening the device of %s=%s: %v", LibsEnv, os.Getenv(LibsEnv), testDevErr)
		}
		testref.Missing(t, "no CUDA device, and no stand-in (TestMain builds it with g++): %v", testDevErr)
	}
	return testDev
}

func bf16Round(f float32) float32 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return float32(math.NaN())
	}
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

func bf16Bits(f float32) uint16 { return uint16(math.Float32bits(bf16Round(f)) >> 16) }

func allocT[T any](t testing.TB, d *Device, n int) devptr[T] {
	t.Helper()
	var z T
	p, err := d.mem.alloc(max(1, n) * int(unsafe.Sizeof(z)))
	if err != nil {
		t.Fatal(err)
	}
	return devptr[T](p)
}

func put[T any](t testing.TB, d *Device, x []T) devptr[T] {
	t.Helper()
	p := allocT[T](t, d, len(x))
	if err := d.upload(uintptr(p), bytesOf(x)); err != nil {
		t.Fatal(err)
	}
	return p
}

func get[T any](t testing.TB, d *Device, p devptr[T], n int) []T {
	t.Helper()
	x := make([]T, n)
	if err := d.download(bytesOf(x), uintptr(p)); err != nil {
		t.Fatal(err)
	}
	return x
}

// putBF16 uploads x rounded to bf16 and returns the rounded values too.
func putBF16(t testing.TB, d *Device, x []float32) (devptr[bf16], []float32) {
	t.Helper()
	b := make([]uint16, len(x))
	r := make([]float32, len(x))
	for i, v := range x {
		b[i] = bf16Bits(v)
		r[i] = bf16Round(v)
	}
	p := put(t, d, b)
	return devptr[bf16](p), r
}

func getBF16(t testing.TB, d *Device, p devptr[bf16], n int) []float32 {
	t.Helper()
	b := get(t, d, devptr[uint16](p), n)
	x := make([]float32, n)
	for i, v := range b {
		x[i] = math.Float32frombits(uint32(v) << 16)
	}
	return x
}

func run(t *testing.T, d *Device, f func(o *owner) error) {
	t.Helper()
	if err := d.do(f); err != nil {
		t.Fatal(err)
	}
}

func randn(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// closeTo checks got against want with |got−want| ≤ atol + rtol·|want| everywhere.
func closeTo(t *testing.T, what string, got, want []float32, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad, worst, wi := 0, 0.0, -1
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		lim := atol + rtol*math.Abs(float64(want[i]))
		if !(d <= lim) {
			bad++
			if e := d / lim; e > worst || math.IsNaN(d) {
				worst, wi = e, i
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off (worst at %d: got %v, want %v)", what, bad, len(got), wi, got[wi], want[wi])
	}
}
