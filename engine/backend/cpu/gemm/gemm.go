// Package gemm is the CPU's single-precision matrix multiply, the hot loop of every forward and
// backward pass.
//
// Sgemm follows the usual blocked design: op(B) is packed kc×nc at a time into micro-panels,
// op(A) mc×kc at a time, and an assembly micro-kernel computes one register tile of C per call:
// 14×32 with AVX-512 (28×16 when n ≤ 16), 6×16 with AVX2+FMA, chosen from the CPU's features,
// and a 4×4 plain-Go kernel elsewhere or with the purego build tag. The transpositions are done
// by the packing, so NN, NT, TN and TT all run the same kernels. Small sides skip packing:
// x·Wᵀ with few rows on either side (decoding, LoRA's rank) runs a dot-product kernel on both
// operands in place, and op(A)·B with few rows of op(A) a kernel that reads B's rows in place.
// Work is split over Threads() goroutines by tiles of C, each packing its own operands.
// SgemmRef is the plain reference every path is tested against.
package gemm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices, where op(A) is m×k
// (A is k×m when transA), op(B) is k×n (B is n×k when transB), and lda, ldb, ldc are the
// row strides of A, B and C as stored. With beta = 0, C is only written, never read.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkMatrix("B", b, ldb, transB, k, n)
	sgemm(active, transA, m, n, k, alpha, a, lda, operandB{b: b, ld: ldb, trans: transB}, beta, c, ldc)
}

// PanelSource supplies op(B) as packed panels instead of a slice, so that a weight kept in
// another form (4-bit blocks) is expanded one cache block at a time and never as a whole.
//
// PackB writes rows p0..p0+kc-1 and columns j0..j0+nc-1 of op(B) into dst in the packed layout
// described at PackB (the function): ceil(nc/nr) micro-panels of kc×nr floats, the columns past
// nc in the last micro-panel set to zero. It is called from several goroutines at once with
// disjoint column ranges and distinct dst, so it must not keep per-call state in the receiver.
type PanelSource interface {
	PackB(dst []float32, p0, kc, j0, nc, nr int)
}

// SgemmSource is Sgemm with op(B) (k×n) supplied by src.
func SgemmSource(transA bool, m, n, k int, alpha float32, a []float32, lda int,
	src PanelSource, beta float32, c []float32, ldc int) {
	sgemm(active, transA, m, n, k, alpha, a, lda, operandB{src: src}, beta, c, ldc)
}

// KernelName names the micro-kernel Sgemm uses on this CPU: "avx512", "avx2" or "go".
func KernelName() string { return active.name }

var active = kernels()[0]

var threads atomic.Int64

// SetThreads sets how many goroutines one Sgemm call may use; n < 1 restores the default,
// runtime.GOMAXPROCS(0).
func SetThreads(n int) { threads.Store(int64(max(n, 0))) }

