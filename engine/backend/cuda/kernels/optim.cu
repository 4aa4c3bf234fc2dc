// Optimizer kernels over float32 master weights, gradients and moments.

// out[0] = Σ x[0:n] in one block.
extern "C" __global__ void __launch_bounds__(1024) sum_f32(float* out, const float* x, int n) {
    __shared__ float sh[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}

// AdamW as torch.optim.AdamW: p ← p·(1 − lr·λ); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
// p ← p − (lr/(1−β1^t))·m / (√v/√(1−β2^t) + ε). decay = 1 − lr·λ, step = lr/(1−β1^t).
// Over many tensors in one launch (LoRA has hundreds: one launch each would be hundreds of
// launches a step): table holds, per tensor, five 8-byte words: the addresses of
// p, g, m, v and the element count. Grid (blocks per tensor, tensors).
extern "C" __global__ void adamw_multi(const u64* table, float b1, float b2, float step, float sqrt_bc2, float eps, float decay) {
    const u64* e = table + 5 * (i64)blockIdx.y;
    float *p = (float*)e[0], *m = (float*)e[2], *v = (float*)e[3];
    const float* g = (const float*)e[1];
    i64 n = (i64)e[4];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.f - b1) * gi;
        float vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}

// partial[tensor·gridDim.x + blockIdx.x] = Σ x² over the block's share of the tensor whose
// address and count are table[2t], table[2t+1] (grid (blocks per tensor, tensors): a fixed
// order of sums); sum_f32 then adds the partials.
extern "C" __global__ void sumsq_multi(float* partial, const u64* table) {
    __shared__ float sh[32];
    const float* x = (const float*)table[2 * (i64)blockIdx.y];
    i64 n = (i64)table[2 * (i64)blockIdx.y + 1];
    float s = 0.f;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) s += x[i] * x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[(i64)blockIdx.y * gridDim.x + blockIdx.x] = s;
}

// x[i] *= s for every tensor of the table (address, count pairs); grid (blocks, tensors).
// s = 0 stores zeros (NaN·0 would stay NaN): the gradients of a step cleared in one launch.
extern "C" __global__ void scale_multi(const u64* table, float s) {
    float* x = (float*)table[2 * (i64)blockIdx.y];
    i64 n = (i64)table[2 * (i64)blockIdx.y + 1];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) x[i] = s == 0.f ? 0.f : x[i] * s;
}
