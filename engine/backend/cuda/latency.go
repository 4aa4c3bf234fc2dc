package cuda

// The latency term of the cost model. A kernel with too few warps in flight cannot reach the
// card's bandwidth: by Little's law it moves at most (bytes in flight) / (memory latency),
// and a warp that must wait for one load before it can issue the next takes, whatever the
// bandwidth, its chain of dependent round trips × the latency. Each launch is counted with
// its warps and blocks (recordKernel) and with its chain, declared here from the kernel's
// code and its launch's shape, as its bytes and flops are in costs.go. The model then takes
// a launch as
//
//	Node + max(bytes / Bandwidth, flops / BF16, Latency × chain × max(1, warps / resident)),
//	resident = SMs × blocks an SM × warps a block,
//
// the last term being Little's law with the bytes a warp has in flight those of one link of
// its chain: a launch of more warps than the card holds runs in rounds. The blocks an SM holds
// are the kernel's occupancy (occupancy.go): the least that its registers a thread, its shared
// memory a block (static from kernel_resources.go, dynamic from the launch), its warps a block
// and the SM's block limit allow. The rounds stay fractional (warps / resident, not ⌈blocks /
// (SMs × blocks an SM)⌉): launches of one kernel are summed in the ledger, and the term was
// calibrated so. A kernel not in kernel_resources.go (cuBLAS's, the 8fa3b91 kernels that
// TestCostModelH200 rebuilds without their own table) is given the card's full SMs × WarpsPerSM.
//
// A chain counts, in program order, each point where a warp waits for loads it issued:
//   - the loads of straight-line code (a loop with constant bounds under #pragma unroll) go
//     out together and cost one round trip where their values are first used;
//   - a load behind a runtime condition (if (mi < m) in an unrolled loop) is issued after
//     the code before it: a round trip each;
//   - a runtime-bounded loop without stores is unrolled 4 times by the compiler (NVCC's
//     default), a round trip per 4 iterations; one that stores through a pointer its loads
//     may alias (no __restrict__) waits each iteration;
//   - a barrier (__syncthreads, a block-wide sum) is not a round trip; its shared memory is
//     cheap beside device memory.
// The rule is the same for every kernel; no kernel has a constant of its own.

// Defaults of the chain for kernels that declare none (element-wise kernels and the like):
// each thread moves its share of the launch's bytes, bytesPerTrip a round trip (4 unrolled
// iterations of 16 bytes: four float4 or 4 × 4 values of a few tensors), after the index
// arithmetic; a cuBLAS product (whose code we do not see) blasChain round trips: its
// pointers and first tiles, the pipelined k loop's last tiles, the epilogue's store.
const (
	bytesPerTrip = 64
	blasChain    = 4
	unrollTrips  = 4 // iterations of a runtime-bounded loop whose loads the compiler overlaps
)

type chainFunc func(a *costArgs, c Count) int64

// kernelChains declares the chains of the kernels a decode step waits on most; the others
// take defaultChain. q4_linears_* (the grouped launch, whose blocks run q4_linear_t on their
// member) and the single q4_linear_* names share a chain: a single linear is the one-member
// group, and the old names stay for the 8fa3b91 token TestCostModelH200 rebuilds (q4Chain).
var kernelChains = map[string]chainFunc{
	"q4_linear_bf16": q4LinearChain, "q4_linear_f32": q4LinearChain,
	"q4_linear_tc_bf16": q4LinearTcChain, "q4_linear_tc_f32": q4LinearTcChain,
	"q4_linears_bf16": q4LinearChain, "q4_linears_f32": q4LinearChain,
	"q4_linears_tc_bf16": q4LinearTcChain, "q4_linears_tc_f32": q4LinearTcChain,
	"rmsnorm_forward": rmsnormChain, "rmsnorm_forward_f32": rmsnormChain, "rmsnorm_forward_bf16": rmsnormChain,
	"attn_rows64": attnRowsChain(64), "attn_rows128": attnRowsChain(128), "attn_rows256": attnRowsChain(256),
	"gemm_nt_few": gemmNTFewChain,
}

// kernelChain is the chain of the launch of id whose arguments sit in o's slots (c: its
// declared cost and shape).
func kernelChain(o *owner, id kernelID, d dims, c Count) int64 {
	f := kernelChains[kernelNames[id]]
	if f == nil {
		return defaultChain(c)
	}
	a := costArgs{params: kernelParams[id], slots: &o.args.slots, d: d, hint: o.hint, attn: o.attnHint}
	n := f(&a, c)
	if a.bad != "" {
		o.costErr = kernelNames[id] + ": no parameter " + a.bad
	}
	return max(n, 1)
}

func defaultChain(c Count) int64 {
	threads := max(c.Warps*32, 1)
	return 1 + ceilDiv64(c.Bytes(), threads*bytesPerTrip)
}

func (a *costArgs) threads() int64 {
	return max(int64(a.d.block[0])*int64(a.d.block[1])*int64(a.d.block[2]), 1)
}

// q4Chain is a q4_linear warp's chain as at commit 8fa3b91 (the code the H200 measured,
// TestCostModelH200): the code tables (1); per step of its loop over the columns, the weights'
// bytes and scales (1) and then each of the m ≤ 8 rows of x, each behind its if (mi < m) (m);
// with LoRA, each of the 2 output features × m rows' rank loop, behind the same condition
// (2m); then the bias and residual: read by 16 threads at once (1), or by lane 0 for each
// feature and row in turn (serialOut: 2m).
func q4Chain(steps, m int64, lora, biasOrRes, serialOut bool) int64 {
	m = min(m, 8)
	n := 1 + steps*(1+m)
	if lora {
		n += 2 * m
	}
	if biasOrRes {
		if serialOut {
			n += 2 * m
		} else {
			n++
		}
	}
	return n
}