// Threads reports how many goroutines one Sgemm call may use.
func Threads() int {
	if n := int(threads.Load()); n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// operandB is op(B): a row-major slice or a PanelSource.
type operandB struct {
	b     []float32
	ld    int
	trans bool
	src   PanelSource
}

func (o *operandB) pack(dst []float32, p0, kc, j0, nc, nr int) {
	if o.src != nil {
		o.src.PackB(dst, p0, kc, j0, nc, nr)
		return
	}
	PackB(dst, o.b, o.ld, o.trans, p0, kc, j0, nc, nr)
}

// packCost is what packing one float of op(B) costs in kernel multiply-adds: a copy for a
// slice, a guess at dequantizing for a PanelSource.
func (o *operandB) packCost() float64 {
	if o.src != nil {
		return 64
	}
	return 8
}

// minParallelWork is the m·n·k below which one goroutine is faster than waking others
// (a variable so that tests can send small problems through the parallel path).
var minParallelWork = 96 * 96 * 96

func sgemm(kr *kernel, transA bool, m, n, k int, alpha float32, a []float32, lda int,
	b operandB, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	checkMatrix("A", a, lda, transA, m, k)
	checkMatrix("C", c, ldc, false, m, n)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	if n <= kr.dotN && m > max(n, kr.directM) && b.src == nil && !b.trans {
		transposed(kr, transA, m, n, k, alpha, a, lda, b.b, b.ld, beta, c, ldc)
		return
	}
	if kr.narrow != nil && n <= kr.narrow.nr {
		kr = kr.narrow
	}
	if b.src == nil && b.trans && (m <= kr.dotM || n <= kr.dotN && !transA) {
		smallNT(kr, transA, m, n, k, alpha, a, lda, b.b, b.ld, beta, c, ldc)
		return
	}
	if m <= kr.directM && b.src == nil && !b.trans && n >= kr.nr {
		direct(kr, transA, m, n, k, alpha, a, lda, b.b, b.ld, beta, c, ldc)
		return
	}
	j := job{kr: kr, transA: transA, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, b: b,
		beta: beta, c: c, ldc: ldc}
	tm, tn := 1, 1
	if t := Threads(); t > 1 && m*n*k >= minParallelWork {
		tm, tn = split(kr, t, m, n, k, b.packCost())
	}
	if tm*tn == 1 {
		j.work(0, m, 0, n)
		return
	}
	// Tiles are dealt in whole micro-tiles so that only the matrix edge has partial ones.
	mu, nu := ceilDiv(m, kr.mr), ceilDiv(n, kr.nr)
	parallelFor(tm*tn, tm*tn, func(t int) {
		ti, tj := t/tn, t%tn
		r0, r1 := min(m, ti*mu/tm*kr.mr), min(m, (ti+1)*mu/tm*kr.mr)
		c0, c1 := min(n, tj*nu/tn*kr.nr), min(n, (tj+1)*nu/tn*kr.nr)
		j.work(r0, r1, c0, c1)
	})
}

// split picks the grid tm×tn of goroutines over C (tm·tn ≤ t) that minimises the busiest
// goroutine's estimated cost: its multiply-adds, plus the packing it does, where each
// goroutine packs its own rows of op(A) and its own columns of op(B). Packing a float of A
// costs about 8 multiply-adds of the kernel, one of B costB.
func split(kr *kernel, t, m, n, k int, costB float64) (tm, tn int) {
	mu, nu := ceilDiv(m, kr.mr), ceilDiv(n, kr.nr)
	tm, tn = 1, 1
	best := -1.0
	for a := 1; a <= min(t, mu); a++ {
		for b := 1; b <= min(t/a, nu); b++ {
			rows := float64(ceilDiv(mu, a) * kr.mr)
			cols := float64(ceilDiv(nu, b) * kr.nr)
			// A is packed once per nc block of columns, B once.
			packA := rows * float64(k) * float64(ceilDiv(int(cols), kr.nc))
			packB := cols * float64(k)
			cost := rows*cols*float64(k) + 8*packA + costB*packB
			if best < 0 || cost < best {
				best, tm, tn = cost, a, b
			}
		}
	}
	return tm, tn
}

// job is one Sgemm call, shared read-only by its goroutines.
type job struct {
	kr     *kernel
	transA bool
	m      int
	n      int
	k      int
	alpha  float32
	a      []float32
	lda    int
	b      operandB
	beta   float32
	c      []float32
	ldc    int
}

// work computes rows r0..r1-1, columns c0..c1-1 of C on the calling goroutine.
func (j *job) work(r0, r1, c0, c1 int) {
	if r0 >= r1 || c0 >= c1 {
		return
	}
	kr := j.kr
	mr, nr := kr.mr, kr.nr
	// Equal blocks (rounded to whole micro-panels) avoid a thin last block.
	kc := ceilDiv(j.k, ceilDiv(j.k, kr.kc))
	mc := roundUp(ceilDiv(r1-r0, ceilDiv(r1-r0, kr.mc)), mr)
	nc := roundUp(ceilDiv(c1-c0, ceilDiv(c1-c0, kr.nc)), nr)

	ws := getWorkspace(mc*kc, kc*nc, mr*nr)
	defer putWorkspace(ws)
	for jc := c0; jc < c1; jc += nc {
		ncur := min(nc, c1-jc)
		for pc := 0; pc < j.k; pc += kc {
			kcur := min(kc, j.k-pc)
			j.b.pack(ws.b, pc, kcur, jc, ncur, nr)
			// Later k blocks add to what the first one stored.
			beta, load := j.beta, j.beta != 0
			if pc > 0 {
				beta, load = 1, true
			}
			for ic := r0; ic < r1; ic += mc {
				mcur := min(mc, r1-ic)
				packA(ws.a, j.a, j.lda, j.transA, ic, mcur, pc, kcur, mr)
				for jr := 0; jr < ncur; jr += nr {
					nrr := min(nr, ncur-jr)
					bp := ws.b[(jr/nr)*kcur*nr:]
					for ir := 0; ir < mcur; ir += mr {
						mrr := min(mr, mcur-ir)
						ap := ws.a[(ir/mr)*kcur*mr:]
						cp := j.c[(ic+ir)*j.ldc+jc+jr:]
						if mrr == mr && nrr == nr {
							kr.run(kcur, ap, bp, cp, j.ldc, j.alpha, beta, load)
							continue
						}
						kr.run(kcur, ap, bp, ws.tile, nr, j.alpha, 0, false)
						mergeTile(cp, j.ldc, ws.tile, nr, mrr, nrr, beta, load)
					}
				}
			}
		}
	}
}

// mergeTile stores the top-left mr×nr corner of an edge tile computed into t.
func mergeTile(c []float32, ldc int, t []float32, ldt, mr, nr int, beta float32, load bool) {
	for i := 0; i < mr; i++ {
		ci := c[i*ldc : i*ldc+nr]
		ti := t[i*ldt : i*ldt+nr]
		if load {
			for j, v := range ti {
				ci[j] = v + beta*ci[j]
			}
		} else {
			copy(ci, ti)
		}
	}
}

// scale sets C = beta·C, writing zeros without reading C when beta is 0.
func scale(m, n int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		ci := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			for j := range ci {
				ci[j] *= beta
			}
		}
	}
}

