package cpu

import (
	"fmt"
	"math"
	"runtime"
	"testing"
)

// argmaxScan is argmax as one scalar pass defines it: the first value larger than every one
// before it (a NaN is larger than nothing, and nothing is larger than a NaN at 0).
func argmaxScan(x []float32) int {
	best := 0
	for j, v := range x {
		if v > x[best] {
			best = j
		}
	}
	return best
}

// maxFold is the row maximum as Go's max builtin folds it, one value at a time.
func maxFold(x []float32, scale float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v*scale)
	}
	return mx
}

// edgeRows are rows around what the maximum treats specially: NaN first, later and only,
// infinities, both zeros, ties within and across chunks (lowest index wins), values in the
// assembly's tail, a NaN after the maximum in each lane, and vocabularies of several chunks with the maximum in various chunks.
func edgeRows() [][]float32 {
	inf, nan, nz := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	rows := [][]float32{
		{}, {7}, {nan}, {nan, 1}, {1, nan, 3}, {-inf, -inf}, {-inf, nan, -inf}, {inf, 1, inf}, {2, 2, 2, 2},
		{nz, 0, -1}, {0, nz}, {nz, nz}, {-1, nz, 0, nz}, {nan, nan, 2},
		{0.5, 3, -1, 3, 2}, {-inf, 1, -inf, -2},
	}
	for p := range 32 { // the maximum, then a NaN in the same lane of the next block
		r := randn(160, uint64(p))
		r[p], r[p+32], r[p+64] = 50, nan, 40
		rows = append(rows, r)
	}
	for _, n := range []int{31, 32, 33, 100, lseChunk - 1, lseChunk, lseChunk + 1, 3*lseChunk + 77, 151936} {
		base := randn(n, uint64(n))
		rows = append(rows, base)
		for _, mod := range []func(r []float32){
			func(r []float32) { r[n-1] = 50 },                      // maximum in the tail
			func(r []float32) { r[n/2], r[n-1] = 50, 50 },          // a tie across chunks
			func(r []float32) { r[n/3] = nan },                     // a NaN inside
			func(r []float32) { r[0] = nan },                       // NaN first
			func(r []float32) { r[n/2] = inf },                     // +Inf
			func(r []float32) { r[n/4] = -inf },                    // −Inf
			func(r []float32) { clear(r); r[n/2] = nz },            // zeros, one −0
			func(r []float32) { clear(r); r[n-1] = nz; r[0] = nz }, // zeros at both ends −0
			func(r []float32) { // all −0 but one +0 far in
				for j := range r {
					r[j] = nz
				}
				r[n-1] = 0
			},
			func(r []float32) { // all −Inf
				for j := range r {
					r[j] = -inf
				}
			},
		} {
			r := append([]float32(nil), base...)
			mod(r)
			rows = append(rows, r)
		}
	}
	return rows
}

// TestMaxKernels: the assembly's maximum and its exp-sum give the pure Go ones' results
// (maxima, NaN flags, sums to the bit) on every row and scale.
func TestMaxKernels(t *testing.T) {
	for _, k := range expKernels()[1:] {
		for i, row := range edgeRows() {
			for _, scale := range []float32{1, 0.7, 1.3} {
				var m0, m1 float32
				var n0, n1 bool
				var s0, s1 float64
				mx := maxFold(row, scale)
				if mx != mx || math.IsInf(float64(mx), 0) {
					mx = 0
				}
				withExpKernel("go", func() { m0, n0 = maxNaN(row, scale); s0 = expSum(row, scale, -mx) })
				withExpKernel(k, func() { m1, n1 = maxNaN(row, scale); s1 = expSum(row, scale, -mx) })
				if m0 != m1 || n0 != n1 || math.Float64bits(s0) != math.Float64bits(s1) {
					t.Fatalf("%s, row %d (%d values), scale %g: max %v nan %v sum %v; go %v %v %v", k, i, len(row), scale, m1, n1, s1, m0, n0, s0)
				}
			}
		}
	}
}

// TestArgmaxAndMax: argmax and the log-sum-exp's maximum keep the scalar passes' results on
// rows with NaN, infinities, both zeros and ties (the maximum's bits: Go's max builtin's),
// with every kernel, on one core and two.
func TestArgmaxAndMax(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, k := range expKernels() {
		for _, procs := range []int{1, 2} {
			runtime.GOMAXPROCS(procs)
			withExpKernel(k, func() {
				for i, row := range edgeRows() {
					if got, want := argmax(row), argmaxScan(row); got != want {
						t.Fatalf("%s, %d cores, row %d (%d values): argmax %d, want %d", k, procs, i, len(row), got, want)
					}
					for _, scale := range []float32{1, 0.5} {
						got, want := maxOf(row, scale, true).mx, maxFold(row, scale)
						if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
							t.Fatalf("%s, %d cores, row %d: max %v, want %v", k, procs, i, got, want)
						}
					}
				}
			})
		}
	}
}

// TestLogSumExpReference: log Σ exp over long rows, against float64 arithmetic (math.Exp of
// each value less the maximum, summed, its log), at every kernel; and the same bits on one
// core and two, split or not.
func TestLogSumExpReference(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, n := range []int{5, 1000, lseChunk + 3, 151936} {
		row := randn(n, uint64(n)+5)
		for j := range row {
			row[j] *= 4
		}
		for _, invT := range []float32{1, 1 / 0.7} {
			mx := maxFold(row, invT)
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v)*float64(invT) - float64(mx))
			}
			want := math.Log(s)
			var bits []uint64
			for _, k := range expKernels() {
				for _, procs := range []int{1, 2} {
					runtime.GOMAXPROCS(procs)
					for _, par := range []bool{false, true} {
						withExpKernel(k, func() {
							m, lse := logSumExp(row, invT, par)
							if m != mx || math.Abs(lse-want) > 1e-6 {
								t.Fatalf("%s, %d values, 1/T=%g: max %v, lse %.9f; want %v, %.9f", k, n, invT, m, lse, mx, want)
							}
							bits = append(bits, math.Float64bits(lse))
						})
					}
				}
			}
			for _, b := range bits {
				if b != bits[0] {
					t.Fatalf("%d values, 1/T=%g: the log-sum-exp's bits differ by kernel, cores or split: %x", n, invT, bits)
				}
			}
		}
	}
}

// TestLogSoftmaxCores: LogSoftmax's row has the same bits on one core and two.
func TestLogSoftmaxCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	row := randn(3*lseChunk+5, 9)
	var outs [2][]float32
	for i, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		outs[i] = make([]float32, len(row))
		LogSoftmax(outs[i], row, 1.25)
	}
	if fmt.Sprint(outs[0]) != fmt.Sprint(outs[1]) {
		t.Fatal("LogSoftmax differs between 1 and 2 cores")
	}
	var s float64
	for _, v := range outs[0] {
		s += math.Exp(float64(v))
	}
	if math.Abs(s-1) > 1e-5 {
		t.Fatalf("Σ exp(log-softmax) = %v", s)
	}
}
