// The CUDA device language on the CPU: force-included (g++ -include) before a program's
// source by the stand-in's nvrtcCompileProgram. Each CUDA thread runs as a fiber of the
// device process; __syncthreads and the warp collectives call into its runtime (kernel_abi.h).
// Only what is here compiles: anything else of the device language fails with g++'s message
// naming it. CUDASIM is defined, so shared kernel code can choose (dynamic shared memory is
// cudasim_dynamic_shared() instead of `extern __shared__`).
#pragma once

#ifdef __CUDASIM_SCAN__
// The scan (g++ -E) only needs to find the kernels and their launch bounds.
#define __global__ __cudasim_global__
#define __launch_bounds__(...) __cudasim_lb__(__VA_ARGS__)
#else

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <limits>
#include <type_traits>
#include <utility>

#include "kernel_abi.h"

extern "C" {
__attribute__((visibility("default"), used)) cudasim::Vars cudasim_vars = {};
}

// ---- qualifiers ----
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
// Shared memory: one copy per module instance, which runs one block at a time; the runtime
// fills the section with 0xFF bytes (NaN) before each block, as a GPU leaves it undefined.
#define __shared__ __attribute__((section("cudasim_shared"))) static
// Read-only tables with an initializer work; __constant__ memory set from the host does not.
#define __constant__ const
#define __managed__ cudasim_unsupported___managed__
// Inline PTX cannot run on the CPU: keep it under #ifndef CUDASIM.
#define asm cudasim_unsupported_inline_ptx_asm
#define __builtin_assume(x) ((void)0)

extern "C" char __start_cudasim_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_cudasim_shared[] __attribute__((weak, visibility("hidden")));
extern "C" __attribute__((visibility("default"))) void cudasim_shared_range(char** lo, char** hi) {
    *lo = __start_cudasim_shared;
    *hi = __stop_cudasim_shared;
}

#define threadIdx (cudasim_vars.cur->idx)
#define blockIdx (static_cast<const uint3&>(cudasim_vars.block_idx))
#define blockDim (static_cast<const dim3&>(cudasim_vars.block_dim))
#define gridDim (static_cast<const dim3&>(cudasim_vars.grid_dim))
static constexpr int warpSize = 32;

#define CUDASIM_STR2(x) #x
#define CUDASIM_STR(x) CUDASIM_STR2(x)

[[noreturn]] inline void cudasim_fail(int code, const char* what) { cudasim_vars.rt->fail(code, what); }

inline void* cudasim_dynamic_shared() { return cudasim_vars.dyn_shared; }

// ---- synchronisation ----
inline void __syncthreads() { cudasim_vars.rt->barrier(cudasim::BAR_SYNC, 0); }
inline int __syncthreads_count(int p) { return cudasim_vars.rt->barrier(cudasim::BAR_COUNT, p != 0); }
inline int __syncthreads_and(int p) { return cudasim_vars.rt->barrier(cudasim::BAR_AND, p != 0); }
inline int __syncthreads_or(int p) { return cudasim_vars.rt->barrier(cudasim::BAR_OR, p != 0); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cudasim_vars.rt->syncwarp(mask); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) {}
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }
[[noreturn]] inline void __trap() { cudasim_fail(719, "__trap() called"); }
[[noreturn]] inline void __brkpt() { cudasim_fail(719, "__brkpt() called"); }

