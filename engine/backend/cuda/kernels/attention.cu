// Causal attention with grouped-query heads: query head h reads key/value head
// h / (heads/kv_heads). Long spans go through cuBLAS (scores = scale·Q·Kᵀ and out = P·V as
// strided-batched products, one batch item per head) around the softmax kernels here;
// short spans and decode steps use attn_rows*, one block per (row, head), its warps splitting the keys.

// probs[h, i, :] = softmax(scores[h, i, :]) over keys k0..p (p = pos0+i, k0 = p−window+1
// when a window is set), zeros elsewhere, the scores soft-capped first when softcap > 0.
// scores [heads, n, L] float32 (already scaled);
// probs float32 (in place over the scores: the product with V then runs in float32, as
// bf16 probabilities were measured to cost the built-in model a third of its log-prob error)
// or bf16. One warp per row (rows = heads·n).
template <typename T>
__device__ void attn_softmax_fwd(T* probs, const float* scores, int heads, int n, int L, int pos0, int window, float softcap) {
    int lane = threadIdx.x & 31;
    int rows = heads * n;
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        int p = pos0 + row % n;
        int k0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
        const float* s = scores + (i64)row * L;
        T* o = probs + (i64)row * L;
        float m = NEG_INF;
        for (int j = k0 + lane; j <= p; j += 32) m = fmaxf(m, softcapf(s[j], softcap));
        m = warp_max(m);
        float sum = 0.f;
        for (int j = k0 + lane; j <= p; j += 32) sum += __expf(softcapf(s[j], softcap) - m);
        float inv = 1.f / warp_sum(sum);
        for (int j = lane; j < L; j += 32) stf(o + j, j >= k0 && j <= p ? __expf(softcapf(s[j], softcap) - m) * inv : 0.f);
    }
}

extern "C" __global__ void attn_softmax_forward(float* probs, const float* scores, int heads, int n, int L, int pos0, int window, float softcap) {
    attn_softmax_fwd(probs, scores, heads, n, L, pos0, window, softcap);
}

// The backward's softmax, from recomputed float32 scores (as flash attention's backward
// does, rather than from stored bf16 probabilities: dP − Σ P·dP cancels, and bf16's rounding
// of P would show in it): P = softmax(scores) over the visible keys in float32,
// dscores = P ⊙ (dP − Σ_j P·dP) (times the soft-cap's slope) rounded to bf16 once, and P in
// bf16 for dV = Pᵀ·dO.
// Layout as attn_softmax_forward; one warp per row.
extern "C" __global__ void attn_softmax_backward_scores(bf16* dscores, bf16* probs, const float* scores, const float* dprobs,
                                                        int heads, int n, int L, int pos0, int window, float softcap) {
    int lane = threadIdx.x & 31;
    int rows = heads * n;
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        int p = pos0 + row % n;
        int k0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
        const float* s = scores + (i64)row * L;
        const float* d = dprobs + (i64)row * L;
        float m = NEG_INF;
        for (int j = k0 + lane; j <= p; j += 32) m = fmaxf(m, softcapf(s[j], softcap));
        m = warp_max(m);
        float sum = 0.f, dot = 0.f;
        for (int j = k0 + lane; j <= p; j += 32) {
            float e = __expf(softcapf(s[j], softcap) - m);
            sum += e;
            dot += e * d[j];
        }
        float inv = 1.f / warp_sum(sum);
        dot = warp_sum(dot) * inv;
        bf16* ds = dscores + (i64)row * L;
        bf16* pr = probs + (i64)row * L;
        for (int j = lane; j < L; j += 32) {
            float c = softcapf(s[j], softcap);
            float pj = (j >= k0 && j <= p) ? __expf(c - m) * inv : 0.f;
            ds[j] = f32_to_bf16(pj * (d[j] - dot) * softcap_slope(c, softcap));
            pr[j] = f32_to_bf16(pj);
        }
    }
}

#define ROWS_WARPS 8  // warps a block of attn_rows*: they take the row's key tiles in turn

