package cuda

// Occupancy: how many blocks of a kernel an SM holds at once. A kernel whose threads use many
// registers, or whose blocks hold much shared memory, leaves an SM's warp slots empty, and a
// launch of many blocks then runs in more rounds than the card's 64 warps an SM would say
// (latency.go). The rules are those of NVIDIA's CUDA C++ Programming Guide (its table of
// technical specifications per compute capability, and its note that the driver reserves
// 1 KB of shared memory a block from compute capability 8.0) and of its occupancy calculator
// (registers allocated a warp at a time in units of 256, that is a thread's registers rounded
// up to a multiple of 8; shared memory in units of 128 bytes):
//
//	blocks an SM = min(Blocks, ⌊Warps / warps a block⌋,
//	                   ⌊⌊Regs / (32 × ⌈regs a thread / 8⌉ × 8)⌋ / warps a block⌋,
//	                   ⌊Shared / (⌈shared a block / 128⌉ × 128 + Reserved)⌋)
//
// (0 for a block of more than 1,024 threads or more shared memory than a block may hold), with
// a block's shared memory its static (ptxas, kernelResources) and dynamic (its launch's)
// bytes, the L1/shared split at its largest (the driver picks it for the kernel).

// smRules are an SM's limits of a compute capability.
type smRules struct {
	Arch        string
	Regs        int // 32-bit registers an SM
	Warps       int // resident warps an SM
	Blocks      int // resident blocks an SM
	Threads     int // threads a block at most
	Shared      int // shared memory an SM, bytes
	SharedBlock int // shared memory a block may hold at most, bytes
	Reserved    int // shared memory the driver reserves a block, bytes
}

// The limits of Hopper (sm_90: H100, H200) and Ada (sm_89: RTX 4090).
var (
	sm90 = smRules{Arch: "sm_90", Regs: 65536, Warps: 64, Blocks: 32, Threads: 1024, Shared: 228 << 10, SharedBlock: 227 << 10, Reserved: 1 << 10}
	sm89 = smRules{Arch: "sm_89", Regs: 65536, Warps: 48, Blocks: 24, Threads: 1024, Shared: 100 << 10, SharedBlock: 99 << 10, Reserved: 1 << 10}
)

// kernelResource is what ptxas gives a kernel: registers a thread and static shared memory,
// bytes (kernel_resources.go).
type kernelResource struct{ Regs, Shared int }

func roundUp(n, unit int) int { return (n + unit - 1) / unit * unit }

// blocksPerSM is the blocks of threads threads an SM holds of a kernel with regs registers a
// thread and shared bytes of shared memory a block (static and dynamic); 0 when one block does
// not fit (the launch would fail).
func (l smRules) blocksPerSM(regs, shared, threads int) int {
	warps := max((threads+31)/32, 1)
	if threads > l.Threads || warps > l.Warps || shared > l.SharedBlock {
		return 0
	}
	n := min(l.Blocks, l.Warps/warps)
	if regs > 0 {
		n = min(n, l.Regs/(32*roundUp(regs, 8))/warps)
	}
	return min(n, l.Shared/(roundUp(shared, 128)+l.Reserved))
}

// resident is the warps c holds at once of a kernel of resources r whose launches have warps
// warps in blocks blocks and shared bytes of dynamic shared memory over those blocks: its SMs
// × the blocks an SM holds × the warps a block, from the launches' mean block. r is the
// kernel's registers and static shared memory on sm_90 (kernelResources); the RTX 4090 is
// given the same (ptxas' sm_89 code is not in the table). A kernel not in the table (!ok:
// cuBLAS's, the old kernels TestCostModelH200 rebuilds) has the card's full SMs × WarpsPerSM.
func (c Card) resident(r kernelResource, ok bool, warps, blocks, shared float64) float64 {
	full := float64(max(c.SMs*c.WarpsPerSM, 1))
	if !ok || blocks <= 0 || warps <= 0 {
		return full
	}
	perBlock := max(int(warps/blocks+0.5), 1)
	n := c.Limits.blocksPerSM(r.Regs, r.Shared+int(shared/blocks+0.5), perBlock*32)
	return min(full, float64(c.SMs*max(n, 1)*perBlock))
}
