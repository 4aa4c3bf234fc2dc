// cuBLAS' GEMM in the device process: column-major C = alpha·op(A)·op(B) + beta·C over f32,
// bf16 or f16 storage with float32 accumulation, blocked and packed, tiles of C spread over
// the workers. Inputs convert to float as they are packed; C rounds to its type once, at
// the end, as cuBLAS writes it.
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "device.h"

namespace cudasim {
namespace {

#if defined(__AVX512F__)
constexpr int VL = 16;
constexpr int MR = 12, NV = 2;
#elif defined(__AVX__)
constexpr int VL = 8;
constexpr int MR = 6, NV = 2;
#else
constexpr int VL = 4;
constexpr int MR = 4, NV = 2;
#endif
constexpr int NR = NV * VL;
constexpr int KC = 256;
constexpr int MC = MR * 8;
constexpr int NC = NR * 8;

typedef float vf __attribute__((vector_size(VL * 4)));

inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

inline float half_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return bits_f32(f32_bits(v) | s);
    }
    if (e == 31) return bits_f32(s | 0x7f800000u | (m << 13));
    return bits_f32(s | ((e + 112) << 23) | (m << 13));
}

inline uint16_t f32_to_half(float f) {
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) return (uint16_t)(sign | (uint32_t)__builtin_nearbyintf(bits_f32(ax) * 16777216.0f));
    uint32_t r = ax - 0x38000000u;
    r = (r + 0xfffu + ((r >> 13) & 1)) >> 13;
    return (uint16_t)(sign | r);
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

// The reduced-precision input modes: TF32 keeps 10 mantissa bits (round to nearest, ties
// away, as the tensor cores' conversion), bf16 and f16 round to nearest even.
inline float round_input(float v, int mode) {
    switch (mode) {
        case DT_TF32: {
            uint32_t u = f32_bits(v);
            if ((u & 0x7f800000u) == 0x7f800000u) return v;
            return bits_f32((u + 0x1000u) & 0xffffe000u);
        }
        case DT_BF16: return bits_f32((uint32_t)f32_to_bf16(v) << 16);
        case DT_F16: return half_to_f32(f32_to_half(v));
        default: return v;
    }
}

inline float load_elem(const void* p, int type, int64_t i) {
    switch (type) {
        case DT_BF16: return bits_f32((uint32_t)((const uint16_t*)p)[i] << 16);
        case DT_F16: return half_to_f32(((const uint16_t*)p)[i]);
        default: return ((const float*)p)[i];
    }
}

inline void store_elem(void* p, int type, int64_t i, float v) {
    switch (type) {
        case DT_BF16: ((uint16_t*)p)[i] = f32_to_bf16(v); break;
        case DT_F16: ((uint16_t*)p)[i] = f32_to_half(v); break;
        default: ((float*)p)[i] = v; break;
    }
}

// An operand as op(X)(r, c) = x[r·rs + c·cs].
struct Operand {
    const void* p;
    int type;
    int64_t rs, cs;
    int round;
};

template <int T>
inline float ld(const void* p, int64_t i) {
    return load_elem(p, T, i);
}

// Packs rows r0..r0+nr-1, columns c0..c0+kc-1 of op(A) as strips of MR rows: dst[s][p][i].
template <int T>
void pack_a_t(const Operand& a, int64_t r0, int nr, int64_t c0, int kc, float* dst) {
    for (int s = 0; s < nr; s += MR) {
        int rows = std::min(MR, nr - s);
        float* d = dst + (int64_t)s * kc;
        for (int p = 0; p < kc; p++) {
            int64_t base = (c0 + p) * a.cs + (r0 + s) * a.rs;
            int i = 0;
            for (; i < rows; i++) d[p * MR + i] = ld<T>(a.p, base + i * a.rs);
            for (; i < MR; i++) d[p * MR + i] = 0.f;
        }
    }
}

// Packs rows p0..p0+kc-1, columns c0..c0+nc-1 of op(B) as strips of NR columns: dst[s][p][j].
template <int T>
void pack_b_t(const Operand& b, int64_t p0, int kc, int64_t c0, int nc, float* dst) {
    for (int s = 0; s < nc; s += NR) {
        int cols = std::min(NR, nc - s);
        float* d = dst + (int64_t)s * kc;
        for (int p = 0; p < kc; p++) {
            int64_t base = (p0 + p) * b.rs + (c0 + s) * b.cs;
            int j = 0;
            for (; j < cols; j++) d[p * NR + j] = ld<T>(b.p, base + j * b.cs);
            for (; j < NR; j++) d[p * NR + j] = 0.f;
        }
    }
}

void pack_a(const Operand& a, int64_t r0, int nr, int64_t c0, int kc, float* dst) {
    switch (a.type) {
        case DT_BF16: pack_a_t<DT_BF16>(a, r0, nr, c0, kc, dst); break;
        case DT_F16: pack_a_t<DT_F16>(a, r0, nr, c0, kc, dst); break;
        default: pack_a_t<DT_F32>(a, r0, nr, c0, kc, dst); break;
    }
    if (a.round)
        for (int64_t i = 0, n = (int64_t)((nr + MR - 1) / MR * MR) * kc; i < n; i++) dst[i] = round_input(dst[i], a.round);
}