// Sums, for every lane of the warp, its v[0..N) (N ≤ 32 a power of two) across the lanes,
// so that lane l ends with the total of entry l / (32/N): each step gives half of the entries
// left to the partner lane (lane ^ o) and adds the half it receives, 31 shuffles for N = 32
// rather than 5 a value. Lanes holding the same entry hold the same sum.
template <int N>
__device__ __forceinline__ float lanes_transpose_sum(float (&v)[N], int lane) {
    int n = N;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        if (n > 1) {
            bool up = lane & o;
            n >>= 1;
#pragma unroll
            for (int i = 0; i < N / 2; i++) {
                if (i < n) {
                    float keep = up ? v[i + n] : v[i], send = up ? v[i] : v[i + n];
                    v[i] = keep + __shfl_xor_sync(FULL_MASK, send, o);
                }
            }
        } else {
            v[0] += __shfl_xor_sync(FULL_MASK, v[0], o);
        }
    }
    return v[0];
}

// out[r, h·hd:(h+1)·hd] = softmax(cap(scale·q·Kᵀ))·V for row r over keys k0..pos[r] of its
// sequence seq[r] (0 when seq is null), whose keys and values start at k and v plus
// seq[r]·seq_stride (a KV-cache slot, or a span's own rows), key j at + j·ldk + kvh·hd.
// Grid (rows, heads), ROWS_WARPS warps a block; D ≥ hd bounds the head dimension. The keys
// are split over the warps (flash-decoding within the block): warp w takes tiles w,
// w + ROWS_WARPS, … of TK keys, each lane holding dims lane + 32t of every key of the tile
// (coalesced), so a tile's keys are one round of D loads a lane and its values another; a
// transposed warp sum leaves each key's score on 32/TK lanes, the tile's online-softmax
// update is shared through shuffles, and the warps' partials (max, sum, unnormalized
// output) merge through shared memory. Dims past hd read dim hd−1 against a zero query (no
// load is conditional); keys past the position read the last key with weight 0; a warp with
// no tile leaves a neutral partial (sum 0).
template <int D>
__device__ void attn_rows_t(float* sm, float* sl, float (*sacc)[D], bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* seq,
                            const int* pos, i64 seq_stride, int heads, int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    constexpr int T = D / 32;     // dims a lane holds
    constexpr int TK = 1024 / D;  // keys a tile: T·TK = 32 loads a lane in flight
    constexpr int LK = 32 / TK;   // lanes holding each key's score
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (heads / kv_heads);
    int p = pos[r];
    int k0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
    const bf16* qr = q + ((i64)r * heads + h) * hd;
    i64 base = (seq ? (i64)seq[r] * seq_stride : 0) + (i64)kvh * hd;
    const bf16* kb = k + base;
    const bf16* vb = v + base;
    float qv[T], acc[T];
    int dd[T];
#pragma unroll
    for (int t = 0; t < T; t++) {
        int d = lane + 32 * t;
        dd[t] = min(d, hd - 1);
        float x = bf16_to_f32(qr[dd[t]]);
        qv[t] = d < hd ? x * scale : 0.f;
        acc[t] = 0.f;
    }
    float m = NEG_INF, l = 0.f;
#pragma unroll 1
    for (int j0 = k0 + w * TK; j0 <= p; j0 += ROWS_WARPS * TK) {
        float part[TK];
#pragma unroll
        for (int i = 0; i < TK; i++) {
            const bf16* kj = kb + (i64)min(j0 + i, p) * ldk;
            float s = 0.f;
#pragma unroll
            for (int t = 0; t < T; t++) s += qv[t] * bf16_to_f32(kj[dd[t]]);
            part[i] = s;
        }
        float s = lanes_transpose_sum(part, lane);
        s = j0 + lane / LK <= p ? softcapf(s, softcap) : NEG_INF;
        float mn = fmaxf(m, warp_max(s));  // finite: the tile's first key is visible
        float c = __expf(m - mn), e = __expf(s - mn);
        l *= c;
#pragma unroll
        for (int t = 0; t < T; t++) acc[t] *= c;
#pragma unroll
        for (int i = 0; i < TK; i++) {
            const bf16* vj = vb + (i64)min(j0 + i, p) * ldk;
            float ei = __shfl_sync(FULL_MASK, e, i * LK);
            l += ei;
#pragma unroll
            for (int t = 0; t < T; t++) acc[t] += ei * bf16_to_f32(vj[dd[t]]);
        }
        m = mn;
    }
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
#pragma unroll
    for (int t = 0; t < T; t++) sacc[w][lane + 32 * t] = acc[t];
    __syncthreads();
    float M = NEG_INF;
    for (int i = 0; i < ROWS_WARPS; i++) M = fmaxf(M, sm[i]);
    float L = 0.f;
    for (int i = 0; i < ROWS_WARPS; i++)
        if (sl[i] > 0.f) L += sl[i] * __expf(sm[i] - M);
    float inv = 1.f / L;
    bf16* o = out + ((i64)r * heads + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < ROWS_WARPS; i++)
            if (sl[i] > 0.f) s += sacc[i][d] * __expf(sm[i] - M);
        o[d] = f32_to_bf16(s * inv);
    }
}

