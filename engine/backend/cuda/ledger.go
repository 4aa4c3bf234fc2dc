package cuda

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"rlhfstation/internal/human"
)

// Count is a number of device calls and what they declare: bytes of device memory read and
// written, floating-point operations; and, for kernels, the launches' shapes that the cost
// model's latency term needs (latency.go): warps and blocks launched, and each launch's
// chain, the dependent memory round trips its longest warp makes, summed (Chain) and
// weighted by the launch's warps (WarpChain); and the dynamic shared memory the launches
// asked for, summed over their blocks (Shared), for the kernel's occupancy (occupancy.go).
type Count struct {
	N                int64
	Read, Written    int64
	Flops            int64
	Warps, Blocks    int64
	Chain, WarpChain int64
	Shared           int64
}

func (c *Count) add(x Count) { *c = c.plus(x, 1) }

func (c Count) sub(x Count) Count { return c.plus(x, -1) }

// plus is c + f·x.
func (c Count) plus(x Count, f int64) Count {
	return Count{c.N + f*x.N, c.Read + f*x.Read, c.Written + f*x.Written, c.Flops + f*x.Flops,
		c.Warps + f*x.Warps, c.Blocks + f*x.Blocks, c.Chain + f*x.Chain, c.WarpChain + f*x.WarpChain, c.Shared + f*x.Shared}
}

// Div is c's share of n identical rounds (each count divided, rounding down).
func (c Count) Div(n int64) Count {
	return Count{c.N / n, c.Read / n, c.Written / n, c.Flops / n, c.Warps / n, c.Blocks / n, c.Chain / n, c.WarpChain / n, c.Shared / n}
}

// Bytes is what the calls move through device memory.
func (c Count) Bytes() int64 { return c.Read + c.Written }

// Ledger counts the device calls the backend made: what a step costs on a GPU is mostly
// the bytes its kernels move, the flops of its products and the fixed cost of each call
// the host makes, so these are counted (on the stand-in exactly as on a GPU) and the cost
// model (costmodel.go) turns them into time.
//
// Work captured into a graph is not counted when captured; each replay counts one graph
// launch and, under Nodes, the work it replays.
type Ledger struct {
	Kernels       map[string]Count // kernel launches outside graphs, by kernel name
	BLAS          Count            // cuBLAS products outside graphs (one call each)
	GraphLaunches int64
	Nodes         map[string]Count // the work graph launches replayed: kernels by name, and nodeBLAS, nodeCopy, nodeMemset
	HtoD, DtoH    Count            // host↔device copies (bytes as Read, device side)
	DtoD, Memset  Count            // device copies and fills outside graphs
	Syncs         int64            // waits for the stream
	Allocs, Frees int64            // the driver's allocations (the allocator's cache hits cost none)
	AllocBytes    int64
}

// Node names of graph work that is not a kernel of ours.
const (
	nodeBLAS   = "cublas"
	nodeCopy   = "memcpy"
	nodeMemset = "memset"
)

func (l *Ledger) init() {
	if l.Kernels == nil {
		l.Kernels = map[string]Count{}
	}
	if l.Nodes == nil {
		l.Nodes = map[string]Count{}
	}
}

// Clone is a deep copy.
func (l Ledger) Clone() Ledger {
	l.Kernels, l.Nodes = maps.Clone(l.Kernels), maps.Clone(l.Nodes)
	l.init()
	return l
}

