package cpu

// EmbeddingForward sets out[r] = wte[ids[r]] (+ wpe[pos[r]] when wpe is not nil) for each
// row, with rows of width dim. The ids and positions must be in range (checked by callers).
func EmbeddingForward(out []float32, ids, pos []int32, wte, wpe []float32, dim int) {
	For(len(ids), grainFor(dim)*8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o := out[r*dim : (r+1)*dim]
			copy(o, wte[int(ids[r])*dim:])
			if wpe != nil {
				p := wpe[int(pos[r])*dim : (int(pos[r])+1)*dim]
				for j := range o {
					o[j] += p[j]
				}
			}
		}
	})
}

// EmbeddingBackward accumulates dwte[ids[r]] += dout[r] and dwpe[pos[r]] += dout[r]
// (either table may be nil). Work is split over columns so rows sharing an id never race
// and the sum order is fixed.
func EmbeddingBackward(dwte, dwpe, dout []float32, ids, pos []int32, dim int) {
	For(dim, 16, func(c0, c1 int) {
		for r := range ids {
			d := dout[r*dim+c0 : r*dim+c1]
			if dwte != nil {
				t := dwte[int(ids[r])*dim+c0 : int(ids[r])*dim+c1]
				for j := range d {
					t[j] += d[j]
				}
			}
			if dwpe != nil {
				p := dwpe[int(pos[r])*dim+c0 : int(pos[r])*dim+c1]
				for j := range d {
					p[j] += d[j]
				}
			}
		}
	})
}