extern "C" __global__ void __launch_bounds__(ROWS_WARPS * 32) attn_rows64(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* seq,
                                                                          const int* pos, i64 seq_stride, int heads, int kv_heads, int hd,
                                                                          int ldk, float scale, int window, float softcap) {
    __shared__ float sm[ROWS_WARPS], sl[ROWS_WARPS];
    __shared__ float sacc[ROWS_WARPS][64];
    attn_rows_t<64>(sm, sl, sacc, out, q, k, v, seq, pos, seq_stride, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(ROWS_WARPS * 32) attn_rows128(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* seq,
                                                                          const int* pos, i64 seq_stride, int heads, int kv_heads, int hd,
                                                                          int ldk, float scale, int window, float softcap) {
    __shared__ float sm[ROWS_WARPS], sl[ROWS_WARPS];
    __shared__ float sacc[ROWS_WARPS][128];
    attn_rows_t<128>(sm, sl, sacc, out, q, k, v, seq, pos, seq_stride, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(ROWS_WARPS * 32) attn_rows256(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* seq,
                                                                          const int* pos, i64 seq_stride, int heads, int kv_heads, int hd,
                                                                          int ldk, float scale, int window, float softcap) {
    __shared__ float sm[ROWS_WARPS], sl[ROWS_WARPS];
    __shared__ float sacc[ROWS_WARPS][256];
    attn_rows_t<256>(sm, sl, sacc, out, q, k, v, seq, pos, seq_stride, heads, kv_heads, hd, ldk, scale, window, softcap);
}

// Grouped-query attention through cuBLAS needs one key/value head per query head:
// dst[j, h·hd + d] = src[j·lds + (h/group)·hd + d], in bf16 (keys) or float32 (values, for
// the product with float32 probabilities). Grid (L, heads), block ≥ hd threads.
template <typename T>
__device__ void attn_expand(T* dst, const bf16* src, int lds, int L, int heads, int kv_heads, int hd) {
    int h = blockIdx.y, d = threadIdx.x;
    if (d >= hd) return;
    int kvh = h / (heads / kv_heads);
    for (int j = blockIdx.x; j < L; j += gridDim.x) stf(dst + ((i64)j * heads + h) * hd + d, bf16_to_f32(src[(i64)j * lds + (i64)kvh * hd + d]));
}
extern "C" __global__ void __launch_bounds__(1024) attn_expand_kv(bf16* dst, const bf16* src, int lds, int L, int heads, int kv_heads, int hd) {
    attn_expand(dst, src, lds, L, heads, kv_heads, hd);
}
extern "C" __global__ void __launch_bounds__(1024) attn_expand_kv_f32(float* dst, const bf16* src, int lds, int L, int heads, int kv_heads, int hd) {
    attn_expand(dst, src, lds, L, heads, kv_heads, hd);
}

// The backward of attn_expand_kv: dst[j·ldd + kvh·hd + d] += Σ over the group's heads h of
// src[j, h·hd + d]. Grid (L, kv_heads), block ≥ hd threads.
extern "C" __global__ void __launch_bounds__(1024) attn_reduce_kv(bf16* dst, int ldd, const bf16* src, int L, int heads, int kv_heads, int hd) {
    int kvh = blockIdx.y, d = threadIdx.x;
    if (d >= hd) return;
    int group = heads / kv_heads;
    for (int j = blockIdx.x; j < L; j += gridDim.x) {
        float s = 0.f;
        for (int g = 0; g < group; g++) s += bf16_to_f32(src[((i64)j * heads + kvh * group + g) * hd + d]);
        bf16* o = dst + (i64)j * ldd + (i64)kvh * hd + d;
        *o = f32_to_bf16(bf16_to_f32(*o) + s);
    }
}

// ---- flash attention on the tensor cores ----
// Attention over ragged spans, flash-style: Q·Kᵀ, P·V and the backward's dO·Vᵀ, dS·K, Pᵀ·dO
// and dSᵀ·Q are m16n8k16 bf16 products with float32 sums (mma_bf16_16816); the softmax is
// online in float32; no probabilities are kept (the backward recomputes them from the saved
// log-sum-exp). A query tile is up to 16 rows of one span at consecutive positions, a key
// tile up to 16 of its keys. Fragments are loaded a bf16 at a time (head dims may be odd,
// rows unaligned); entries past a tile's rows or keys, or past the head dimension, are 0.
// Templates take D, a bound on the head dimension (64, 128 or 256), for the register tiles.

#define TC_WARPS 4  // warps a block of the query-tile kernels, one head each

__device__ __forceinline__ int first_key(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

// The bf16 pair (p[d], p[d+1]) as one fragment register, 0 past hd or when !ok.
__device__ __forceinline__ u32 frag_pair(const bf16* p, int d, int hd, bool ok) {
    if (!ok) return 0u;
    return (u32)(d < hd ? p[d] : 0) | ((u32)(d + 1 < hd ? p[d + 1] : 0) << 16);
}

// s[i][e] = X[row]·Y[col] over the first hd dims for X's rows x0 + (e<2 ? g : g+8) and Y's
// rows 8i + 2t + (e&1) (two n-tiles of 8): Q·Kᵀ, dO·Vᵀ, and transposed K·Qᵀ, V·dOᵀ.
// Rows at or past xn (yn) read as 0.
template <int D>
__device__ __forceinline__ void tc_xyt(float (&s)[2][4], const bf16* x, i64 ldx, int xn, const bf16* y, i64 ldy, int yn, int hd) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[i][e] = 0.f;
    const bf16 *xa = x + g * ldx, *xb = x + (g + 8) * ldx, *y0 = y + g * ldy, *y1 = y + (g + 8) * ldy;
    bool oka = g < xn, okb = g + 8 < xn, ok0 = g < yn, ok1 = g + 8 < yn;
#pragma unroll
    for (int c = 0; c < D; c += 16) {
        if (c >= hd) break;  // uniform over the warp
        u32 a[4] = {frag_pair(xa, c + 2 * t, hd, oka), frag_pair(xb, c + 2 * t, hd, okb), frag_pair(xa, c + 2 * t + 8, hd, oka),
                    frag_pair(xb, c + 2 * t + 8, hd, okb)};
        u32 b0[2] = {frag_pair(y0, c + 2 * t, hd, ok0), frag_pair(y0, c + 2 * t + 8, hd, ok0)};
        u32 b1[2] = {frag_pair(y1, c + 2 * t, hd, ok1), frag_pair(y1, c + 2 * t + 8, hd, ok1)};
        mma_bf16_16816(s[0], a, b0);
        mma_bf16_16816(s[1], a, b1);
    }
}

// The A fragment of a 16×16 bf16 tile held as two n-tiles of float32 sums (the layout
// tc_xyt returns): P or dS as the left operand of the next product.
__device__ __forceinline__ void tc_afrag(u32 (&a)[4], const float (&p)[2][4]) {
    a[0] = pack_bf16(p[0][0], p[0][1]);
    a[1] = pack_bf16(p[0][2], p[0][3]);
    a[2] = pack_bf16(p[1][0], p[1][1]);
    a[3] = pack_bf16(p[1][2], p[1][3]);
}

// What tc_afrag's rounding left, p − bf16(p), as a second fragment: P·V as P_hi·V + P_lo·V
// keeps 16 bits of each probability, not bf16's 8 (a bf16 P cost the whole-model checks up
// to half their log-prob bound).
__device__ __forceinline__ void tc_afrag_lo(u32 (&lo)[4], const u32 (&hi)[4], const float (&p)[2][4]) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float* x = p[r >> 1] + 2 * (r & 1);
        lo[r] = pack_bf16(x[0] - lo_bf16(hi[r]), x[1] - hi_bf16(hi[r]));
    }
}

// o[dn][e] += Σ_k A[row][k]·Y[k][8dn + 2t + (e&1)] for the 16 rows of the A fragment and Y's
// 16 rows (k ≥ yn read as 0), the first hd dims: P·V, dS·K, Pᵀ·dO, dSᵀ·Q. With lo, A is
// a + lo (tc_afrag_lo), each B fragment loaded once for both.
template <int D>
__device__ __forceinline__ void tc_ay(float (&o)[D / 8][4], const u32 (&a)[4], const bf16* y, i64 ldy, int yn, int hd,
                                      const u32* lo = nullptr) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const bf16 *r0 = y + 2 * t * ldy, *r1 = r0 + ldy, *r2 = y + (2 * t + 8) * ldy, *r3 = r2 + ldy;
    bool k0 = 2 * t < yn, k1 = 2 * t + 1 < yn, k2 = 2 * t + 8 < yn, k3 = 2 * t + 9 < yn;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        if (8 * dn >= hd) break;  // uniform
        int d = 8 * dn + g;
        bool ok = d < hd;
        u32 b[2] = {(u32)(ok && k0 ? r0[d] : 0) | ((u32)(ok && k1 ? r1[d] : 0) << 16),
                    (u32)(ok && k2 ? r2[d] : 0) | ((u32)(ok && k3 ? r3[d] : 0) << 16)};
        mma_bf16_16816(o[dn], a, b);
        if (lo) mma_bf16_16816(o[dn], lo, b);
    }
}

