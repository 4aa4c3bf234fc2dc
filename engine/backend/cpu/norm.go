package cpu

import "math"

// LayerNormForward sets out = (x−mean)·rstd·weight + bias per row of inp[rows,dim] and
// keeps mean and rstd (one per row) for the backward. Statistics are accumulated in
// float64.
func LayerNormForward(out, mean, rstd, inp, weight, bias []float32, rows, dim int, eps float64) {
	For(rows, grainFor(dim)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x := inp[r*dim : (r+1)*dim]
			var s float64
			for _, v := range x {
				s += float64(v)
			}
			m := s / float64(dim)
			var ss float64
			for _, v := range x {
				d := float64(v) - m
				ss += d * d
			}
			rs := 1 / math.Sqrt(ss/float64(dim)+eps)
			mf, rf := float32(m), float32(rs)
			o := out[r*dim : (r+1)*dim]
			for j, v := range x {
				o[j] = (v-mf)*rf*weight[j] + bias[j]
			}
			mean[r], rstd[r] = mf, rf
		}
	})
}

// LayerNormBackward accumulates dinp, dweight and dbias from dout, given the forward's
// input, weight and per-row mean and rstd. dweight and dbias may be nil (frozen).
func LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd []float32, rows, dim int) {
	For(rows, grainFor(dim)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x, d := inp[r*dim:(r+1)*dim], dout[r*dim:(r+1)*dim]
			m, rs := mean[r], rstd[r]
			var sumG, sumGN float64 // Σ g and Σ g·n, g = dout·w, n = normalised input
			for j := range x {
				g := d[j] * weight[j]
				sumG += float64(g)
				sumGN += float64(g * (x[j] - m) * rs)
			}
			mg, mgn := float32(sumG/float64(dim)), float32(sumGN/float64(dim))
			dx := dinp[r*dim : (r+1)*dim]
			for j := range x {
				n := (x[j] - m) * rs
				dx[j] += (d[j]*weight[j] - mg - n*mgn) * rs
			}
		}
	})
	if dweight == nil && dbias == nil {
		return
	}
	cols := 2 * dim
	sums := make([]float32, cols)
	columnSums(sums, rows, cols, func(part []float32, lo, hi int) {
		for r := lo; r < hi; r++ {
			x, d := inp[r*dim:(r+1)*dim], dout[r*dim:(r+1)*dim]
			m, rs := mean[r], rstd[r]
			for j := range x {
				part[j] += d[j] * (x[j] - m) * rs
				part[dim+j] += d[j]
			}
		}
	})
	addTo(dweight, sums[:dim])
	addTo(dbias, sums[dim:])
}

// RMSNormForward sets out = x·rstd·(offset + weight) per row with rstd = 1/√(mean(x²)+eps),
// keeping rstd for the backward. offset is 0, or 1 for gemma's (1 + w) norms.
func RMSNormForward(out, rstd, inp, weight []float32, rows, dim int, eps float64, offset float32) {
	For(rows, grainFor(dim)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x := inp[r*dim : (r+1)*dim]
			var ss float64
			for _, v := range x {
				ss += float64(v) * float64(v)
			}
			rf := float32(1 / math.Sqrt(ss/float64(dim)+eps))
			o := out[r*dim : (r+1)*dim]
			for j, v := range x {
				o[j] = v * rf * (offset + weight[j])
			}
			rstd[r] = rf
		}
	})
}

// RMSNormBackward accumulates dinp and dweight (may be nil) from dout:
// dx = rstd·g − x·rstd³·mean(g·x) with g = dout·(offset + weight), dweight += dout·x·rstd.
func RMSNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, rows, dim int, offset float32) {
	For(rows, grainFor(dim)*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x, d := inp[r*dim:(r+1)*dim], dout[r*dim:(r+1)*dim]
			rs := rstd[r]
			var sgx float64
			for j := range x {
				sgx += float64(d[j] * (offset + weight[j]) * x[j])
			}
			c := float32(sgx/float64(dim)) * rs * rs * rs
			dx := dinp[r*dim : (r+1)*dim]
			for j := range x {
				dx[j] += d[j]*(offset+weight[j])*rs - x[j]*c
			}
		}
	})
	if dweight == nil {
		return
	}
	columnSums(dweight, rows, dim, func(part []float32, lo, hi int) {
		for r := lo; r < hi; r++ {
			x, d := inp[r*dim:(r+1)*dim], dout[r*dim:(r+1)*dim]
			rs := rstd[r]
			for j := range x {
				part[j] += d[j] * x[j] * rs
			}
		}
	})
}

func addTo(dst, src []float32) {
	if dst == nil {
		return
	}
	for j, v := range src {
		dst[j] += v
	}
}
