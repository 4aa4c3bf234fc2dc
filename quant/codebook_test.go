package quant

import (
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rlhfstation/internal/testref"
)

func up(x float32) float32   { return math.Nextafter32(x, float32(math.Inf(1))) }
func down(x float32) float32 { return math.Nextafter32(x, float32(math.Inf(-1))) }

func TestNF4Thresholds(t *testing.T) {
	for i := 0; i < 15; i++ {
		// The float64 midpoint, printed as Python prints it and read as a C float literal.
		mid64 := (nf4Decimal[i] + nf4Decimal[i+1]) / 2
		f, _ := strconv.ParseFloat(strconv.FormatFloat(mid64, 'g', -1, 64), 32)
		mid := float32(f)
		if nf4Thresholds[i] != mid {
			t.Errorf("threshold %d = %v, midpoint of codes %d,%d = %v", i, nf4Thresholds[i], i, i+1, mid)
		}
		th := nf4Thresholds[i]
		// At the threshold the value stays with the lower code; one ulp above it moves up.
		for _, c := range []struct {
			x    float32
			want uint8
		}{{down(th), uint8(i)}, {th, uint8(i)}, {up(th), uint8(i + 1)}} {
			if got := NF4.Encode(c.x); got != c.want {
				t.Errorf("NF4.Encode(%v) = %d, want %d (threshold %d = %v)", c.x, got, c.want, i, th)
			}
		}
	}
	for i, v := range NF4Code {
		if got := NF4.Encode(v); got != uint8(i) {
			t.Errorf("NF4.Encode(code %d = %v) = %d", i, v, got)
		}
		if i > 0 && !(NF4Code[i] > NF4Code[i-1]) {
			t.Errorf("NF4 code book not increasing at %d", i)
		}
	}
	hand := []struct {
		x    float32
		want uint8
	}{
		{-1, 0}, {1, 15}, {0, 7}, {float32(math.Copysign(0, -1)), 7}, {-1.5, 0}, {1.5, 15},
		{float32(math.NaN()), 0}, {0.5, 12}, {0.502, 13}, {-0.05, 6}, {0.04, 8}, {0.0397, 7},
	}
	for _, c := range hand {
		if got := NF4.Encode(c.x); got != c.want {
			t.Errorf("NF4.Encode(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

func TestFP4CodeAndThresholds(t *testing.T) {
	want := [16]float32{0, 0.0625 / 12, 8.0 / 12, 1, 4.0 / 12, 0.5, 2.0 / 12, 0.25}
	for i := 0; i < 8; i++ {
		want[i+8] = -want[i]
	}
	for i := range want {
		if FP4Code[i] != want[i] {
			t.Errorf("FP4Code[%d] = %v, want %v", i, FP4Code[i], want[i])
		}
	}
	if !math.Signbit(float64(FP4Code[8])) || math.Signbit(float64(FP4Code[0])) {
		t.Error("FP4 code 8 must be -0 and code 0 +0")
	}
	// Magnitudes in increasing order and the midpoints between them.
	var mags [8]float32
	for r, c := range fp4RankCode {
		mags[r] = FP4Code[c]
	}
	for r := 0; r < 7; r++ {
		if !(mags[r+1] > mags[r]) {
			t.Fatalf("FP4 magnitudes not increasing at rank %d", r)
		}
		mid := (float64(mags[r]) + float64(mags[r+1])) / 2
		th := fp4Thresholds[r]
		tol := 1e-7
		if r == 5 {
			tol = 4e-7 // bitsandbytes writes 0.583333 for 7/12
		}
		if d := math.Abs(float64(th) - mid); d > tol {
			t.Errorf("threshold %d = %v, midpoint %v (off by %g)", r, th, mid, d)
		}
		for _, sign := range []float32{1, -1} {
			var sb uint8
			if sign < 0 {
				sb = 8
			}
			for _, c := range []struct {
				x    float32
				want uint8
			}{{down(th), fp4RankCode[r]}, {th, fp4RankCode[r]}, {up(th), fp4RankCode[r+1]}} {
				if got := FP4.Encode(sign * c.x); got != sb|c.want {
					t.Errorf("FP4.Encode(%v) = %04b, want %04b", sign*c.x, got, sb|c.want)
				}
			}
		}
	}
	for i, v := range FP4Code {
		if i == 8 {
			continue // -0 encodes as +0
		}
		if got := FP4.Encode(v); got != uint8(i) {
			t.Errorf("FP4.Encode(code %d = %v) = %d", i, v, got)
		}
	}
	hand := []struct {
		x    float32
		want uint8
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0}, {float32(math.NaN()), 0}, {1, 0b0011}, {-1, 0b1011},
		{0.268456, 0b0111}, {0.5833332, 0b0010}, // closer to 1/2, but above bitsandbytes' 0.583333
		{0.0026, 0}, {-0.0027, 0b1001}, {0.4, 0b0100}, {-0.45, 0b1101},
	}
	for _, c := range hand {
		if got := FP4.Encode(c.x); got != c.want {
			t.Errorf("FP4.Encode(%v) = %04b, want %04b", c.x, got, c.want)
		}
	}
}

func TestPacking(t *testing.T) {
	cases := []struct {
		typ  Type
		x    []float32
		want []byte
	}{
		{NF4, []float32{1, -1, 0, 0.5}, []byte{0xF0, 0x7C}},
		{NF4, []float32{1, -1, 0.5}, []byte{0xF0, 0xC7}}, // odd: the pad is the code of 0 (7)
		{FP4, []float32{1, -1, 0, 0.5}, []byte{0x3B, 0x05}},
		{FP4, []float32{-2, 1, 0.5}, []byte{0xB5, 0x70}}, // absmax 2: -1, 0.5, 0.25
		{NF4, []float32{4}, []byte{0xF7}},
		{NF4, []float32{0, 0, 0}, []byte{0x00, 0x00}}, // all-zero block: 0·(1/0) is NaN → code 0
	}
	for _, c := range cases {
		packed := make([]byte, (len(c.x)+1)/2)
		absmax := make([]float32, 1)
		Quantize4(packed, absmax, c.x, c.typ, 64)
		if string(packed) != string(c.want) {
			t.Errorf("%s %v: packed % x, want % x", c.typ, c.x, packed, c.want)
		}
		back := make([]float32, len(c.x))
		Dequantize4(back, packed, absmax, c.typ, 64)
		code := c.typ.Code()
		for i := range c.x {
			q := packed[i/2] >> 4
			if i%2 == 1 {
				q = packed[i/2] & 15
			}
			if back[i] != code[q]*absmax[0] {
				t.Errorf("%s: dequantized[%d] = %v, want %v", c.typ, i, back[i], code[q]*absmax[0])
			}
		}
	}
	// Two blocks of 32 and a partial one: each block has its own absmax and starts its own byte.
	x := make([]float32, 71)
	for i := range x {
		x[i] = float32(i%32+1) * float32(1+i/32)
	}
	packed := make([]byte, 36)
	absmax := make([]float32, 3)
	Quantize4(packed, absmax, x, NF4, 32)
	if absmax[0] != 32 || absmax[1] != 64 || absmax[2] != 21 {
		t.Errorf("absmax = %v, want [32 64 21]", absmax)
	}
	if packed[15]&15 != 15 || packed[16]>>4 != NF4.Encode(2.0/64) || packed[35] != NF4.Encode(21*(1/float32(21)))<<4|7 {
		t.Errorf("block boundaries: % x", packed[14:])
	}
}

func TestDynamicCode(t *testing.T) {
	c := DynamicCode
	for i := 1; i < 256; i++ {
		if !(c[i] > c[i-1]) {
			t.Fatalf("dynamic code not strictly increasing at %d: %v %v", i, c[i-1], c[i])
		}
	}
	hand := map[int]float32{
		0: -0.99296875, 127: 0, 128: float32(1e-6) * 0.55, 129: 3.250000190746505e-06, // torch's linspace(0.1, 1, 3)[1] is 0.55000001
		130: 7.749999895168003e-06, 254: 0.99296875, 255: 1, 126: -float32(1e-6) * 0.55,
	}
	for i, v := range hand {
		if c[i] != v {
			t.Errorf("DynamicCode[%d] = %v, want %v", i, c[i], v)
		}
	}
	// The formula in float64: within float32 rounding of the float32 computation.
	var want []float64
	for i := 0; i < 7; i++ {
		n := 1<<i + 1
		for j := 0; j+1 < n; j++ {
			b0 := 0.1 + 0.9*float64(j)/float64(n-1)
			b1 := 0.1 + 0.9*float64(j+1)/float64(n-1)
			m := math.Pow10(i-6) * (b0 + b1) / 2
			want = append(want, m, -m)
		}
	}
	want = append(want, 0, 1)
	sortFloat64s(want)
	for i := range want {
		if d := math.Abs(float64(c[i]) - want[i]); d > 3e-7*math.Abs(want[i]) {
			t.Errorf("DynamicCode[%d] = %v, formula %v (rel %g)", i, c[i], want[i], d/math.Abs(want[i]))
		}
	}
}

func sortFloat64s(v []float64) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

// TestDynamicCodeTorch compares the 256 values bit for bit with PyTorch running the same
// definition (testdata/dynamic_map.py).
func TestDynamicCodeTorch(t *testing.T) {
	py := testref.Python(t)
	out, err := exec.Command(py, filepath.Join("testdata", "dynamic_map.py")).Output()
	if err != nil {
		t.Fatalf("dynamic_map.py: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 256 {
		t.Fatalf("torch printed %d values", len(lines))
	}
	for i, l := range lines {
		bits, err := strconv.ParseUint(l, 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		if got := math.Float32bits(DynamicCode[i]); got != uint32(bits) {
			t.Errorf("DynamicCode[%d] = %v (%08x), torch %v (%08x)", i, DynamicCode[i], got, math.Float32frombits(uint32(bits)), bits)
		}
	}
}

// TestEncodeDynamicNearest: dQuantize's binary search finds the nearest code value; exactly on
// a float32 midpoint it picks the even index of the two.
func TestEncodeDynamicNearest(t *testing.T) {
	c := &DynamicCode
	for i := 0; i < 255; i++ {
		mid := (c[i] + c[i+1]) * 0.5
		even := i
		if i%2 == 1 {
			even = i + 1
		}
		if got := EncodeDynamic(c, mid); int(got) != even {
			t.Errorf("midpoint %d|%d (%v) → %d, want %d", i, i+1, mid, got, even)
		}
		if got := EncodeDynamic(c, down(mid)); mid > c[i] && down(mid) > c[i] && int(got) != i {
			t.Errorf("below midpoint %d|%d → %d", i, i+1, got)
		}
		if got := EncodeDynamic(c, up(mid)); up(mid) < c[i+1] && int(got) != i+1 {
			t.Errorf("above midpoint %d|%d → %d", i, i+1, got)
		}
		if got := EncodeDynamic(c, c[i]); int(got) != i {
			t.Errorf("code value %d → %d", i, got)
		}
	}
	for _, x := range []struct {
		x    float32
		want uint8
	}{{-1, 0}, {1, 255}, {0, 127}, {0.99, 254}, {-0.9999, 0}} {
		if got := EncodeDynamic(c, x.x); got != x.want {
			t.Errorf("EncodeDynamic(%v) = %d, want %d", x.x, got, x.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 20000; k++ {
		x := float32(r.Float64()*2 - 1)
		if k%2 == 0 {
			x *= float32(math.Pow(10, -6*r.Float64()))
		}
		q := EncodeDynamic(c, x)
		d := math.Abs(float64(x - c[q]))
		for j := range c {
			if dj := math.Abs(float64(x - c[j])); dj < d {
				t.Fatalf("EncodeDynamic(%v) = %d (%v), but code %d (%v) is nearer", x, q, c[q], j, c[j])
			}
		}
	}
}