// The sum of a row's values over the 4 lanes holding it (t = 0..3), and its maximum.
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(FULL_MASK, v, 1);
    return v + __shfl_xor_sync(FULL_MASK, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1));
    return fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 2));
}

// A query tile's geometry from the plan's table (4 values a tile: its first row, its rows,
// the first row's position, the span's first key row) and one head's pointers into it.
struct qtile {
    int row0, n, pos0, first, last;
    const bf16 *q, *k, *v;  // the tile's first row at head h; key 0 at head kvh
    i64 ldq;
};
__device__ __forceinline__ qtile qtile_of(const int* tiles, const bf16* q, const bf16* k, const bf16* v, int h, int heads, int kv_heads,
                                          int hd, int ldk, int window) {
    const int* tl = tiles + 4 * (i64)blockIdx.x;
    qtile c;
    c.row0 = tl[0], c.n = tl[1], c.pos0 = tl[2];
    int kvh = h / (heads / kv_heads);
    c.ldq = (i64)heads * hd;
    c.q = q + (i64)c.row0 * c.ldq + (i64)h * hd;
    i64 kb = (i64)tl[3] * ldk + (i64)kvh * hd;
    c.k = k + kb;
    c.v = v + kb;
    c.first = first_key(c.pos0, window);
    c.last = c.pos0 + c.n - 1;
    return c;
}

