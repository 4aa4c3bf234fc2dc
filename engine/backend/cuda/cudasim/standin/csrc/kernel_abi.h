// The interface between the device runtime (cudasim-device) and a kernel module (the shared
// object nvrtcCompileProgram builds from a program's source with shim.h force-included).
// A module is loaded once per worker thread of the device process, so everything here is
// per worker: no thread-local storage is needed in kernel code.
#pragma once
#include <stdint.h>

#define CUDASIM_KERNEL_ABI 3

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
#endif
};

namespace cudasim {

// What a CUDA thread knows about itself; fixed for a launch, shared by all its blocks.
struct Thread {
    uint3 idx;
    uint32_t lane, warp, linear, pad;
};

// Warp-collective kinds (same kind and mask = the same instruction, as on sm_70 and later).
enum { SHFL_IDX = 0, SHFL_UP = 1, SHFL_DOWN = 2, SHFL_BFLY = 3, VOTE_BALLOT = 4, VOTE_ANY = 5, VOTE_ALL = 6, SYNCWARP = 7 };
// __syncthreads variants.
enum { BAR_SYNC = 0, BAR_COUNT = 1, BAR_AND = 2, BAR_OR = 3 };

// Calls from kernel code into the runtime. fail never returns: the launch is abandoned.
struct Runtime {
    int (*barrier)(int op, int pred);
    uint64_t (*shfl)(int kind, uint32_t mask, uint64_t value, uint32_t arg, int width);
    uint32_t (*vote)(int kind, uint32_t mask, int pred);
    void (*syncwarp)(uint32_t mask);
    void (*fail)(int code, const char* what) __attribute__((noreturn));
};

// One module instance's globals, written by the runtime before it runs a block.
struct Vars {
    const Thread* cur;  // the CUDA thread running now
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    void* dyn_shared;    // the block's dynamic shared memory (sharedMemBytes of the launch)
    uint32_t dyn_size;
    const Runtime* rt;
    // The plain loop: threads of a block run one after another on one stack until one waits
    // (then the runtime turns the block into fibers and clears plain).
    uint32_t plain;
    uint32_t next, count;
    const Thread* threads;
};

}  // namespace cudasim