// q4LinearChain is q4_linears' chain now (kernels/step.cu, quant.cu's q4_rows_dot): the code
// tables (1); per step of the column loop, x's rows (clamped, unconditional) and then the
// weights' bytes and scales, straight-line: one round trip; the LoRA term's loop over the rank,
// the block's threads taking a rank each (runtime-bounded, no stores: unrolled); the bias and
// residual, read by 16 threads at once (1).
func q4LinearChain(a *costArgs, _ Count) int64 {
	cols, threads := a.i("cols"), a.threads()
	step := threads
	if a.i("vec") != 0 {
		step *= 8
	}
	n := 1 + ceilDiv64(cols, step)
	if a.sz("xa") > 0 {
		n += ceilDiv64(ceilDiv64(max(a.i("rank"), 1), threads), unrollTrips)
	}
	if biasOrRes(a) {
		n++
	}
	return n
}

// biasOrRes says whether a q4_linear launch adds a bias or a residual (q4_linears: its first
// member's).
func biasOrRes(a *costArgs) bool {
	return a.szOpt("bias")+a.szOpt("res")+a.szOpt("bias0")+a.szOpt("res0") > 0
}

// q4LinearTcChain: a warp's share of the 16-column steps (its block's warps take them in
// turn; no stores: unrolled), the tiles' sum through shared memory, then a thread's one output
// element: its LoRA loop over the rank, 8 ranks a load when vec's bit 2 says so (unrolled), and
// the bias and residual.
func q4LinearTcChain(a *costArgs, _ Count) int64 {
	warps := max(a.threads()/32, 1)
	n := 1 + ceilDiv64(ceilDiv64(ceilDiv64(a.i("cols"), 16), warps), unrollTrips)
	if a.sz("xa") > 0 {
		each := int64(1)
		if a.i("vec")&2 != 0 {
			each = 8
		}
		n += ceilDiv64(ceilDiv64(max(a.i("rank"), 1), each), unrollTrips)
	}
	if biasOrRes(a) {
		n++
	}
	return n
}

// gemmNTFewChain is gemm_nt_few's (kernels/step.cu): its threads' loop over k, 8 values a
// load with vec (the block's GNT_N rows of B and GNT_M rows of A, unconditional: one round
// trip an iteration; runtime-bounded, no stores: unrolled), then C read (beta ≠ 0) and written
// by the first threads (1).
func gemmNTFewChain(a *costArgs, _ Count) int64 {
	each := a.threads()
	if a.i("vec") != 0 {
		each *= 8
	}
	return 1 + ceilDiv64(ceilDiv64(a.i("k"), each), unrollTrips) + 1
}

// normChain is an RMSNorm's chain over a row of dim values shared by `threads` threads (a
// block per row, or a warp per row as at commit 8fa3b91, rowsEach rows a warp): the sum of
// squares (unrolled), then the scaled row written as it is read (a store each iteration), and
// the statistic.
func normChain(dim, threads, rowsEach int64) int64 {
	each := ceilDiv64(dim, threads)
	return rowsEach * (ceilDiv64(each, unrollTrips) + each + 1)
}

// rmsnormChain: a block per row holding the row in registers (at most normEach values a
// thread) loads its values and weights at once (1), then stores the scaled row and the
// statistic (1); a longer row is walked (normChain).
func rmsnormChain(a *costArgs, _ Count) int64 {
	rows, grid := a.i("rows"), int64(a.d.grid[0])
	if grid >= rows && a.i("dim") <= normEach*a.threads() {
		return 2
	}
	if grid >= rows { // a block per row
		return normChain(a.i("dim"), a.threads(), 1)
	}
	warps := grid * (a.threads() / 32)
	return normChain(a.i("dim"), 32, ceilDiv64(rows, max(warps, 1)))
}

// attnKeysChain is the chain of attn_rows as at commit 8fa3b91 (the kernel the H200 measured,
// TestCostModelH200) for a row of keys keys: the position and sequence, then the query (2);
// per key of the warp's share (its 4 warps took keys in turn), the key's values and, after
// their warp sum, the value's (2); the merge went through shared memory.
func attnKeysChain(keys int64) int64 { return 2 + 2*ceilDiv64(keys, 4) }

// attnWarps is ROWS_WARPS (kernels/attention.cu): the warps of an attn_rows* block.
const attnWarps = 8

// attnRowsKeys is the keys a tile of attn_rows<D> (its TK: D/32 dims × TK keys = 32 loads a
// lane in flight).
func attnRowsKeys(d int64) int64 { return 1024 / d }

// attnSplitChain is attn_rows<D>'s chain (kernels/attention.cu) for a row of keys keys: the
// position, sequence and query, independent loads (1); per tile of the warp's share (the
// block's attnWarps warps take tiles of attnRowsKeys(D) keys in turn; the tile loop is not
// unrolled, #pragma unroll 1), the tile's keys, straight-line (1), then, after the transposed
// warp sum and the softmax's shuffles, its values, straight-line (1); the merge goes through
// shared memory.
func attnSplitChain(d, keys int64) int64 {
	return 1 + 2*ceilDiv64(keys, attnRowsKeys(d)*attnWarps)
}

// attnRowsChain is attn_rows<d>'s chain at its launch's mean keys a row (o.hint / rows).
func attnRowsChain(d int64) chainFunc {
	return func(a *costArgs, _ Count) int64 {
		rows := max(int64(a.d.grid[0]), 1)
		return attnSplitChain(d, ceilDiv64(a.hint, rows))
	}
}