// The scores of a query tile against keys j0.. in place: scaled, soft-capped, and −∞ where
// a row does not see a key (past the tile's rows, after the row's position, before its window).
__device__ __forceinline__ void tc_mask(float (&s)[2][4], const qtile& c, int j0, float scale, int window, float softcap) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = (e >> 1) * 8 + g, j = j0 + 8 * i + 2 * t + (e & 1), p = c.pos0 + r;
            bool vis = r < c.n && j <= p && j >= first_key(p, window);
            s[i][e] = vis ? softcapf(s[i][e] * scale, softcap) : NEG_INF;
        }
}

// out[r, h] = softmax(cap(scale·q·Kᵀ))·V for a query tile (blockIdx.x) and TC_WARPS heads
// (blockIdx.y), one warp a head: an online softmax over key tiles of 16, P as two bf16
// fragments (tc_afrag_lo) for the product with V, sums in float32.
template <int D>
__device__ void attn_fwd_tc_t(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* tiles, int heads, int kv_heads, int hd, int ldk,
                              float scale, int window, float softcap) {
    int h = blockIdx.y * TC_WARPS + (threadIdx.x >> 5);
    if (h >= heads) return;  // the whole warp
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    qtile c = qtile_of(tiles, q, k, v, h, heads, kv_heads, hd, ldk, window);
    float o[D / 8][4];
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[dn][e] = 0.f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};  // l: this lane's share of the row sums
    for (int j0 = c.first; j0 <= c.last; j0 += 16) {
        float s[2][4];
        tc_xyt<D>(s, c.q, c.ldq, c.n, c.k + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd);
        tc_mask(s, c, j0, scale, window, softcap);
        float base[2], corr[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = quad_max(fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1])));
            mx = fmaxf(mx, m[r]);
            base[r] = mx == NEG_INF ? 0.f : mx;  // a row that sees nothing yet keeps zeros
            corr[r] = __expf(m[r] - base[r]);
            m[r] = mx;
            l[r] *= corr[r];
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[i][e] = __expf(s[i][e] - base[e >> 1]);
                l[e >> 1] += s[i][e];
            }
