package cuda

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// The occupancy rules against cases worked by hand (occupancy.go's formula).
func TestBlocksPerSM(t *testing.T) {
	for _, c := range []struct {
		l                     smRules
		regs, shared, threads int
		want                  int
		why                   string
	}{
		{sm90, 167, 1600, 256, 1, "168 a thread × 32 = 5,376 a warp: 12 warps of 65,536, one block of 8"},
		{sm90, 128, 4160, 256, 2, "4,096 a warp: 16 warps, two blocks"},
		{sm90, 32, 0, 1024, 2, "32 warps a block: 64 warps, and 1,024 a warp's registers, allow two"},
		{sm90, 33, 0, 256, 6, "33 rounds up to 40: 1,280 a warp, 51 warps, 6 blocks (7 unrounded)"},
		{sm90, 85, 0, 768, 0, "85 rounds up to 88: 2,816 a warp, 23 warps, not a block of 24 (85 × 768 = 65,280 would fit unrounded)"},
		{sm90, 20, 0, 256, 8, "the 64 warps: 8 blocks of 8"},
		{sm90, 20, 0, 32, 32, "the 32 blocks an SM"},
		{sm90, 20, 48 << 10, 256, 4, "228 KB / (48 KB + 1 KB reserved): 4"},
		{sm90, 20, 57 << 10, 256, 3, "228 KB / (57 KB + 1 KB): 4 without the reserve, 3 with it"},
		{sm90, 20, 45600, 256, 4, "45,600 B rounded up to 45,696: 4 blocks (5 unrounded)"},
		{sm90, 20, 200 << 10, 256, 1, "a block may hold 227 KB"},
		{sm90, 20, 228 << 10, 256, 0, "more than a block may hold"},
		{sm90, 20, 0, 1056, 0, "33 warps a block: more than 1,024 threads"},
		{sm90, 0, 0, 256, 8, "no registers reported: the warps limit"},
		{sm89, 32, 0, 1024, 1, "Ada: 48 warps an SM hold one block of 32"},
		{sm89, 20, 0, 256, 6, "Ada: 48 warps, 6 blocks of 8"},
		{sm89, 20, 0, 32, 24, "Ada: 24 blocks an SM"},
		{sm89, 20, 48 << 10, 256, 2, "Ada: 100 KB / 49 KB"},
		{sm89, 167, 0, 256, 1, "Ada: the same 64K registers"},
	} {
		if got := c.l.blocksPerSM(c.regs, c.shared, c.threads); got != c.want {
			t.Errorf("%s: %d registers, %d B shared, %d threads: %d blocks an SM, want %d (%s)", c.l.Arch, c.regs, c.shared, c.threads, got, c.want, c.why)
		}
	}
}

// The cards' limits agree with their warps an SM.
func TestCardLimits(t *testing.T) {
	for _, c := range Cards {
		if c.Limits.Warps != c.WarpsPerSM || c.Limits.Regs == 0 {
			t.Errorf("%s: %d warps an SM, its limits %+v", c.Name, c.WarpsPerSM, c.Limits)
		}
	}
}

// The latency term with the kernel's own residency: a launch of 304 blocks of 8 warps (a
// Qwen2.5-0.5B gate/up linear's 4,864 features, 16 a block) of a 167-register kernel fits
// 132 blocks at once on an H100 (2.3 rounds), where the card's full 8,448 warps would hold
// all 2,432; a kernel not in the table keeps the full residency; dynamic shared memory counts
// with the static.
func TestCostModelOccupancy(t *testing.T) {
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12+1e-9*want {
			t.Errorf("%s: %g, want %g", what, got, want)
		}
	}
	big := kernelResource{Regs: 167, Shared: 1600}
	k := Count{N: 1, Blocks: 304, Warps: 304 * 8, Chain: 10, WarpChain: 10 * 304 * 8}
	near("167 registers", H100.kernelTime(k, big, true), 1.5e-6+0.45e-6*10*2432/1056)
	near("not in the table", H100.kernelTime(k, big, false), 1.5e-6+0.45e-6*10)
	near("a resident warp count", H100.resident(big, true, 2432, 304, 0), 132*8)
	near("Ada: the same, 128 SMs", RTX4090.resident(big, true, 2432, 304, 0), 128*8)
	// 20 registers, 256 threads: 8 blocks an SM; with 48 KB of dynamic shared memory a block, 4
	small := kernelResource{Regs: 20}
	near("small", H100.resident(small, true, 8000, 1000, 0), 132*64)
	near("48 KB dynamic", H100.resident(small, true, 8000, 1000, 1000*(48<<10)), 132*4*8)
	// a kernel's launches through the phase's calls: the same term
	calls := Calls{Chains: map[string]Chains{"q4_linears_bf16": chainsOf(k), "not_a_kernel": chainsOf(k)}}
	res, ok := kernelResources["q4_linears_bf16"]
	if !ok {
		t.Fatalf("kernel_resources.go has no q4_linears_bf16")
	}
	want := 0.45e-6*10*max(1, 2432/H100.resident(res, true, 2432, 304, 0)) + 0.45e-6*10
	near("the calls' latency", calls.Latency(H100), want)
	if r := H100.resident(res, true, 2432, 304, 0); r >= 132*64 {
		t.Errorf("q4_linears_bf16 (%d registers) holds %g warps on an H100: the card's full residency", res.Regs, r)
	}
}

// The kernel table prints each kernel's resident warps: q4_linears_bf16's by its registers
// (fewer than the card's), cuBLAS the card's 8,448.
func TestPrintKernelsResident(t *testing.T) {
	l := Ledger{Nodes: map[string]Count{"q4_linears_bf16": {N: 1, Blocks: 304, Warps: 2432, Chain: 10, WarpChain: 24320}},
		BLAS: Count{N: 1, Chain: 4}}
	var b strings.Builder
	H100.PrintKernels(&b, l, 0)
	q4 := H100.resident(kernelResources["q4_linears_bf16"], true, 2432, 304, 0)
	if q4 >= 8448 {
		t.Fatalf("q4_linears_bf16 holds %g warps: the card's full residency", q4)
	}
	for _, want := range []string{fmt.Sprintf("q4_linears_bf16                  1         2432 %9.0f", q4), "cublas                           1            0      8448"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the kernel table lacks %q:\n%s", want, b.String())
		}
	}
}

// A launch's dynamic shared memory is counted in the ledger over its blocks (Count.Shared),
// for the kernel's occupancy.
func TestLedgerDynamicShared(t *testing.T) {
	o := &owner{args: &launchArgs{}}
	id := kernelID(0)
	o.recordKernel(id, dims{grid: [3]uint32{3, 2, 1}, block: [3]uint32{256, 1, 1}, shared: 4096})
	o.recordKernel(id, dims{grid: [3]uint32{4, 1, 1}, block: [3]uint32{64, 1, 1}})
	c := o.ledger.Kernels[kernelNames[id]]
	if c.N != 2 || c.Blocks != 10 || c.Warps != 6*8+4*2 || c.Shared != 6*4096 {
		t.Errorf("two launches of %s: %+v, want 10 blocks, 56 warps, 24,576 B of dynamic shared memory", kernelNames[id], c)
	}
}
