//go:build !purego

package cpu

//go:noescape
func f32axpy64(n int, p *float32, v *float32, ldv int, y *float32)

//go:noescape
func f32dots8(groups, c int, w *float32, ldw int, x *float32, y *float32)

// dotRows sets y[j] = x·w[j·ldw:] (len(x) values, whole chunks of 64) for j < len(y): eight
// rows at a time in f32dots8, the rest in f32row.
func dotRows(x, w []float32, ldw int, y []float32) {
	n, c := len(y), len(x)/q4Chunk
	if n == 0 {
		return
	}
	if q4dotKernel != "avx2" {
		dotRowsGo(x, w, ldw, y)
		return
	}
	_ = w[(n-1)*ldw+len(x)-1]
	g := n / 8
	if g > 0 {
		f32dots8(g, c, &w[0], ldw, &x[0], &y[0])
	}
	if t := 8 * g; t < n {
		clear(y[t:])
		f32row(c, w[t*ldw:], ldw, x, y[t:])
	}
}

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