#pragma unroll
        for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[dn][e] *= corr[e >> 1];
        u32 pa[4], pl[4];
        tc_afrag(pa, s);
        tc_afrag_lo(pl, pa, s);
        tc_ay<D>(o, pa, c.v + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd, pl);
    }
    float inv[2] = {1.f / quad_sum(l[0]), 1.f / quad_sum(l[1])};
    bf16* ob = out + (i64)c.row0 * c.ldq + (i64)h * hd;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = (e >> 1) * 8 + g, d = 8 * dn + 2 * t + (e & 1);
            if (r < c.n && d < hd) ob[(i64)r * c.ldq + d] = f32_to_bf16(o[dn][e] * inv[e >> 1]);
        }
}

// The backward's first kernel, for a query tile and TC_WARPS heads as attn_fwd_tc and DO of
// dq's dims from blockIdx.z·DO: a pass over the keys forms each row's log-sum-exp and
// D = Σ_j P_j·dP_j (dP = dO·Vᵀ) with an online softmax, kept in stats[r, h] = (lse, D) for
// attn_bwd_dkv_tc; a second forms dS = P·(dP − D)·cap′ (rounded to bf16) and dq += scale·dS·K.
template <int D, int DO>
__device__ void attn_bwd_dq_tc_t(bf16* dq, float* stats, const bf16* q, const bf16* k, const bf16* v, const bf16* dout, const int* tiles, int heads,
                                 int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    int h = blockIdx.y * TC_WARPS + (threadIdx.x >> 5);
    if (h >= heads) return;
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    qtile c = qtile_of(tiles, q, k, v, h, heads, kv_heads, hd, ldk, window);
    const bf16* dt = dout + (c.q - q);
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, tt[2] = {0.f, 0.f};
    for (int j0 = c.first; j0 <= c.last; j0 += 16) {
        float s[2][4], dp[2][4];
        tc_xyt<D>(s, c.q, c.ldq, c.n, c.k + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd);
        tc_xyt<D>(dp, dt, c.ldq, c.n, c.v + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd);
        tc_mask(s, c, j0, scale, window, softcap);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = fmaxf(m[r], quad_max(fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]))));
            float base = mx == NEG_INF ? 0.f : mx, corr = __expf(m[r] - base);
            l[r] *= corr;
            tt[r] *= corr;
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    float x = __expf(s[i][e] - base);
                    l[r] += x;
                    tt[r] += s[i][e] == NEG_INF ? 0.f : x * dp[i][e];
                }
            m[r] = mx;
        }
    }
    float lse[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float L = quad_sum(l[r]);
        lse[r] = m[r] + logf(L);
        Dr[r] = quad_sum(tt[r]) / L;
    }
    int d0 = blockIdx.z * DO;
    float acc[DO / 8][4];
