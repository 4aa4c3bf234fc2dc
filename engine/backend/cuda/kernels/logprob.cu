// Log-probabilities and entropies of chosen tokens from float32 logits, one block per row
// (the caller forms the logits a chunk of rows at a time, so full logits never exist).
// Softmax statistics use one pass: per thread a running maximum m, S = Σ e^{z−m} and
// T = Σ e^{z−m}·(z−m), merged across threads; log Σ e^z = m + log S and the entropy is
// log S − T/S.

struct softmax_stats { float m, s, t; };

__device__ __forceinline__ softmax_stats stats_merge(softmax_stats a, softmax_stats b) {
    if (a.s == 0.f) return b;
    if (b.s == 0.f) return a;
    float m = fmaxf(a.m, b.m), ca = __expf(a.m - m), cb = __expf(b.m - m);
    softmax_stats r;
    r.m = m;
    r.s = a.s * ca + b.s * cb;
    r.t = ca * (a.t + a.s * (a.m - m)) + cb * (b.t + b.s * (b.m - m));
    return r;
}

__device__ __forceinline__ softmax_stats stats_add(softmax_stats a, float z) {
    if (a.s == 0.f) {
        a.m = z;
        a.s = 1.f;
        a.t = 0.f;
    } else if (z > a.m) {
        float c = __expf(a.m - z);
        a.t = c * (a.t + a.s * (a.m - z));
        a.s = a.s * c + 1.f;
        a.m = z;
    } else {
        float e = __expf(z - a.m);
        a.s += e;
        a.t += e * (z - a.m);
    }
    return a;
}

__device__ __forceinline__ softmax_stats stats_shfl(softmax_stats a, int o) {
    softmax_stats b;
    b.m = __shfl_xor_sync(FULL_MASK, a.m, o);
    b.s = __shfl_xor_sync(FULL_MASK, a.s, o);
    b.t = __shfl_xor_sync(FULL_MASK, a.t, o);
    return b;
}

// The statistics of z = row·inv_temp over the whole block.
__device__ softmax_stats row_stats(const float* row, int vocab, float inv_temp) {
    __shared__ softmax_stats sh[32];
    softmax_stats a = {NEG_INF, 0.f, 0.f};
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) a = stats_add(a, row[j] * inv_temp);
    for (int o = 16; o > 0; o >>= 1) a = stats_merge(a, stats_shfl(a, o));
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[w] = a;
    __syncthreads();
    softmax_stats z = {NEG_INF, 0.f, 0.f};
    a = lane < nw ? sh[lane] : z;
    for (int o = 16; o > 0; o >>= 1) a = stats_merge(a, stats_shfl(a, o));
    return a;
}

// logp[r] = z[t] − log Σ e^z (0 when targets[r] < 0); entropy[r] (when not null) = −Σ p·log p.
extern "C" __global__ void __launch_bounds__(512) logprob_forward(float* logp, float* entropy, const float* logits, const int* targets, int rows, int vocab, float inv_temp) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = logits + (i64)r * vocab;
        softmax_stats a = row_stats(row, vocab, inv_temp);
        if (threadIdx.x == 0) {
            float lse = a.m + logf(a.s);
            int t = targets[r];
            logp[r] = t >= 0 ? row[t] * inv_temp - lse : 0.f;
            if (entropy) entropy[r] = logf(a.s) - a.t / a.s;
        }
    }
}

// dlogits[r] += dlogp[r]·inv_temp·(onehot(t) − p) − dentropy[r]·inv_temp·p⊙(log p + H)
// (bf16, or float32: _f32), p = softmax(z), H its entropy (∂H/∂z = −p⊙(log p + H)); the
// first term on rows with a target, the second when dentropy is given. Rows with nothing to
// add are left alone.
template <typename T>
__device__ void logprob_bwd(T* dlogits, const float* logits, const float* dlogp, const float* dentropy, const int* targets, int rows, int vocab, float inv_temp) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = logits + (i64)r * vocab;
        T* d = dlogits + (i64)r * vocab;
        int t = targets[r];
        float g = t >= 0 ? dlogp[r] * inv_temp : 0.f;
        float ge = dentropy ? dentropy[r] * inv_temp : 0.f;
        // every block reaches the same barriers whatever its rows (a simulator that runs
        // barrier-free kernels as plain loops must see them in the first block)
        softmax_stats a = row_stats(row, vocab, inv_temp);
        if (g == 0.f && ge == 0.f) continue;
        float inv_s = 1.f / a.s, ls = logf(a.s), h = ls - a.t / a.s;
        for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
            float zm = row[j] * inv_temp - a.m, p = __expf(zm) * inv_s;
            stf(d + j, ldf(d + j) + g * ((j == t ? 1.f : 0.f) - p) - ge * p * (zm - ls + h));
        }
    }
}
extern "C" __global__ void __launch_bounds__(512) logprob_backward(bf16* dlogits, const float* logits, const float* dlogp, const float* dentropy, const int* targets, int rows, int vocab, float inv_temp) {
    logprob_bwd(dlogits, logits, dlogp, dentropy, targets, rows, vocab, inv_temp);
}
extern "C" __global__ void __launch_bounds__(512) logprob_backward_f32(float* dlogits, const float* logits, const float* dlogp, const float* dentropy, const int* targets, int rows, int vocab, float inv_temp) {
    logprob_bwd(dlogits, logits, dlogp, dentropy, targets, rows, vocab, inv_temp);
}

// NTL's digit distribution: out[r, d] = Σ over digit tokens i of value d of
// softmax(logits[r, ids])_i, the softmax over the n digit tokens only. One warp per row.
extern "C" __global__ void digit_probs(float* out, const float* logits, const int* ids, const int* values, int n, int rows, int vocab) {
    int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += gridDim.x * (blockDim.x >> 5)) {
        const float* row = logits + (i64)r * vocab;
        float m = NEG_INF;
        for (int i = lane; i < n; i += 32) m = fmaxf(m, row[ids[i]]);
        m = warp_max(m);
        float s = 0.f;
        for (int i = lane; i < n; i += 32) s += expf(row[ids[i]] - m);
        float inv = 1.f / warp_sum(s);
        for (int d = 0; d < 10; d++) {
            float p = 0.f;
            for (int i = lane; i < n; i += 32)
                if (values[i] == d) p += expf(row[ids[i]] - m);
            p = warp_sum(p);
            if (lane == 0) out[(i64)r * 10 + d] = p * inv;
        }
    }
}
