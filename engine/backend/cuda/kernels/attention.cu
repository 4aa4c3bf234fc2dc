// Causal attention with grouped-query heads: query head h reads key/value head
// h / (heads/kv_heads). Long spans go through cuBLAS (scores = scale·Q·Kᵀ and out = P·V as
// strided-batched products, one batch item per head) around the softmax kernels here;
// short spans and decode steps use attn_rows, one block per (row, head) over the keys.

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

#define ROWS_MAX_DIMS 8  // head_dim ≤ 256: each lane holds dims lane, lane+32, …
#define ROWS_WARPS 4

// out[r, h·hd:(h+1)·hd] = softmax(cap(scale·q·Kᵀ))·V for row r over keys k0..pos[r] of its
// sequence seq[r] (0 when seq is null), whose keys and values start at k and v plus
// seq[r]·seq_stride (a KV-cache slot, or a span's own rows), key j at + j·ldk + kvh·hd. Grid (rows, heads), ROWS_WARPS
// warps a block: warps take keys in turn with an online softmax each, then merge. Lanes
// split the head dimension.
extern "C" __global__ void __launch_bounds__(128) attn_rows(bf16* out, const bf16* q, const bf16* k, const bf16* v, const int* seq,
                                                            const int* pos, i64 seq_stride, int heads, int kv_heads, int hd, int ldk,
                                                            float scale, int window, float softcap) {
    __shared__ float sm[ROWS_WARPS], sl[ROWS_WARPS];
    __shared__ float sacc[ROWS_WARPS][ROWS_MAX_DIMS * 32];
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (heads / kv_heads);
    int p = pos[r];
    int k0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
    const bf16* qr = q + ((i64)r * heads + h) * hd;
    i64 base = (seq ? (i64)seq[r] * seq_stride : 0) + (i64)kvh * hd;
    const bf16* kb = k + base;
    const bf16* vb = v + base;
    float qv[ROWS_MAX_DIMS], acc[ROWS_MAX_DIMS];
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) {
        int d = lane + 32 * t;
        qv[t] = d < hd ? bf16_to_f32(qr[d]) * scale : 0.f;
        acc[t] = 0.f;
    }
    float m = NEG_INF, l = 0.f;
    for (int j = k0 + w; j <= p; j += ROWS_WARPS) {
        const bf16* kj = kb + (i64)j * ldk;
        float s = 0.f;
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            if (d < hd) s += qv[t] * bf16_to_f32(kj[d]);
        }
        s = softcapf(warp_sum(s), softcap);
        float mn = fmaxf(m, s);
        float c = __expf(m - mn), e = __expf(s - mn);
        l = l * c + e;
        const bf16* vj = vb + (i64)j * ldk;
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            if (d < hd) acc[t] = acc[t] * c + e * bf16_to_f32(vj[d]);
        }
        m = mn;
    }
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) sacc[w][lane + 32 * t] = acc[t];
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

// The backward of attention over ragged spans, flash-style: no probabilities are kept; each
// is recomputed from the scores. Rows and keys are those of attn_rows: query row r at
// position pos[r] reads its span's keys from key row kbase[r] on (key j at (kbase[r] + j)·ldk
// + kvh·hd of k, v and their gradients).
//
// attn_bwd_dq: dq[r, h] += scale·Σ_j dS_j·k_j, dS_j = P_j·(dP_j − D)·cap′, dP_j = dO·v_j,
// D = Σ_j P_j·dP_j. A first pass over the keys forms the log-sum-exp and D with an online
// softmax (as attn_rows), a second dS; both are kept in stats[r, h] = (lse, D) for
// attn_bwd_dkv. Grid (rows, heads), ROWS_WARPS warps taking keys in turn, lanes splitting the
// head dimension.
extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq(bf16* dq, float* stats, const bf16* q, const bf16* k, const bf16* v, const bf16* dout,
                                                              const int* kbase, const int* pos, int heads, int kv_heads, int hd, int ldk,
                                                              float scale, int window, float softcap) {
    __shared__ float sm[ROWS_WARPS], sl[ROWS_WARPS], st[ROWS_WARPS];
    __shared__ float sacc[ROWS_WARPS][ROWS_MAX_DIMS * 32];
    int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int kvh = h / (heads / kv_heads);
    int p = pos[r];
    int k0 = (window > 0 && p - window + 1 > 0) ? p - window + 1 : 0;
    i64 qo = ((i64)r * heads + h) * hd;
    i64 base = (i64)kbase[r] * ldk + (i64)kvh * hd;
    float qv[ROWS_MAX_DIMS], gv[ROWS_MAX_DIMS], acc[ROWS_MAX_DIMS];
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) {
        int d = lane + 32 * t;
        qv[t] = d < hd ? bf16_to_f32(q[qo + d]) * scale : 0.f;
        gv[t] = d < hd ? bf16_to_f32(dout[qo + d]) : 0.f;
        acc[t] = 0.f;
    }
    float m = NEG_INF, l = 0.f, tt = 0.f;
    for (int j = k0 + w; j <= p; j += ROWS_WARPS) {
        const bf16* kj = k + base + (i64)j * ldk;
        const bf16* vj = v + base + (i64)j * ldk;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            if (d < hd) {
                s += qv[t] * bf16_to_f32(kj[d]);
                dp += gv[t] * bf16_to_f32(vj[d]);
            }
        }
        s = softcapf(warp_sum(s), softcap);
        dp = warp_sum(dp);
        float mn = fmaxf(m, s);
        float c = __expf(m - mn), e = __expf(s - mn);
        l = l * c + e;
        tt = tt * c + e * dp;
        m = mn;
    }
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
        st[w] = tt;
    }
    __syncthreads();
    float M = NEG_INF;
    for (int i = 0; i < ROWS_WARPS; i++) M = fmaxf(M, sm[i]);
    float L = 0.f, T = 0.f;
    for (int i = 0; i < ROWS_WARPS; i++)
        if (sl[i] > 0.f) {
            float c = __expf(sm[i] - M);
            L += sl[i] * c;
            T += st[i] * c;
        }
    float lse = M + logf(L), D = T / L;
    for (int j = k0 + w; j <= p; j += ROWS_WARPS) {
        const bf16* kj = k + base + (i64)j * ldk;
        const bf16* vj = v + base + (i64)j * ldk;
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            if (d < hd) {
                s += qv[t] * bf16_to_f32(kj[d]);
                dp += gv[t] * bf16_to_f32(vj[d]);
            }
        }
        s = softcapf(warp_sum(s), softcap);
        dp = warp_sum(dp);
        float ds = __expf(s - lse) * (dp - D) * softcap_slope(s, softcap);
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            if (d < hd) acc[t] += ds * bf16_to_f32(kj[d]);
        }
    }
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) sacc[w][lane + 32 * t] = acc[t];
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float s = 0.f;
        for (int i = 0; i < ROWS_WARPS; i++) s += sacc[i][d];
        dq[qo + d] = f32_to_bf16(bf16_to_f32(dq[qo + d]) + scale * s);
    }
    if (threadIdx.x == 0) {
        stats[2 * ((i64)r * heads + h)] = lse;
        stats[2 * ((i64)r * heads + h) + 1] = D;
    }
}