// Sub is what was counted since prev (a snapshot of the same ledger).
func (l Ledger) Sub(prev Ledger) Ledger {
	r := l.Clone()
	for k, c := range prev.Kernels {
		r.Kernels[k] = r.Kernels[k].sub(c)
		if r.Kernels[k] == (Count{}) {
			delete(r.Kernels, k)
		}
	}
	for k, c := range prev.Nodes {
		r.Nodes[k] = r.Nodes[k].sub(c)
		if r.Nodes[k] == (Count{}) {
			delete(r.Nodes, k)
		}
	}
	r.BLAS = r.BLAS.sub(prev.BLAS)
	r.GraphLaunches -= prev.GraphLaunches
	r.HtoD, r.DtoH = r.HtoD.sub(prev.HtoD), r.DtoH.sub(prev.DtoH)
	r.DtoD, r.Memset = r.DtoD.sub(prev.DtoD), r.Memset.sub(prev.Memset)
	r.Syncs -= prev.Syncs
	r.Allocs -= prev.Allocs
	r.Frees -= prev.Frees
	r.AllocBytes -= prev.AllocBytes
	return r
}

// Add counts x's calls into l.
func (l *Ledger) Add(x Ledger) {
	l.init()
	for k, c := range x.Kernels {
		v := l.Kernels[k]
		v.add(c)
		l.Kernels[k] = v
	}
	for k, c := range x.Nodes {
		v := l.Nodes[k]
		v.add(c)
		l.Nodes[k] = v
	}
	l.BLAS.add(x.BLAS)
	l.GraphLaunches += x.GraphLaunches
	l.HtoD.add(x.HtoD)
	l.DtoH.add(x.DtoH)
	l.DtoD.add(x.DtoD)
	l.Memset.add(x.Memset)
	l.Syncs += x.Syncs
	l.Allocs += x.Allocs
	l.Frees += x.Frees
	l.AllocBytes += x.AllocBytes
}

// Plus is l with f times x's calls added (x may be a difference of ledgers, f negative).
func (l Ledger) Plus(x Ledger, f int64) Ledger {
	r := l.Clone()
	mul := func(c Count) Count { return Count{}.plus(c, f) }
	for k, c := range x.Kernels {
		v := r.Kernels[k]
		v.add(mul(c))
		r.Kernels[k] = v
	}
	for k, c := range x.Nodes {
		v := r.Nodes[k]
		v.add(mul(c))
		r.Nodes[k] = v
	}
	r.BLAS.add(mul(x.BLAS))
	r.HtoD.add(mul(x.HtoD))
	r.DtoH.add(mul(x.DtoH))
	r.DtoD.add(mul(x.DtoD))
	r.Memset.add(mul(x.Memset))
	r.GraphLaunches += f * x.GraphLaunches
	r.Syncs += f * x.Syncs
	r.Allocs += f * x.Allocs
	r.Frees += f * x.Frees
	r.AllocBytes += f * x.AllocBytes
	return r
}

// Layers extrapolates the ledgers of the same work on a model of one layer (l1) and of two
// (l2) to a model of n identical layers: each count is fixed + n × per layer, exactly, when
// the layers do the same work. The allocations are l2's (the allocator's cache, not the
// layers, decides them).
func Layers(l1, l2 Ledger, n int) Ledger {
	r := l1.Plus(l2.Sub(l1), int64(n-1))
	r.Allocs, r.Frees, r.AllocBytes = l2.Allocs, l2.Frees, l2.AllocBytes
	return r
}

// Launches is the kernels launched outside graphs.
func (l Ledger) Launches() int64 {
	var n int64
	for _, c := range l.Kernels {
		n += c.N
	}
	return n
}

// GraphNodes is the work the graph launches replayed (kernels, products, copies).
func (l Ledger) GraphNodes() int64 {
	var n int64
	for _, c := range l.Nodes {
		n += c.N
	}
	return n
}

// Copies is the host↔device copies.
func (l Ledger) Copies() int64 { return l.HtoD.N + l.DtoH.N }

// HostCalls is every call the host makes that queues work one piece at a time: kernel
// launches, cuBLAS products, copies and fills outside graphs, and graph launches.
func (l Ledger) HostCalls() int64 {
	return l.Launches() + l.BLAS.N + l.HtoD.N + l.DtoH.N + l.DtoD.N + l.Memset.N + l.GraphLaunches
}

// Launched is kernel name's launches, outside and inside graphs.
func (l Ledger) Launched(name string) int64 { return l.Kernels[name].N + l.Nodes[name].N }