void pack_b(const Operand& b, int64_t p0, int kc, int64_t c0, int nc, float* dst) {
    switch (b.type) {
        case DT_BF16: pack_b_t<DT_BF16>(b, p0, kc, c0, nc, dst); break;
        case DT_F16: pack_b_t<DT_F16>(b, p0, kc, c0, nc, dst); break;
        default: pack_b_t<DT_F32>(b, p0, kc, c0, nc, dst); break;
    }
    if (b.round)
        for (int64_t i = 0, n = (int64_t)((nc + NR - 1) / NR * NR) * kc; i < n; i++) dst[i] = round_input(dst[i], b.round);
}

inline vf loadv(const float* p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
inline void storev(float* p, vf v) { memcpy(p, &v, sizeof v); }

// acc[i·ld + j] += Σ_p a[p][i]·b[p][j] for one MR×NR tile, the tile held in registers.
void micro(int kc, const float* __restrict a, const float* __restrict b, float* __restrict acc, int ld) {
    vf c[MR][NV];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[i][v] = vf{};
    for (int p = 0; p < kc; p++) {
        vf bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = loadv(b + p * NR + v * VL);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            float av = a[p * MR + i];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[i][v] += av * bv[v];
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) storev(acc + i * ld + v * VL, loadv(acc + i * ld + v * VL) + c[i][v]);
}

struct Buffers {
    std::vector<float> a, b, acc;
};
thread_local Buffers bufs;

struct GemmJob : Job {
    const CmdGemm* g;
    float alpha, beta;
    int64_t mt, nt;  // tiles of MC rows, NC columns
    size_t ea, eb, ec;
    bool work(int, int64_t t) override {
        set_activity(g->what);
        int64_t bi = t / (mt * nt), r = t % (mt * nt);
        int64_t i0 = (r / nt) * MC, j0 = (r % nt) * NC;
        int mc = (int)std::min<int64_t>(MC, g->m - i0), nc = (int)std::min<int64_t>(NC, g->n - j0);
        const char* A = (const char*)g->a + bi * g->stride_a * (int64_t)ea;
        const char* B = (const char*)g->b + bi * g->stride_b * (int64_t)eb;
        char* C = (char*)g->c + bi * g->stride_c * (int64_t)ec;
        Operand oa{A, g->atype, g->transa ? g->lda : 1, g->transa ? 1 : g->lda, g->round_inputs};
        Operand ob{B, g->btype, g->transb ? g->ldb : 1, g->transb ? 1 : g->ldb, g->round_inputs};
        Buffers& bf = bufs;
        int mcp = (mc + MR - 1) / MR * MR, ncp = (nc + NR - 1) / NR * NR;
        bf.acc.assign((size_t)mcp * ncp, 0.f);
        if (alpha != 0.f) {
            bf.a.resize((size_t)MC * KC);
            bf.b.resize((size_t)NC * KC);
            for (int64_t p0 = 0; p0 < g->k; p0 += KC) {
                int kc = (int)std::min<int64_t>(KC, g->k - p0);
                pack_a(oa, i0, mc, p0, kc, bf.a.data());
                pack_b(ob, p0, kc, j0, nc, bf.b.data());
                for (int ii = 0; ii < mc; ii += MR)
                    for (int jj = 0; jj < nc; jj += NR)
                        micro(kc, bf.a.data() + (int64_t)ii * kc, bf.b.data() + (int64_t)jj * kc, bf.acc.data() + (int64_t)ii * ncp + jj, ncp);
            }
        }
        for (int j = 0; j < nc; j++) {
            for (int i = 0; i < mc; i++) {
                int64_t ci = (i0 + i) + (j0 + j) * g->ldc;
                float v = alpha * bf.acc[(int64_t)i * ncp + j];
                if (beta != 0.f) v += beta * load_elem(C, g->ctype, ci);
                store_elem(C, g->ctype, ci, v);
            }
        }
        return true;
    }
};

size_t elem_size(int t) { return t == DT_F32 ? 4 : 2; }

}  // namespace

bool run_gemm(const CmdGemm& g, std::string& err) {
    (void)err;
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return true;
    GemmJob job;
    job.g = &g;
    job.alpha = g.alpha_ptr ? *(const float*)g.alpha_ptr : g.alpha;
    job.beta = g.beta_ptr ? *(const float*)g.beta_ptr : g.beta;
    if (g.k <= 0) job.alpha = 0.f;
    job.mt = (g.m + MC - 1) / MC;
    job.nt = (g.n + NC - 1) / NC;
    job.ea = elem_size(g.atype);
    job.eb = elem_size(g.btype);
    job.ec = elem_size(g.ctype);
    parallel(job, (int64_t)g.batch * job.mt * job.nt, 1);
    return true;
}

}  // namespace cudasim