#pragma unroll
    for (int dn = 0; dn < DO / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[dn][e] = 0.f;
    for (int j0 = c.first; j0 <= c.last; j0 += 16) {
        float s[2][4], dp[2][4];
        tc_xyt<D>(s, c.q, c.ldq, c.n, c.k + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd);
        tc_xyt<D>(dp, dt, c.ldq, c.n, c.v + (i64)j0 * ldk, ldk, c.last + 1 - j0, hd);
        tc_mask(s, c, j0, scale, window, softcap);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = s[i][e];
                s[i][e] = x == NEG_INF ? 0.f : __expf(x - lse[e >> 1]) * (dp[i][e] - Dr[e >> 1]) * softcap_slope(x, softcap);
            }
        u32 da[4];
        tc_afrag(da, s);
        tc_ay<DO>(acc, da, c.k + (i64)j0 * ldk + d0, ldk, c.last + 1 - j0, hd - d0);
    }
    bf16* ob = dq + (c.q - q);
#pragma unroll
    for (int dn = 0; dn < DO / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = (e >> 1) * 8 + g, d = d0 + 8 * dn + 2 * t + (e & 1);
            if (r < c.n && d < hd) {
                bf16* p = ob + (i64)r * c.ldq + d;
                *p = f32_to_bf16(bf16_to_f32(*p) + scale * acc[dn][e]);
            }
        }
    if (t == 0 && blockIdx.z == 0)
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (r * 8 + g < c.n) {
                float* st = stats + 2 * ((i64)(c.row0 + r * 8 + g) * heads + h);
                st[0] = lse[r];
                st[1] = Dr[r];
            }
}

// The backward's second kernel: for a key tile (blockIdx.x; 6 values a tile in keys: its
// first key row, its keys, the first key's position, the span's first query row, that row's
// position and the span's rows), a key/value head (blockIdx.y) and DO of its dims from
// blockIdx.z·DO, one warp: over the group's query heads and the span's rows that see the
// tile in tiles of 16, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, Pᵀ and dSᵀ from attn_bwd_dq_tc's stats, then
// dV += Pᵀ·dO and dK += scale·dSᵀ·Q. Each key's gradients have one owner: deterministic sums.
template <int KD, int DO>
__device__ void attn_bwd_dkv_tc_t(bf16* dk, bf16* dv, const float* stats, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                  const int* keys, int heads, int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int* ke = keys + 6 * (i64)blockIdx.x;
    int krow = ke[0], nk = ke[1], j0 = ke[2], row0 = ke[3], pos0 = ke[4], n = ke[5];
    int kvh = blockIdx.y, d0 = blockIdx.z * DO, group = heads / kv_heads;
    i64 ldq = (i64)heads * hd, ko = (i64)krow * ldk + (i64)kvh * hd;
    const bf16 *kt = k + ko, *vt = v + ko;
    int i0 = max(0, j0 - pos0), i1 = n;  // the span's rows whose positions reach the tile's keys
    if (window > 0) i1 = min(n, j0 + nk - 1 + window - pos0);
    float ak[DO / 8][4], av[DO / 8][4];
#pragma unroll
    for (int dn = 0; dn < DO / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) ak[dn][e] = av[dn][e] = 0.f;
    for (int hh = 0; hh < group; hh++) {
        int h = kvh * group + hh;
        for (int r0 = i0; r0 < i1; r0 += 16) {
            int nr = min(16, i1 - r0);
            const bf16 *qt = q + (i64)(row0 + r0) * ldq + (i64)h * hd, *dt = dout + (qt - q);
            float s[2][4], dp[2][4];
            tc_xyt<KD>(s, kt, ldk, nk, qt, ldq, nr, hd);
            tc_xyt<KD>(dp, vt, ldk, nk, dt, ldq, nr, hd);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int kj = (e >> 1) * 8 + g, ri = 8 * i + 2 * t + (e & 1);
                    int j = j0 + kj, p = pos0 + r0 + ri;
                    float pr = 0.f, ds = 0.f;
                    if (kj < nk && ri < nr && j <= p && j >= first_key(p, window)) {
                        float x = softcapf(s[i][e] * scale, softcap);
                        const float* st = stats + 2 * ((i64)(row0 + r0 + ri) * heads + h);
                        pr = __expf(x - st[0]);
                        ds = pr * (dp[i][e] - st[1]) * softcap_slope(x, softcap);
                    }
                    s[i][e] = pr;
                    dp[i][e] = ds;
                }
            u32 pa[4], da[4];
            tc_afrag(pa, s);
            tc_afrag(da, dp);
            tc_ay<DO>(av, pa, dt + d0, ldq, nr, hd - d0);
            tc_ay<DO>(ak, da, qt + d0, ldq, nr, hd - d0);
        }
    }