// LaunchedPrefix is the launches, outside and inside graphs, of the kernels whose names
// start with prefix ("cast_", say).
func (l Ledger) LaunchedPrefix(prefix string) int64 {
	var n int64
	for k, c := range l.Kernels {
		if strings.HasPrefix(k, prefix) {
			n += c.N
		}
	}
	for k, c := range l.Nodes {
		if strings.HasPrefix(k, prefix) {
			n += c.N
		}
	}
	return n
}

// Work is what every kernel, product and device copy declared, in and out of graphs (the
// host copies' bytes are counted apart: they cross PCIe, not device memory).
func (l Ledger) Work() Count {
	var w Count
	for _, c := range l.Kernels {
		w.add(c)
	}
	for _, c := range l.Nodes {
		w.add(c)
	}
	w.add(l.BLAS)
	w.add(l.DtoD)
	w.add(l.Memset)
	return w
}

// Print writes the ledger as a table: the summary line, then each kernel or node with its
// calls, bytes and flops, most bytes first, and a launch's warps and chain (latency.go).
func (l Ledger) Print(w io.Writer) {
	work := l.Work()
	fmt.Fprintf(w, "device calls: %d kernel launches, %d cuBLAS calls, %d graph launches (%d nodes), %d host→device copies (%s), %d device→host copies (%s), %d device copies, %d fills, %d syncs, %d allocations (%s); work: %s moved, %s flops\n",
		l.Launches(), l.BLAS.N, l.GraphLaunches, l.GraphNodes(), l.HtoD.N, human.Bytes(l.HtoD.Read), l.DtoH.N, human.Bytes(l.DtoH.Read),
		l.DtoD.N, l.Memset.N, l.Syncs, l.Allocs, human.Bytes(l.AllocBytes), human.Bytes(work.Bytes()), siCount(float64(work.Flops)))
	type row struct {
		name, where string
		c           Count
	}
	var rows []row
	for k, c := range l.Kernels {
		rows = append(rows, row{k, "launch", c})
	}
	if l.BLAS.N > 0 {
		rows = append(rows, row{nodeBLAS, "launch", l.BLAS})
	}
	for k, c := range l.Nodes {
		rows = append(rows, row{k, "graph", c})
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.c.Bytes() != b.c.Bytes() {
			if a.c.Bytes() > b.c.Bytes() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.where+a.name, b.where+b.name)
	})
	fmt.Fprintf(w, "  %-32s %-6s %9s %12s %12s %11s %11s\n", "kernel", "where", "calls", "bytes", "flops", "warps/call", "chain/call")
	for _, r := range rows {
		n := float64(max(r.c.N, 1))
		fmt.Fprintf(w, "  %-32s %-6s %9d %12s %12s %11.0f %11.1f\n", r.name, r.where, r.c.N, human.Bytes(r.c.Bytes()), siCount(float64(r.c.Flops)),
			float64(r.c.Warps)/n, float64(r.c.Chain)/n)
	}
}

func (l Ledger) String() string {
	var b strings.Builder
	l.Print(&b)
	return b.String()
}

// siCount writes a count with a k/M/G/T/P suffix.
func siCount(v float64) string {
	for _, u := range []string{"", "k", "M", "G", "T"} {
		if v < 1000 {
			return fmt.Sprintf("%.3g%s", v, u)
		}
		v /= 1000
	}
	return fmt.Sprintf("%.3gP", v)
}

// Ledger is a snapshot of the device's ledger since it opened (or was reset).
func (d *Device) Ledger() Ledger {
	var l Ledger
	_ = d.do(func(o *owner) error { l = o.ledger.Clone(); return nil })
	return l
}

// ResetLedger empties the device's ledger.
func (d *Device) ResetLedger() {
	_ = d.do(func(o *owner) error { o.ledger = Ledger{}; o.ledger.init(); return nil })
}

