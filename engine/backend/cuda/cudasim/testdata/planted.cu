// Planted bugs: each must fail its launch on the stand-in as it would misbehave on a GPU.
#define FULL 0xffffffffu
struct __align__(16) quad { float x, y, z, w; };

// Half of the warp shuffles while the other half waits at a barrier.
extern "C" __global__ void divergent_shuffle(float* out) {
    float v = threadIdx.x;
    if (threadIdx.x < 16) v += __shfl_xor_sync(FULL, v, 1);
    __syncthreads();
    out[threadIdx.x] = v;
}

// The lanes a shuffle reads from have returned.
extern "C" __global__ void shuffle_exited(float* out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = __shfl_xor_sync(FULL, (float)threadIdx.x, 16);
}

// A thread leaves before a barrier the others reach.
extern "C" __global__ void barrier_after_exit(float* out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1.f;
}

// Writes element n of an n-element buffer (lands in the allocation's last bytes' slack, or
// its guard page with far > 0).
extern "C" __global__ void write_past(float* out, int n, int far) {
    if (threadIdx.x == 0) out[n + far] = 1.f;
}

// Reads 16 bytes through a pointer that is only 4-byte aligned.
extern "C" __global__ void misaligned(float* out, const float* in) {
    quad q = *(const quad*)(in + 1);
    out[threadIdx.x] = q.x;
}

extern "C" __global__ void failing_assert(int* out, int v) {
    assert(v == 3);
    out[0] = v;
}

extern "C" __global__ void write_anywhere(unsigned long long* p) { *(unsigned long long*)p = 1; }

// Thread 0 writes shared memory that the others read without a barrier between.
extern "C" __global__ void shared_race(float* out) {
    __shared__ float s;
    if (threadIdx.x == 0) s = (float)blockIdx.x;
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