#undef assert
#define assert(e) \
    ((e) ? (void)0 : cudasim_fail(710, "assertion `" #e "' failed at " __FILE__ ":" CUDASIM_STR(__LINE__)))

// ---- warp collectives (32- and 64-bit values) ----
namespace cudasim {
template <typename T>
inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cudasim: shuffles move 4- or 8-byte values");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <typename T>
inline T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}
template <typename T>
using shfl_ok = typename std::enable_if<std::is_arithmetic<T>::value && (sizeof(T) == 4 || sizeof(T) == 8), T>::type;
}  // namespace cudasim

template <typename T>
inline cudasim::shfl_ok<T> __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
    return cudasim::from_bits<T>(cudasim_vars.rt->shfl(cudasim::SHFL_IDX, mask, cudasim::to_bits(v), (uint32_t)src, width));
}
template <typename T>
inline cudasim::shfl_ok<T> __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return cudasim::from_bits<T>(cudasim_vars.rt->shfl(cudasim::SHFL_UP, mask, cudasim::to_bits(v), delta, width));
}
template <typename T>
inline cudasim::shfl_ok<T> __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
    return cudasim::from_bits<T>(cudasim_vars.rt->shfl(cudasim::SHFL_DOWN, mask, cudasim::to_bits(v), delta, width));
}
template <typename T>
inline cudasim::shfl_ok<T> __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
    return cudasim::from_bits<T>(cudasim_vars.rt->shfl(cudasim::SHFL_BFLY, mask, cudasim::to_bits(v), (uint32_t)lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int p) { return cudasim_vars.rt->vote(cudasim::VOTE_BALLOT, mask, p != 0); }
inline int __any_sync(unsigned mask, int p) { return (int)cudasim_vars.rt->vote(cudasim::VOTE_ANY, mask, p != 0); }
inline int __all_sync(unsigned mask, int p) { return (int)cudasim_vars.rt->vote(cudasim::VOTE_ALL, mask, p != 0); }

// ---- atomics (relaxed, device scope; a misaligned address fails as on a GPU) ----
namespace cudasim {
template <typename T>
inline void check_atomic(T* p, const char* what) {
    if ((uintptr_t)p & (sizeof(T) - 1)) cudasim_fail(716, what);
}
template <typename T, typename F>
inline T atomic_update(T* p, F f, const char* what) {
    check_atomic(p, what);
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, typename std::conditional<sizeof(T) == 8, uint64_t, uint16_t>::type>::type;
    U* q = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(q, __ATOMIC_RELAXED);
    for (;;) {
        T o;
        memcpy(&o, &old, sizeof(T));
        T n = f(o);
        U nb;
        memcpy(&nb, &n, sizeof(T));
        if (__atomic_compare_exchange_n(q, &old, nb, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return o;
    }
}
}  // namespace cudasim

#define CUDASIM_ATOMIC_INT(T)                                                                                                      \
    inline T atomicAdd(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicAdd"); return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); } \
    inline T atomicSub(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicSub"); return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); } \
    inline T atomicExch(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicExch"); return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); } \
    inline T atomicAnd(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicAnd"); return __atomic_fetch_and(p, v, __ATOMIC_RELAXED); } \
    inline T atomicOr(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicOr"); return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }   \
    inline T atomicXor(T* p, T v) { cudasim::check_atomic(p, "misaligned atomicXor"); return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED); } \
    inline T atomicMin(T* p, T v) { return cudasim::atomic_update(p, [v](T o) { return o < v ? o : v; }, "misaligned atomicMin"); }      \
    inline T atomicMax(T* p, T v) { return cudasim::atomic_update(p, [v](T o) { return o > v ? o : v; }, "misaligned atomicMax"); }      \
    inline T atomicCAS(T* p, T cmp, T v) {                                                                                          \
        cudasim::check_atomic(p, "misaligned atomicCAS");                                                                           \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);                                         \
        return cmp;                                                                                                                 \
    }
CUDASIM_ATOMIC_INT(int)
CUDASIM_ATOMIC_INT(unsigned int)
CUDASIM_ATOMIC_INT(unsigned long long)
CUDASIM_ATOMIC_INT(long long)
#undef CUDASIM_ATOMIC_INT
inline float atomicAdd(float* p, float v) { return cudasim::atomic_update(p, [v](float o) { return o + v; }, "misaligned atomicAdd(float)"); }
inline double atomicAdd(double* p, double v) { return cudasim::atomic_update(p, [v](double o) { return o + v; }, "misaligned atomicAdd(double)"); }
inline float atomicExch(float* p, float v) {
    cudasim::check_atomic(p, "misaligned atomicExch(float)");
    return cudasim::from_bits<float>(__atomic_exchange_n(reinterpret_cast<uint32_t*>(p), (uint32_t)cudasim::to_bits(v), __ATOMIC_RELAXED));
}
inline float atomicMax(float* p, float v) { return cudasim::atomic_update(p, [v](float o) { return fmaxf(o, v); }, "misaligned atomicMax(float)"); }
inline float atomicMin(float* p, float v) { return cudasim::atomic_update(p, [v](float o) { return fminf(o, v); }, "misaligned atomicMin(float)"); }
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
    cudasim::check_atomic(p, "misaligned atomicCAS(unsigned short)");
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
inline unsigned atomicInc(unsigned* p, unsigned lim) {
    return cudasim::atomic_update(p, [lim](unsigned o) { return o >= lim ? 0u : o + 1; }, "misaligned atomicInc");
}
inline unsigned atomicDec(unsigned* p, unsigned lim) {
    return cudasim::atomic_update(p, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1; }, "misaligned atomicDec");
}