// ShapesOnly makes the device count its kernel launches in the ledger without running them
// (on, until called with off): a dry run of a model too large for the stand-in, whose ledger
// the cost model reads (each launch's grid, bytes and chain). The results are garbage; only
// cuBLAS calls and copies still run.
func (b *Backend) ShapesOnly(on bool) {
	_ = b.d.do(func(o *owner) error { o.shapesOnly = on; return nil })
}

// Ledger is the device's ledger (see Device.Ledger).
func (b *Backend) Ledger() Ledger { return b.d.Ledger() }

// ResetLedger empties the device's ledger.
func (b *Backend) ResetLedger() { b.d.ResetLedger() }

// Recording, on the owning thread. While a graph is captured the work goes to the graph's
// node list instead (see Graph.Launch).

// recordKernel is where every launch of ours is counted (module.go's launch): its declared
// bytes and flops, and its shape and chain for the latency term, so that a new kernel with a
// declared cost is counted in full with no more work.
func (o *owner) recordKernel(id kernelID, d dims) {
	c := kernelCost(o, id, d)
	c.N = 1
	c.Blocks = int64(d.grid[0]) * int64(d.grid[1]) * int64(d.grid[2])
	threads := int64(d.block[0]) * int64(d.block[1]) * int64(d.block[2])
	c.Warps = c.Blocks * ((threads + 31) / 32)
	c.Shared = c.Blocks * int64(d.shared)
	c.Chain = kernelChain(o, id, d, c)
	c.WarpChain = c.Chain * c.Warps
	o.hint, o.attnHint = 0, attnVolume{}
	o.recordWork(kernelNames[id], c, &o.ledger.Kernels)
}

// recordWork counts work that a graph can hold: into the capture's nodes, or the ledger.
func (o *owner) recordWork(name string, c Count, outside *map[string]Count) {
	if o.capturing {
		if o.nodes == nil {
			o.nodes = map[string]Count{}
		}
		v := o.nodes[name]
		v.add(c)
		o.nodes[name] = v
		return
	}
	o.ledger.init()
	v := (*outside)[name]
	v.add(c)
	(*outside)[name] = v
}

func (o *owner) recordBLAS(g *gemmArgs) {
	batch := int64(max(g.batch, 1))
	m, n, k := int64(g.m), int64(g.n), int64(g.k)
	c := Count{N: 1, Flops: 2 * m * n * k * batch, Chain: blasChain,
		Read:    batch * (m*k*int64(dtypeBytes(g.aType)) + k*n*int64(dtypeBytes(g.bType))),
		Written: batch * m * n * int64(dtypeBytes(g.cType))}
	if g.beta != 0 {
		c.Read += batch * m * n * int64(dtypeBytes(g.cType))
	}
	if o.capturing {
		o.recordWork(nodeBLAS, c, nil)
		return
	}
	o.ledger.BLAS.add(c)
}

func dtypeBytes(t int) int {
	if t == dtBF16 {
		return 2
	}
	return 4
}

// recordCopy counts a device copy or fill of n bytes.
func (o *owner) recordDevice(node string, n int) {
	c := Count{N: 1, Read: int64(n), Written: int64(n)}
	if node == nodeMemset {
		c.Read = 0
	}
	if o.capturing {
		o.recordWork(node, c, nil)
		return
	}
	if node == nodeMemset {
		o.ledger.Memset.add(c)
	} else {
		o.ledger.DtoD.add(c)
	}
}

// captured hands the nodes recorded since the capture began to its graph.
func (o *owner) captured() map[string]Count {
	n := o.nodes
	o.nodes = nil
	return n
}

// replayed counts one launch of a graph holding nodes.
func (o *owner) replayed(nodes map[string]Count) {
	o.ledger.init()
	o.ledger.GraphLaunches++
	for k, c := range nodes {
		v := o.ledger.Nodes[k]
		v.add(c)
		o.ledger.Nodes[k] = v
	}
}
