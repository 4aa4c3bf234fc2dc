package main

import (
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

var (
	plantedOnce sync.Once
	plantedImg  []byte
)

func plantedKernels(t testing.TB, a *api) []byte {
	t.Helper()
	plantedOnce.Do(func() {
		src, err := os.ReadFile("testdata/planted.cu")
		if err != nil {
			t.Fatal(err)
		}
		plantedImg = a.compile(t, string(src), "planted.cu")
	})
	if plantedImg == nil {
		t.Fatal("testdata/planted.cu did not compile")
	}
	return plantedImg
}

// plant runs one planted bug in a context of its own and returns the result of the
// synchronisation that reveals it and the message cuGetErrorString gives.
func plant(t *testing.T, kernel string, d dims, args func(a *api) []any) (int32, string) {
	t.Helper()
	a := stand(t)
	a.newContext(t)
	f := a.load(t, plantedKernels(t, a)).fn(t, kernel)
	a.ok(t, "cuLaunchKernel", a.launch(f, d, 0, args(a)...))
	r := a.cuCtxSynchronize()
	msg := a.errText(r)
	if r != 0 {
		// The context stays failed: every later call returns the same error.
		var p uint64
		a.want(t, "cuMemAlloc after the failure", a.cuMemAlloc(&p, 16), r)
		a.want(t, "cuCtxSynchronize after the failure", a.cuCtxSynchronize(), r)
	}
	return r, msg
}

func expectFailure(t *testing.T, r int32, msg string, code int32, words ...string) {
	t.Helper()
	if r != code {
		t.Fatalf("got %s, want error %d", msg, code)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("message %q lacks %q", msg, w)
		}
	}
}

func TestPlantedDivergentShuffle(t *testing.T) {
	r, msg := plant(t, "divergent_shuffle", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 128)} })
	expectFailure(t, r, msg, 719, "kernel divergent_shuffle", "__shfl_xor_sync(mask 0xffffffff)", "lanes 16-31 wait at __syncthreads()")
}

func TestPlantedShuffleFromExitedLanes(t *testing.T) {
	r, msg := plant(t, "shuffle_exited", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 128)} })
	expectFailure(t, r, msg, 719, "reads lane 16, which has exited")
}

func TestPlantedBarrierAfterExit(t *testing.T) {
	r, msg := plant(t, "barrier_after_exit", d1(2, 64), func(a *api) []any { return []any{alloc(t, a, 256)} })
	expectFailure(t, r, msg, 719, "barrier_after_exit", "exited", "__syncthreads()")
}

// TestPlantedWritePastEnd: one element past the end lands in the allocation's slack (found
// after the kernel); far past it, in the guard page (the device process faults).
func TestPlantedWritePastEnd(t *testing.T) {
	t.Run("slack", func(t *testing.T) {
		r, msg := plant(t, "write_past", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 400), int32(100), int32(0)} })
		expectFailure(t, r, msg, 700, "write_past", "0 bytes past the end of the 400-byte allocation")
	})
	t.Run("guard", func(t *testing.T) {
		r, msg := plant(t, "write_past", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 4096), int32(1024), int32(5)} })
		expectFailure(t, r, msg, 700, "kernel write_past, block (0,0,0), thread (0,0,0)", "invalid write", "20 bytes past the end of the device allocation of 4096 bytes")
	})
}

func TestPlantedMisaligned(t *testing.T) {
	r, msg := plant(t, "misaligned", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 128), alloc(t, a, 256)} })
	expectFailure(t, r, msg, 716, "misaligned address", "16-byte alignment", "planted.cu:")
}

func TestPlantedAssert(t *testing.T) {
	r, msg := plant(t, "failing_assert", d1(1, 1), func(a *api) []any { return []any{alloc(t, a, 4), int32(4)} })
	expectFailure(t, r, msg, 710, "assertion `v == 3' failed")
}

// TestPlantedHostPointer: a host address reaches the device, which has no such memory.
func TestPlantedHostPointer(t *testing.T) {
	host := make([]uint64, 4)
	r, msg := plant(t, "write_anywhere", d1(1, 1), func(a *api) []any { return []any{uint64(uintptr(unsafe.Pointer(&host[0])))} })
	expectFailure(t, r, msg, 700, "is not device memory")
	if host[0] != 0 {
		t.Errorf("the kernel wrote the host's memory")
	}
}

// TestContextAfterFailure: a failed context does not affect a new one.
func TestContextAfterFailure(t *testing.T) {
	r, _ := plant(t, "barrier_after_exit", d1(1, 32), func(a *api) []any { return []any{alloc(t, a, 128)} })
	if r == 0 {
		t.Fatal("the planted bug was not caught")
	}
	a := stand(t)
	a.newContext(t)
	p := upload(t, a, []float32{1, 2, 3})
	if got := download[float32](t, a, p, 3); got[2] != 3 {
		t.Fatalf("new context: %v", got)
	}
}

// TestPlantedSharedRace: a read of shared memory not ordered after its write by a barrier
// sees the wrong value in some block (blocks alternate the order their threads run in).
func TestPlantedSharedRace(t *testing.T) {
	a := stand(t)
	a.newContext(t)
	f := a.load(t, plantedKernels(t, a)).fn(t, "shared_race")
	const blocks, threads = 4, 64
	out := alloc(t, a, 4*blocks*threads)
	a.ok(t, "launch", a.launch(f, d1(blocks, threads), 0, out))
	got := download[float32](t, a, out, blocks*threads)
	wrong := 0
	for i, v := range got {
		if v != float32(i/threads) {
			wrong++
		}
	}
	if wrong == 0 {
		t.Fatal("the race went unnoticed: every thread read the value written before it")
	}
	t.Logf("%d of %d reads saw another value than the block's write", wrong, len(got))
}
