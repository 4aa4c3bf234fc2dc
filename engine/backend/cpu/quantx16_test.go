package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// x16Row is a row of n chunks for quantX16's tests, each chunk of one kind (by its index,
// so that every length from 10 chunks up holds every kind): normal values at scales from
// float32's denormals to near its maximum, all zeros (and ±0 only), NaN, ±Inf, denormals
// alone, exact ties (x·inv = k+½: max|x| = 16383·2^e, so inv = 2^-e, and the others
// (k+½)·2^e), normal values with -0, denormals and an outlier sprinkled in, and the near
// ties of x16NearTies.
//
// x16NearTies are pairs (m, x) of float32 bits whose product x·(16383/m) rounds to
// 0.49999999999999994, the largest double below ½, whatever power of two scales both:
// roundHalfAway gives 0 there, as math.Round does, where adding ½ before truncating gives 1.
// (A search of every m in [1, 2) found 56 such pairs.)
var x16NearTies = [][2]uint32{{0x3f8c3dcf, 0x380c4000}, {0x3fa0fd7c, 0x38210000}, {0x3fb83d1f, 0x38384000}}

func x16Row(n int, seed uint64) []float32 {
	x := randn(n*q4Chunk, seed)
	next := func() uint64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return seed >> 11
	}
	scales := []float32{1e-42, 1e-38, 1e-30, 1e-3, 1, 1e3, 1e30, 1e37}
	for c := 0; c < n; c++ {
		xs := x[c*q4Chunk : (c+1)*q4Chunk]
		s := scales[next()%uint64(len(scales))]
		switch c % 10 {
		case 0: // normal values at one scale
			for i := range xs {
				xs[i] *= s
			}
		case 1: // zeros, or ±0
			for i := range xs {
				xs[i] = 0
				if c%2 == 1 && i%3 == 0 {
					xs[i] = float32(math.Copysign(0, -1))
				}
			}
		case 2: // a NaN (quiet, signalling or negative)
			nan := []uint32{0x7fc00000, 0x7f800001, 0xffc00000, 0xff812345}[next()%4]
			xs[next()%q4Chunk] = math.Float32frombits(nan)
		case 3: // +Inf or -Inf, and the largest finite values beside it
			xs[next()%q4Chunk] = float32(math.Inf(1 - 2*int(next()%2)))
			xs[next()%q4Chunk] = -math.MaxFloat32
		case 4: // denormals alone, either sign
			for i := range xs {
				xs[i] = math.Float32frombits(uint32(next()) & 0x807fffff)
			}
		case 5, 6: // ties: inv = 2^-e exactly
			e := int(next()%41) - 20
			if c%10 == 6 {
				e = int(next()%200) - 140 // into the denormals (the ties then round as ties too)
			}
			for i := range xs {
				k := float64(int(next()%32767) - 16383)
				xs[i] = float32(math.Ldexp(k+0.5, e))
				if i%5 == 0 {
					xs[i] = float32(math.Ldexp(k, e))
				}
			}
			xs[next()%q4Chunk] = float32(math.Ldexp(16383*float64(1-2*int(next()%2)), e))
		case 7: // -0, denormals, a tiny value and an outlier among normal values
			for i := range xs {
				xs[i] *= s
			}
			xs[next()%q4Chunk] = float32(math.Copysign(0, -1))
			xs[next()%q4Chunk] = math.Float32frombits(1)
			xs[next()%q4Chunk] = -math.Float32frombits(0x007fffff)
			xs[next()%q4Chunk] = 1e-44
			xs[next()%q4Chunk] = 40 * s
		case 8: // one value alone, the largest finite or a denormal
			clear(xs)
			xs[next()%q4Chunk] = []float32{-math.MaxFloat32, math.MaxFloat32, math.SmallestNonzeroFloat32, -3}[next()%4]
		case 9: // near ties: max|x| = m·2^e, some values ±x·2^e
			pair := x16NearTies[next()%uint64(len(x16NearTies))]
			e := int(next()%61) - 30
			m, v := math.Ldexp(float64(math.Float32frombits(pair[0])), e), math.Ldexp(float64(math.Float32frombits(pair[1])), e)
			for i := range xs {
				xs[i] *= float32(m / 8)
				if i%4 == 1 {
					xs[i] = float32(v * float64(1-2*int(next()%2)))
				}
			}
			xs[next()%q4Chunk] = float32(m * float64(1-2*int(next()%2)))
		}
	}
	return x
}

// checkX16 checks a row's quantization (dst, n chunks) against its definition, apart from
// quantX16Go's code: in each chunk, slot 16j+8l+i holds round(x[v]·16383/m) rounded half away
// from zero (math.Round), v = 2(16l+8k+i)+h for j = 2h+k, m = max|x|, and the factor is
// float32(m/16383/2^14), 8 times; a chunk with NaN or ±Inf gets zeros and the factor NaN,
// an all-zero one zeros and +0.
func checkX16(dst []int16, x []float32) error {
	for c := 0; c < len(x)/q4Chunk; c++ {
		xs, d := x[c*q4Chunk:(c+1)*q4Chunk], dst[c*q4X16Len:(c+1)*q4X16Len]
		var m float64
		bad := false
		for _, v := range xs {
			bad = bad || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)
			m = max(m, math.Abs(float64(v)))
		}
		for k := 0; k < 8; k++ {
			if d[q4Chunk+2*k] != d[q4Chunk] || d[q4Chunk+2*k+1] != d[q4Chunk+1] {
				return fmt.Errorf("chunk %d: the factor's 8 copies differ: %v", c, d[q4Chunk:])
			}
		}
		f := x16Factor(d)
		switch {
		case bad && !math.IsNaN(float64(f)), !bad && m == 0 && math.Float32bits(f) != 0:
			return fmt.Errorf("chunk %d (max|x| %v, NaN/Inf %v): factor %v", c, m, bad, f)
		case !bad && m > 0 && f != float32(m/16383/(1<<14)):
			return fmt.Errorf("chunk %d: factor %v, want %v", c, f, float32(m/16383/(1<<14)))
		}
		for h := 0; h < 2; h++ {
			for k := 0; k < 2; k++ {
				for l := 0; l < 2; l++ {
					for i := 0; i < 8; i++ {
						s, v := 16*(2*h+k)+8*l+i, 2*(16*l+8*k+i)+h
						want := 0.0
						if !bad && m > 0 {
							want = math.Round(float64(xs[v]) * (16383 / m))
						}
						if float64(d[s]) != want || math.Abs(want) > x16Max {
							return fmt.Errorf("chunk %d: slot %d = %d, want %v (x[%d] = %v, max|x| %v)", c, s, d[s], want, v, xs[v], m)
						}
					}
				}
			}
		}
	}
	return nil
}