#pragma unroll
    for (int dn = 0; dn < DO / 8; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int kj = (e >> 1) * 8 + g, d = d0 + 8 * dn + 2 * t + (e & 1);
            if (kj < nk && d < hd) {
                i64 o = ko + (i64)kj * ldk + d;
                dk[o] = f32_to_bf16(bf16_to_f32(dk[o]) + scale * ak[dn][e]);
                dv[o] = f32_to_bf16(bf16_to_f32(dv[o]) + av[dn][e]);
            }
        }
}

// The instances: head dims up to 64, 128 and 256 (dq, dK and dV 128 dims a block).
extern "C" __global__ void __launch_bounds__(128) attn_fwd_tc64(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* tiles, int heads,
                                                                int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    attn_fwd_tc_t<64>(out, q, k, v, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(128) attn_fwd_tc128(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* tiles, int heads,
                                                                 int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    attn_fwd_tc_t<128>(out, q, k, v, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(128) attn_fwd_tc256(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* tiles, int heads,
                                                                 int kv_heads, int hd, int ldk, float scale, int window, float softcap) {
    attn_fwd_tc_t<256>(out, q, k, v, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq_tc64(bf16* dq, float* stats, const bf16* q, const bf16* k, const bf16* v,
                                                                   const bf16* dout, const int* tiles, int heads, int kv_heads, int hd, int ldk,
                                                                   float scale, int window, float softcap) {
    attn_bwd_dq_tc_t<64, 64>(dq, stats, q, k, v, dout, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq_tc128(bf16* dq, float* stats, const bf16* q, const bf16* k, const bf16* v,
                                                                    const bf16* dout, const int* tiles, int heads, int kv_heads, int hd, int ldk,
                                                                    float scale, int window, float softcap) {
    attn_bwd_dq_tc_t<128, 128>(dq, stats, q, k, v, dout, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq_tc256(bf16* dq, float* stats, const bf16* q, const bf16* k, const bf16* v,
                                                                    const bf16* dout, const int* tiles, int heads, int kv_heads, int hd, int ldk,
                                                                    float scale, int window, float softcap) {
    attn_bwd_dq_tc_t<256, 128>(dq, stats, q, k, v, dout, tiles, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(32) attn_bwd_dkv_tc64(bf16* dk, bf16* dv, const float* stats, const bf16* q, const bf16* k,
                                                                   const bf16* v, const bf16* dout, const int* keys, int heads, int kv_heads, int hd,
                                                                   int ldk, float scale, int window, float softcap) {
    attn_bwd_dkv_tc_t<64, 64>(dk, dv, stats, q, k, v, dout, keys, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(32) attn_bwd_dkv_tc128(bf16* dk, bf16* dv, const float* stats, const bf16* q, const bf16* k,
                                                                    const bf16* v, const bf16* dout, const int* keys, int heads, int kv_heads,
                                                                    int hd, int ldk, float scale, int window, float softcap) {
    attn_bwd_dkv_tc_t<128, 128>(dk, dv, stats, q, k, v, dout, keys, heads, kv_heads, hd, ldk, scale, window, softcap);
}
extern "C" __global__ void __launch_bounds__(32) attn_bwd_dkv_tc256(bf16* dk, bf16* dv, const float* stats, const bf16* q, const bf16* k,
                                                                    const bf16* v, const bf16* dout, const int* keys, int heads, int kv_heads,
                                                                    int hd, int ldk, float scale, int window, float softcap) {
    attn_bwd_dkv_tc_t<256, 128>(dk, dv, stats, q, k, v, dout, keys, heads, kv_heads, hd, ldk, scale, window, softcap);
}
