//go:build !purego

package cpu

//go:noescape
func f32axpy64(n int, p *float32, v *float32, ldv int, y *float32)

// axpyRows adds to y[:64·c] the rows v[j·ldv:] (their first 64·c values) weighted by p[j],
// j < len(p), in order: c chunks of 64, each one f32axpy64 over the rows.
func axpyRows(p, v []float32, ldv int, y []float32) {
	n, w := len(p), len(y)
	if n == 0 {
		return
	}
	if q4dotKernel != "avx2" {
		axpyRowsGo(p, v, ldv, y)
		return
	}
	_, _ = v[(n-1)*ldv+w-1], y[w-1]
	for c := 0; c+q4Chunk <= w; c += q4Chunk {
		f32axpy64(n, &p[0], &v[c], ldv, &y[c])
	}
}
