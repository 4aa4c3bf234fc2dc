package cpu

// MatmulForward sets out[rows,outDim] = inp[rows,in]·weightᵀ + bias, with weight stored
// [outDim,in] as in nn.Linear; bias may be nil.
func MatmulForward(out, inp, weight, bias []float32, rows, in, outDim int) {
	if rows == 0 {
		return
	}
	sgemm(false, true, rows, outDim, in, 1, inp, in, weight, in, 0, out, outDim)
	if bias != nil {
		BiasForward(out, bias, rows, outDim)
	}
}

// MatmulBackward accumulates dinp += dout·weight, dweight += doutᵀ·inp and
// dbias += Σ_rows dout. Any of dinp, dweight, dbias may be nil (frozen or absent).
func MatmulBackward(dinp, dweight, dbias, dout, inp, weight []float32, rows, in, outDim int) {
	if rows == 0 {
		return
	}
	if dinp != nil {
		sgemm(false, false, rows, in, outDim, 1, dout, outDim, weight, in, 1, dinp, in)
	}
	if dweight != nil {
		sgemm(true, false, outDim, in, rows, 1, dout, outDim, inp, in, 1, dweight, in)
	}
	if dbias != nil {
		BiasBackward(dbias, dout, rows, outDim)
	}
}

// BiasForward adds bias[cols] to every row of out[rows,cols].
func BiasForward(out, bias []float32, rows, cols int) {
	For(rows, grainFor(cols)*8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o := out[r*cols : (r+1)*cols]
			for j, b := range bias[:cols] {
				o[j] += b
			}
		}
	})
}

// BiasBackward accumulates dbias += Σ_rows dout.
func BiasBackward(dbias, dout []float32, rows, cols int) {
	columnSums(dbias, rows, cols, func(part []float32, lo, hi int) {
		for r := lo; r < hi; r++ {
			for j, d := range dout[r*cols : (r+1)*cols] {
				part[j] += d
			}
		}
	})
}