// attn_bwd_dkv: dk[j] += scale·Σ dS·q and dv[j] += Σ P·dO over the query rows that see key j
// and the query heads of its key/value head, with P and dS recomputed from attn_bwd_dq's
// stats. keys[5e..5e+4] describes key entry e: its key row, its span's first query row, that
// row's position, the span's rows and the key's position. Grid (entries, kv_heads),
// ROWS_WARPS warps taking (row, head) pairs in turn; each key's gradients have one owner, so
// the sums are deterministic.
extern "C" __global__ void __launch_bounds__(128) attn_bwd_dkv(bf16* dk, bf16* dv, const float* stats, const bf16* q, const bf16* k, const bf16* v,
                                                               const bf16* dout, const int* keys, int heads, int kv_heads, int hd, int ldk,
                                                               float scale, int window, float softcap) {
    __shared__ float sk[ROWS_WARPS][ROWS_MAX_DIMS * 32];
    __shared__ float sv[ROWS_WARPS][ROWS_MAX_DIMS * 32];
    int e = blockIdx.x, kvh = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int group = heads / kv_heads;
    const int* ke = keys + 5 * (i64)e;
    int krow = ke[0], row0 = ke[1], pos0 = ke[2], n = ke[3], j = ke[4];
    int i0 = max(0, j - pos0), i1 = n;  // the span's rows whose position reaches key j
    if (window > 0) i1 = min(n, j + window - pos0);
    i64 ko = (i64)krow * ldk + (i64)kvh * hd;
    float kv[ROWS_MAX_DIMS], vv[ROWS_MAX_DIMS], ak[ROWS_MAX_DIMS], av[ROWS_MAX_DIMS];
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) {
        int d = lane + 32 * t;
        kv[t] = d < hd ? bf16_to_f32(k[ko + d]) * scale : 0.f;
        vv[t] = d < hd ? bf16_to_f32(v[ko + d]) : 0.f;
        ak[t] = 0.f;
        av[t] = 0.f;
    }
    int pairs = (i1 > i0 ? i1 - i0 : 0) * group;
    for (int x = w; x < pairs; x += ROWS_WARPS) {
        int r = row0 + i0 + x / group, h = kvh * group + x % group;
        i64 qo = ((i64)r * heads + h) * hd;
        float qv[ROWS_MAX_DIMS], gv[ROWS_MAX_DIMS];
        float s = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            int d = lane + 32 * t;
            qv[t] = d < hd ? bf16_to_f32(q[qo + d]) : 0.f;
            gv[t] = d < hd ? bf16_to_f32(dout[qo + d]) : 0.f;
            s += qv[t] * kv[t];
            dp += gv[t] * vv[t];
        }
        s = softcapf(warp_sum(s), softcap);
        dp = warp_sum(dp);
        const float* sr = stats + 2 * ((i64)r * heads + h);
        float pr = __expf(s - sr[0]);
        float ds = pr * (dp - sr[1]) * softcap_slope(s, softcap);
#pragma unroll
        for (int t = 0; t < ROWS_MAX_DIMS; t++) {
            ak[t] += ds * qv[t];
            av[t] += pr * gv[t];
        }
    }
#pragma unroll
    for (int t = 0; t < ROWS_MAX_DIMS; t++) {
        sk[w][lane + 32 * t] = ak[t];
        sv[w][lane + 32 * t] = av[t];
    }
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.f, b = 0.f;
        for (int i = 0; i < ROWS_WARPS; i++) {
            a += sk[i][d];
            b += sv[i][d];
        }
        dk[ko + d] = f32_to_bf16(bf16_to_f32(dk[ko + d]) + scale * a);
        dv[ko + d] = f32_to_bf16(bf16_to_f32(dv[ko + d]) + b);
    }
}