// ---- integer and float intrinsics ----
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline double max(double a, float b) { return fmax(a, b); }

inline float __int_as_float(int i) { return cudasim::from_bits<float>((uint32_t)i); }
inline int __float_as_int(float f) { return (int)(uint32_t)cudasim::to_bits(f); }
inline float __uint_as_float(unsigned u) { return cudasim::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return (uint32_t)cudasim::to_bits(f); }
inline double __longlong_as_double(long long i) { return cudasim::from_bits<double>((uint64_t)i); }
inline long long __double_as_longlong(double d) { return (long long)cudasim::to_bits(d); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
inline int __mul24(int a, int b) { return (int)((a << 8) >> 8) * (int)((b << 8) >> 8); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }

template <typename T>
inline T __ldg(const T* p) { return *p; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }
template <typename T>
inline T __ldca(const T* p) { return *p; }
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline T __ldlu(const T* p) { return *p; }
template <typename T>
inline T __ldcv(const T* p) { return *p; }
template <typename T>
inline void __stcg(T* p, T v) { *p = v; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }
template <typename T>
inline void __stwb(T* p, T v) { *p = v; }
template <typename T>
inline void __stwt(T* p, T v) { *p = v; }

// Correctly rounded single operations, never contracted into an FMA with a neighbour.
namespace cudasim {
inline float keep(float v) {
    __asm__("" : "+x"(v));
    return v;
}
}  // namespace cudasim
inline float __fadd_rn(float a, float b) { return cudasim::keep(a + b); }
inline float __fsub_rn(float a, float b) { return cudasim::keep(a - b); }
inline float __fmul_rn(float a, float b) { return cudasim::keep(a * b); }
inline float __fdiv_rn(float a, float b) { return cudasim::keep(a / b); }
inline float __frcp_rn(float a) { return cudasim::keep(1.0f / a); }
inline float __fsqrt_rn(float a) { return cudasim::keep(sqrtf(a)); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
// The fast intrinsics as the GPU computes them: through base-2 hardware approximations after
// a rounded product, so their error grows with the argument as on the device (the
// approximations themselves are taken as exact here).
inline float __fdividef(float a, float b) {
    float ab = fabsf(b);
    if (ab > 8.507059173023462e37f && ab < 3.4028234663852886e38f) return 0.0f * a;  // 2^126 < |b| < 2^128
    return cudasim::keep(a * cudasim::keep(1.0f / b));
}
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline float rcbrtf(float a) { return 1.0f / cbrtf(a); }
inline float __saturatef(float a) { return a >= 1.0f ? 1.0f : (a > 0.0f ? a : 0.0f); }
inline float __expf(float a) { return exp2f(cudasim::keep(a * 1.44269504088896341f)); }
inline float __exp10f(float a) { return exp2f(cudasim::keep(a * 3.32192809488736235f)); }
inline float __logf(float a) { return cudasim::keep(log2f(a) * 0.693147180559945309f); }
inline float __log2f(float a) { return log2f(a); }
inline float __log10f(float a) { return cudasim::keep(log2f(a) * 0.301029995663981195f); }
inline float __powf(float a, float b) { return exp2f(cudasim::keep(b * log2f(a))); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __tanf(float a) { return tanf(a); }
inline void __sincosf(float a, float* s, float* c) { *s = sinf(a); *c = cosf(a); }
inline float sinpif(float a) { return sinf((float)M_PI * a); }
inline float cospif(float a) { return cosf((float)M_PI * a); }
inline float normcdff(float a) { return 0.5f * erfcf(-a * (float)M_SQRT1_2); }

// Conversions saturate as the GPU's cvt does (NaN gives 0).
namespace cudasim {
template <typename I>
inline I sat(float v) {
    if (v != v) return 0;
    if (v <= (float)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    if (v >= (float)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    return (I)v;
}
}  // namespace cudasim
inline int __float2int_rn(float v) { return cudasim::sat<int>(nearbyintf(v)); }
inline int __float2int_rz(float v) { return cudasim::sat<int>(truncf(v)); }
inline int __float2int_rd(float v) { return cudasim::sat<int>(floorf(v)); }
inline int __float2int_ru(float v) { return cudasim::sat<int>(ceilf(v)); }
inline unsigned __float2uint_rn(float v) { return cudasim::sat<unsigned>(nearbyintf(v)); }
inline unsigned __float2uint_rz(float v) { return cudasim::sat<unsigned>(truncf(v)); }
inline unsigned __float2uint_rd(float v) { return cudasim::sat<unsigned>(floorf(v)); }
inline unsigned __float2uint_ru(float v) { return cudasim::sat<unsigned>(ceilf(v)); }
inline long long __float2ll_rn(float v) { return cudasim::sat<long long>(nearbyintf(v)); }
inline long long __float2ll_rz(float v) { return cudasim::sat<long long>(truncf(v)); }
inline unsigned long long __float2ull_rn(float v) { return cudasim::sat<unsigned long long>(nearbyintf(v)); }
inline unsigned long long __float2ull_rz(float v) { return cudasim::sat<unsigned long long>(truncf(v)); }
inline float __int2float_rn(int v) { return (float)v; }
inline float __uint2float_rn(unsigned v) { return (float)v; }
inline float __ll2float_rn(long long v) { return (float)v; }
inline float __ull2float_rn(unsigned long long v) { return (float)v; }
inline float __double2float_rn(double v) { return (float)v; }

// ---- vector types ----
#define CUDASIM_VEC2(T, N, A) \
    struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define CUDASIM_VEC3(T, N) \
    struct N##3 { T x, y, z; }; \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define CUDASIM_VEC4(T, N, A) \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
CUDASIM_VEC2(float, float, 8)
CUDASIM_VEC3(float, float)
CUDASIM_VEC4(float, float, 16)
CUDASIM_VEC2(int, int, 8)
CUDASIM_VEC3(int, int)
CUDASIM_VEC4(int, int, 16)
CUDASIM_VEC2(unsigned int, uint, 8)
CUDASIM_VEC4(unsigned int, uint, 16)
CUDASIM_VEC2(double, double, 16)
CUDASIM_VEC2(long long, longlong, 16)
CUDASIM_VEC2(unsigned long long, ulonglong, 16)
CUDASIM_VEC2(short, short, 4)
CUDASIM_VEC4(short, short, 8)
CUDASIM_VEC2(unsigned short, ushort, 4)
CUDASIM_VEC4(unsigned short, ushort, 8)
CUDASIM_VEC2(signed char, char, 2)
CUDASIM_VEC4(signed char, char, 4)
CUDASIM_VEC2(unsigned char, uchar, 2)
CUDASIM_VEC4(unsigned char, uchar, 4)
#undef CUDASIM_VEC2
#undef CUDASIM_VEC3
#undef CUDASIM_VEC4
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

// ---- misaligned accesses: g++'s -fsanitize=alignment reports here, the launch fails ----
namespace cudasim {
struct SrcLoc {
    const char* file;
    uint32_t line, col;
};
struct TypeDesc {
    uint16_t kind, info;
    char name[1];
};
struct Mismatch {
    SrcLoc loc;
    const TypeDesc* type;
    unsigned char log_align, check;
};
[[noreturn]] inline void misaligned(Mismatch* d, uintptr_t p) {
    static const char* what[] = {"load of", "store to", "reference binding to", "member access within", "member call on",
                                 "constructor call on", "downcast of", "downcast of", "upcast of", "cast to virtual base of"};
    static char msg[512];
    if (p == 0) {
        snprintf(msg, sizeof msg, "%s null pointer of type %s at %s:%u:%u", d->check < 10 ? what[d->check] : "access to",
                 d->type->name, d->loc.file, d->loc.line, d->loc.col);
        cudasim_fail(700, msg);
    }
    snprintf(msg, sizeof msg, "%s misaligned address %#llx for type %s, which needs %u-byte alignment, at %s:%u:%u",
             d->check < 10 ? what[d->check] : "access to", (unsigned long long)p, d->type->name, 1u << d->log_align,
             d->loc.file, d->loc.line, d->loc.col);
    cudasim_fail(716, msg);
}
}  // namespace cudasim
extern "C" __attribute__((visibility("hidden"), noreturn)) void __ubsan_handle_type_mismatch_v1(cudasim::Mismatch* d, uintptr_t p) {
    cudasim::misaligned(d, p);
}
extern "C" __attribute__((visibility("hidden"), noreturn)) void __ubsan_handle_type_mismatch_v1_abort(cudasim::Mismatch* d, uintptr_t p) {
    cudasim::misaligned(d, p);
}

// ---- kernel entry points (nvrtcCompileProgram appends one CUDASIM_KERNEL per kernel) ----
namespace cudasim {
inline bool next_thread() {
    Vars& v = cudasim_vars;
    if (!v.plain) return false;
    uint32_t i = v.next + 1;
    if (i >= v.count) return false;
    v.next = i;
    v.cur = v.threads + i;
    return true;
}

template <typename... A>
struct Layout {
    static constexpr size_t n = sizeof...(A);
    struct Offsets {
        uint32_t at[sizeof...(A) + 1];
    };
    static constexpr Offsets offsets() {
        Offsets o{};
        const uint32_t size[] = {(uint32_t)sizeof(A)..., 0};
        const uint32_t align[] = {(uint32_t)alignof(A)..., 1};
        uint32_t off = 0;
        for (size_t i = 0; i < n; i++) {
            off = (off + align[i] - 1) / align[i] * align[i];
            o.at[i] = off;
            off += size[i];
        }
        return o;
    }
};

template <typename T>
inline T load(const char* p) {
    T v;
    memcpy(static_cast<void*>(&v), p, sizeof(T));
    return v;
}

template <typename... A, size_t... I>
inline void run(void (*f)(A...), const char* p, std::index_sequence<I...>) {
    constexpr typename Layout<A...>::Offsets off = Layout<A...>::offsets();
    (void)off;
    do {
        f(load<A>(p + off.at[I])...);
    } while (next_thread());
}

template <typename F, unsigned MT, unsigned MB>
struct Meta;
template <typename... A, unsigned MT, unsigned MB>
struct Meta<void(A...), MT, MB> {
    static_assert((true && ... && !std::is_reference<A>::value), "cudasim: a kernel parameter cannot be a reference");
    static_assert((true && ... && std::is_trivially_copyable<A>::value), "cudasim: kernel parameters must be trivially copyable");
    uint32_t abi = CUDASIM_KERNEL_ABI, n = sizeof...(A), max_threads = MT, min_blocks = MB;
    uint32_t size[sizeof...(A) + 1] = {(uint32_t)sizeof(A)..., 0};
    uint32_t align[sizeof...(A) + 1] = {(uint32_t)alignof(A)..., 0};
};
}  // namespace cudasim

#define CUDASIM_KERNEL(name, mt, mb)                                                                               \
    extern "C" __attribute__((visibility("default"))) void cudasim_entry_##name(const char* p) {                  \
        cudasim::run(name, p, std::make_index_sequence<cudasim::Layout_of<decltype(name)>::n>{});                   \
    }                                                                                                             \
    extern "C" __attribute__((visibility("default"), used)) const cudasim::Meta<decltype(name), (mt), (mb)> cudasim_meta_##name{};

namespace cudasim {
template <typename F>
struct Layout_of;
template <typename... A>
struct Layout_of<void(A...)> {
    static constexpr size_t n = sizeof...(A);
};
}  // namespace cudasim

#endif  // __CUDASIM_SCAN__