// TestQuantX16MatchesGo: the kernel in use gives quantX16Go's int16 values and factor bits
// on rows of every length from 1 to 100 chunks (x16Row's kinds: scales from the denormals to
// 1e37, NaN, ±Inf, zeros and -0, exact ties), writes every slot of its chunks and nothing
// past them; and both meet the definition (checkX16).
func TestQuantX16MatchesGo(t *testing.T) {
	defer func(k string) { q4dotKernel = k }(q4dotKernel)
	for _, k := range testKernels() {
		q4dotKernel = k
		for n := 1; n <= 100; n++ {
			x := x16Row(n, uint64(n))
			want := make([]int16, n*q4X16Len)
			quantX16Go(want, x)
			if err := checkX16(want, x); err != nil {
				t.Fatalf("quantX16Go, %d chunks: %v", n, err)
			}
			got := make([]int16, (n+1)*q4X16Len)
			for i := range got {
				got[i] = 0x5a5a // every slot is written, nothing past the chunks
			}
			quantX16(got, x)
			for i, v := range got[n*q4X16Len:] {
				if v != 0x5a5a {
					t.Fatalf("%s, %d chunks: wrote past the end, at %d", k, n, n*q4X16Len+i)
				}
			}
			if i := slices.Compare(got[:n*q4X16Len], want); i != 0 {
				for j := range want {
					if got[j] != want[j] {
						c, s := j/q4X16Len, j%q4X16Len
						t.Fatalf("%s, %d chunks: chunk %d slot %d = %d, quantX16Go %d (chunk's x: %v)", k, n, c, s, got[j], want[j], x[c*q4Chunk:(c+1)*q4Chunk])
					}
				}
			}
		}
	}
}

// TestQuantX16CheckFails: checkX16 catches a wrong order (the exact one-row kernel's),
// rounding half to even, a factor off by one bit, and a NaN chunk quantized as a normal one.
func TestQuantX16CheckFails(t *testing.T) {
	x := x16Row(9, 3)
	good := make([]int16, 9*q4X16Len)
	quantX16Go(good, x)
	if err := checkX16(good, x); err != nil {
		t.Fatal(err)
	}
	breaks := map[string]func(d []int16){
		"order": func(d []int16) { // chunk 0 in the exact one-row kernel's order
			xs := x[:q4Chunk]
			for s, v := range q4Row1AVX2 {
				d[s] = int16(math.Round(float64(xs[v]) * (16383 / maxAbs64(xs))))
			}
		},
		"ties to even": func(d []int16) {
			xs := x[5*q4Chunk : 6*q4Chunk] // a chunk of ties
			for s, v := range q4Row16 {
				d[5*q4X16Len+s] = int16(math.RoundToEven(float64(xs[v]) * (16383 / maxAbs64(xs))))
			}
		},
		"factor": func(d []int16) { d[q4Chunk]++ },
		"NaN":    func(d []int16) { quantX16Go(d[2*q4X16Len:3*q4X16Len], randn(q4Chunk, 1)) },
	}
	for name, f := range breaks {
		d := slices.Clone(good)
		f(d)
		if checkX16(d, x) == nil {
			t.Errorf("%s: the check passes", name)
		}
	}
}

// maxAbs64 is max|x| in float64.
func maxAbs64(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// BenchmarkQuantX16: quantX16 on a decoded token's rows of x at Qwen2.5-0.5B's widths (896:
// the attention's and MLP's inputs; 4864: the down projection's), the AVX2 kernel against
// quantX16Go interleaved in the same run (16 calls each a turn): ns a value of each and
// x_go, the Go reference's time over the kernel's.
// run: go test ./engine/backend/cpu -run X -bench QuantX16 -cpu 1 -count 3
func BenchmarkQuantX16(b *testing.B) {
	if q4dotKernel == "go" {
		b.Skip("no quantX16 kernel on this CPU")
	}
	for _, in := range []int{896, 4864} {
		b.Run(fmt.Sprintf("in=%d", in), func(b *testing.B) {
			x := randn(in, 1)
			dst := make([]int16, in/q4Chunk*q4X16Len)
			var tAsm, tGo time.Duration
			for b.Loop() {
				t0 := time.Now()
				for range 16 {
					quantX16(dst, x)
				}
				t1 := time.Now()
				for range 16 {
					quantX16Go(dst, x)
				}
				tAsm += t1.Sub(t0)
				tGo += time.Since(t1)
			}
			vals := float64(16 * in * b.N)
			b.ReportMetric(float64(tAsm.Nanoseconds())/vals, "avx2_ns/value")
			b.ReportMetric(float64(tGo.Nanoseconds())/vals, "go_ns/value")
			b.ReportMetric(tGo.Seconds()/tAsm.Seconds(), "x_go")
		})
	}
}
