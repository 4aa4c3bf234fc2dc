// The kernels' own prelude: no CUDA header is needed, so NVRTC compiles them with nothing
// but its built-in declarations, and the CPU stand-in (which defines CUDASIM and supplies
// the device-language builtins) compiles the same text with the system's C++ compiler.
//
// Conventions: activations are bf16 stored as raw 16-bit words and computed in float32;
// every sum, norm statistic and softmax runs in float32. Kernels are extern "C" and take
// plain pointers and scalars (launchers are generated from these signatures). Blocks are a
// multiple of 32 threads wherever a kernel reduces across a warp.

typedef unsigned char u8;
typedef unsigned short bf16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

struct alignas(16) u32x4 { u32 x, y, z, w; };
struct alignas(8) u32x2 { u32 x, y; };

#ifdef CUDASIM
#define DYNAMIC_SHARED(T, name) T* name = (T*)cudasim_dynamic_shared()
#else
#define DYNAMIC_SHARED(T, name) extern __shared__ u32x4 dynamic_shared_[]; T* name = (T*)dynamic_shared_
#endif

#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)

// Products and sums rounded one at a time, never fused into an FMA: what the CPU's float32
// arithmetic gives, where a kernel must match it bit for bit.
#ifdef CUDASIM
__device__ __forceinline__ float mul_rn(float a, float b) { volatile float p = a * b; return p; }
__device__ __forceinline__ float add_rn(float a, float b) { volatile float s = a + b; return s; }
#else
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
#endif

__device__ __forceinline__ float bf16_to_f32(bf16 h) { return __uint_as_float(((u32)h) << 16); }

// Round to nearest even, as torch's .to(bfloat16) and the CPU reference do.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
#ifdef CUDASIM
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16)(u >> 16);
#else
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#endif
}

// Loads and stores in either storage type, computing in float32 (templates over the two).
__device__ __forceinline__ float ldf(const float* p) { return *p; }
__device__ __forceinline__ float ldf(const bf16* p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void stf(float* p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16* p, float v) { *p = f32_to_bf16(v); }

// The two bf16 of a 32-bit word: the lower address is the low half (little-endian).
__device__ __forceinline__ float lo_bf16(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(u32 w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) { return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16); }

// Soft-capping: cap·tanh(x/cap), tanh as 1 − 2/(e^{2u}+1) like the CPU; x itself when cap
// is 0. softcap_slope is its derivative written with the capped value y: 1 − (y/cap)².
__device__ __forceinline__ float softcapf(float x, float cap) { return cap > 0.f ? cap * (1.f - 2.f / (expf(x * (2.f / cap)) + 1.f)) : x; }
__device__ __forceinline__ float softcap_slope(float y, float cap) {
    float t = y / cap;
    return cap > 0.f ? 1.f - t * t : 1.f;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// block_sum returns the sum of v over the block to every thread. sh holds 32 floats;
// the leading barrier lets a kernel call it several times with the same sh.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    return warp_sum(lane < nw ? sh[lane] : 0.f);
}

__device__ __forceinline__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    return warp_max(lane < nw ? sh[lane] : NEG_INF);
}

// d += A·B for one m16n8k16 tile on the tensor cores, bf16 operands and float32 sums, in the
// PTX ISA's fragment layout (g = lane/4, t = lane%4; the lower half of a register holds the
// smaller index): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
// a[3] = A[g+8][2t+8..]; b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]; d[0..1] =
// D[g][2t..2t+1], d[2..3] = D[g+8][2t..]. The CPU stand-in has no tensor cores: there each
// lane posts its fragments in a per-warp table and, after one warp barrier, gathers the rows
// of A and columns of B its results need (two rendezvous a product, not 32 shuffles), so a
// kernel written against the layout runs and is checked there.
#ifdef CUDASIM
__shared__ u32 cudasim_mma_frags[32][32][6];  // [warp][lane]: a[0..3], b[0..1]
#endif
__device__ __forceinline__ void mma_bf16_16816(float* d, const u32* a, const u32* b) {
#ifdef CUDASIM
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    u32(*f)[6] = cudasim_mma_frags[cudasim_vars.cur->warp];
    for (int i = 0; i < 4; i++) f[lane][i] = a[i];
    f[lane][4] = b[0];
    f[lane][5] = b[1];
    __syncwarp();
    for (int tt = 0; tt < 4; tt++) {
        const u32* fa = f[4 * g + tt];
        u32 a0 = fa[0], a1 = fa[1], a2 = fa[2], a3 = fa[3];
        for (int j = 0; j < 2; j++) {
            const u32* fb = f[4 * (2 * t + j) + tt];
            u32 b0 = fb[4], b1 = fb[5];
            d[j] += lo_bf16(a0) * lo_bf16(b0) + hi_bf16(a0) * hi_bf16(b0) + lo_bf16(a2) * lo_bf16(b1) + hi_bf16(a2) * hi_bf16(b1);
            d[2 + j] += lo_bf16(a1) * lo_bf16(b0) + hi_bf16(a1) * hi_bf16(b0) + lo_bf16(a3) * lo_bf16(b1) + hi_bf16(a3) * hi_bf16(b1);
        }
    }
    __syncwarp();  // every lane has read before the next product overwrites the table
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
