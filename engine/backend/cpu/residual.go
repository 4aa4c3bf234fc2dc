package cpu

// ResidualForward sets out = a + b over n elements (out may alias a or b).
func ResidualForward(out, a, b []float32, n int) {
	For(n, 1<<16, func(lo, hi int) {
		o, x, y := out[lo:hi], a[lo:hi], b[lo:hi]
		for i := range o {
			o[i] = x[i] + y[i]
		}
	})
}

// ResidualBackward accumulates da += dout and db += dout (either may be nil).
func ResidualBackward(da, db, dout []float32, n int) {
	For(n, 1<<16, func(lo, hi int) {
		d := dout[lo:hi]
		if da != nil {
			x := da[lo:hi]
			for i := range d {
				x[i] += d[i]
			}
		}
		if db != nil {
			y := db[lo:hi]
			for i := range d {
				y[i] += d[i]
			}
		}
	})
}
