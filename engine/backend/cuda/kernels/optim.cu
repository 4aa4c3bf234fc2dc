// Optimizer kernels over float32 master weights, gradients and moments.

// AdamW as torch.optim.AdamW: p ← p·(1 − lr·λ); m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
// p ← p − (lr/(1−β1^t))·m / (√v/√(1−β2^t) + ε). decay = 1 − lr·λ, step = lr/(1−β1^t).
extern "C" __global__ void adamw_update(float* p, const float* g, float* m, float* v, i64 n, float b1, float b2, float step,
                                        float sqrt_bc2, float eps, float decay) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = b1 * m[i] + (1.f - b1) * gi;
        float vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) / sqrt_bc2 + eps);
    }
}

// partial[blockIdx.x] += Σ x² over the block's share of x: a fixed grid, so the sum's order
// (and the norm's last bits) never change. Call once per tensor; sum_f32 then adds the partials.
extern "C" __global__ void sumsq_partial(float* partial, const float* x, i64 n) {
    __shared__ float sh[32];
    float s = 0.f;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) s += x[i] * x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] += s;
}

// out[0] = Σ x[0:n] in one block.
extern "C" __global__ void __launch_bounds__(1024) sum_f32(float* out, const float* x, int n) {
    __shared__ float sh[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[0] = s;
}