// workspace holds one goroutine's packed blocks and an edge tile.
type workspace struct {
	a, b, tile []float32
}

// workspaces keeps released workspaces for the next call. Not a sync.Pool: that one is emptied
// by every garbage collection, and reallocating megabytes of packing buffers then costs more
// than a small multiply.
var workspaces struct {
	sync.Mutex
	free []*workspace
}

// maxFreeWorkspaces bounds what workspaces keeps (each holds up to a few MB).
const maxFreeWorkspaces = 16

func getWorkspace(na, nb, nt int) *workspace {
	var ws *workspace
	workspaces.Lock()
	if n := len(workspaces.free); n > 0 {
		ws = workspaces.free[n-1]
		workspaces.free = workspaces.free[:n-1]
	}
	workspaces.Unlock()
	if ws == nil {
		ws = &workspace{}
	}
	ws.a = fit(ws.a, na)
	ws.b = fit(ws.b, nb)
	ws.tile = fit(ws.tile, nt)
	return ws
}

func putWorkspace(ws *workspace) {
	workspaces.Lock()
	if len(workspaces.free) < maxFreeWorkspaces {
		workspaces.free = append(workspaces.free, ws)
	}
	workspaces.Unlock()
}

// fit returns s if it has room for n floats, else a new slice whose first element is 64-byte
// aligned, so that the kernels' vector loads of packed B never straddle cache lines.
func fit(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	raw := make([]float32, n+16)
	off := int((64 - uintptr(unsafe.Pointer(&raw[0]))%64) % 64 / 4)
	return raw[off : off+n : off+n]
}

// checkMatrix panics unless s holds a rows×cols matrix (cols×rows when trans) with row
// stride ld: the kernels read memory through raw pointers, so this is what keeps them safe.
func checkMatrix(name string, s []float32, ld int, trans bool, rows, cols int) {
	if trans {
		rows, cols = cols, rows
	}
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm: ld%s=%d smaller than the row width %d", name, ld, cols))
	}
	if rows > 0 && cols > 0 && len(s) < (rows-1)*ld+cols {
		panic(fmt.Sprintf("gemm: %s has %d elements, a %d×%d matrix with stride %d needs %d",
			name, len(s), rows, cols, ld, (rows-1)*ld+cols))
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func roundUp(a, b int) int { return ceilDiv(a, b) * b }

// SgemmRef is the plain reference the fast paths are tested against.
func SgemmRef(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}
