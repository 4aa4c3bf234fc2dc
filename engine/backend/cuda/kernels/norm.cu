// RMSNorm and LayerNorm: one warp per row (blocks of 8 warps), statistics in float32. The
// input (the residual stream) is float32 or bf16, the output bf16 (feeding products) or
// float32. Backward kernels add to dinp; the weight (and bias) gradients, when asked for,
// are summed per block in dynamic shared memory (dim floats each) and added to the float32
// gradient with atomics, so their last bits depend on the order blocks finish.

#define NORM_EACH 8  // values a thread of a block-per-row norm holds in registers

// out = x·rstd·(offset + weight), rstd = 1/√(mean(x²)+eps); offset 1 for gemma's (1 + w). With
// a block per row (the launcher's choice for the few rows of a decode step, where a warp
// walking a whole row leaves too little in flight: 14 µs a call on an H200) the block shares
// each row (sh: 32 floats in the kernel's shared memory); otherwise a warp per row. A row of
// at most NORM_EACH values a thread is held in registers: its values and weights loaded at
// once (indices clamped, so that no load waits behind a condition), then stored scaled, not
// read again — a warp waits twice, not once per value as when it walks the row.
template <typename TI, typename TO>
__device__ void rmsnorm_fwd(TO* out, float* rstd, const TI* inp, const float* weight, int rows, int dim, float eps, float offset, float* sh) {
    int lane = threadIdx.x & 31;
    if (gridDim.x >= rows && dim <= NORM_EACH * (int)blockDim.x) {
        int row = blockIdx.x;
        if (row >= rows) return;  // the whole block
        const TI* x = inp + (i64)row * dim;
        float v[NORM_EACH], w[NORM_EACH], ss = 0.f;
#pragma unroll
        for (int e = 0; e < NORM_EACH; e++) {
            int i = min(threadIdx.x + e * blockDim.x, dim - 1);
            v[e] = ldf(x + i);
            w[e] = weight[i];
        }
#pragma unroll
        for (int e = 0; e < NORM_EACH; e++)
            if (threadIdx.x + e * blockDim.x < dim) ss += v[e] * v[e];
        float r = rsqrtf(block_sum(ss, sh) / dim + eps);
        TO* o = out + (i64)row * dim;
#pragma unroll
        for (int e = 0; e < NORM_EACH; e++) {
            int i = threadIdx.x + e * blockDim.x;
            if (i < dim) stf(o + i, v[e] * r * (offset + w[e]));
        }
        if (threadIdx.x == 0) rstd[row] = r;
        return;
    }
    if (gridDim.x >= rows) {
        int row = blockIdx.x;
        if (row >= rows) return;  // the whole block
        const TI* x = inp + (i64)row * dim;
        float ss = 0.f;
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float v = ldf(x + i);
            ss += v * v;
        }
        float r = rsqrtf(block_sum(ss, sh) / dim + eps);
        TO* o = out + (i64)row * dim;
        for (int i = threadIdx.x; i < dim; i += blockDim.x) stf(o + i, ldf(x + i) * r * (offset + weight[i]));
        if (threadIdx.x == 0) rstd[row] = r;
        return;
    }
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const TI* x = inp + (i64)row * dim;
        float ss = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float v = ldf(x + i);
            ss += v * v;
        }
        ss = warp_sum(ss);
        float r = rsqrtf(ss / dim + eps);
        TO* o = out + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) stf(o + i, ldf(x + i) * r * (offset + weight[i]));
        if (lane == 0) rstd[row] = r;
    }
}

extern "C" __global__ void __launch_bounds__(1024) rmsnorm_forward(bf16* out, float* rstd, const float* inp, const float* weight, int rows, int dim, float eps, float offset) {
    __shared__ float sh[32];
    rmsnorm_fwd(out, rstd, inp, weight, rows, dim, eps, offset, sh);
}
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* weight, int rows, int dim, float eps,
                                               float offset) {
    __shared__ float sh[32];
    rmsnorm_fwd(out, rstd, inp, weight, rows, dim, eps, offset, sh);
}
extern "C" __global__ void __launch_bounds__(1024) rmsnorm_forward_bf16(bf16* out, float* rstd, const bf16* inp, const float* weight, int rows, int dim, float eps,
                                                float offset) {
    __shared__ float sh[32];
    rmsnorm_fwd(out, rstd, inp, weight, rows, dim, eps, offset, sh);
}

// dx += rstd·g − x·rstd³·mean(g·x), g = dout·(offset + weight); dweight += Σ_rows dout·x·rstd
template <typename T>
__device__ void rmsnorm_bwd(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd, int rows, int dim,
                            float offset) {
    DYNAMIC_SHARED(float, dw);
    int lane = threadIdx.x & 31;
    if (dweight) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dw[i] = 0.f;
        __syncthreads();
    }
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const T *x = inp + (i64)row * dim, *d = dout + (i64)row * dim;
        float rs = rstd[row], sgx = 0.f;
        for (int i = lane; i < dim; i += 32) sgx += ldf(d + i) * (offset + weight[i]) * ldf(x + i);
        sgx = warp_sum(sgx);
        float c = sgx / dim * rs * rs * rs;
        T* dx = dinp + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) {
            float xi = ldf(x + i), di = ldf(d + i);
            stf(dx + i, ldf(dx + i) + di * (offset + weight[i]) * rs - xi * c);
            if (dweight) atomicAdd(&dw[i], di * xi * rs);
        }
    }
    if (dweight) {
        __syncthreads();
        for (int i = threadIdx.x; i < dim; i += blockDim.x) atomicAdd(&dweight[i], dw[i]);
    }
}

extern "C" __global__ void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                            const float* rstd, int rows, int dim, float offset) {
    rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, rows, dim, offset);
}
extern "C" __global__ void rmsnorm_backward_bf16(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                                                 const float* rstd, int rows, int dim, float offset) {
    rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd, rows, dim, offset);
}

// out = (x−mean)·rstd·weight + bias
template <typename TI, typename TO>
__device__ void layernorm_fwd(TO* out, float* mean, float* rstd, const TI* inp, const float* weight, const float* bias, int rows, int dim, float eps) {
    int lane = threadIdx.x & 31;
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const TI* x = inp + (i64)row * dim;
        float s = 0.f;
        for (int i = lane; i < dim; i += 32) s += ldf(x + i);
        float m = warp_sum(s) / dim;
        float ss = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float v = ldf(x + i) - m;
            ss += v * v;
        }
        float r = rsqrtf(warp_sum(ss) / dim + eps);
        TO* o = out + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) stf(o + i, (ldf(x + i) - m) * r * weight[i] + bias[i]);
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = r;
        }
    }
}

extern "C" __global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                             int rows, int dim, float eps) {
    layernorm_fwd(out, mean, rstd, inp, weight, bias, rows, dim, eps);
}
extern "C" __global__ void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                                                 int rows, int dim, float eps) {
    layernorm_fwd(out, mean, rstd, inp, weight, bias, rows, dim, eps);
}
extern "C" __global__ void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                                                  int rows, int dim, float eps) {
    layernorm_fwd(out, mean, rstd, inp, weight, bias, rows, dim, eps);
}

// dx += (g − mean(g) − n·mean(g·n))·rstd with g = dout·weight, n the normalised input;
// dweight += Σ dout·n, dbias += Σ dout (both null, or both given: 2·dim shared floats)
template <typename T>
__device__ void layernorm_bwd(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight, const float* mean,
                              const float* rstd, int rows, int dim) {
    DYNAMIC_SHARED(float, dw);
    float* db = dw + dim;
    int lane = threadIdx.x & 31;
    if (dweight) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dw[i] = db[i] = 0.f;
        __syncthreads();
    }
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const T *x = inp + (i64)row * dim, *d = dout + (i64)row * dim;
        float m = mean[row], rs = rstd[row], sg = 0.f, sgn = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float g = ldf(d + i) * weight[i];
            sg += g;
            sgn += g * (ldf(x + i) - m) * rs;
        }
        float mg = warp_sum(sg) / dim, mgn = warp_sum(sgn) / dim;
        T* dx = dinp + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) {
            float n = (ldf(x + i) - m) * rs, di = ldf(d + i);
            stf(dx + i, ldf(dx + i) + (di * weight[i] - mg - n * mgn) * rs);
            if (dweight) {
                atomicAdd(&dw[i], di * n);
                atomicAdd(&db[i], di);
            }
        }
    }
    if (dweight) {
        __syncthreads();
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            atomicAdd(&dweight[i], dw[i]);
            atomicAdd(&dbias[i], db[i]);
        }
    }
}

extern "C" __global__ void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                              const float* weight, const float* mean, const float* rstd, int rows, int dim) {
    layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, dim);
}
extern "C" __global__ void layernorm_backward_bf16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                                   const float* weight, const float* mean, const float* rstd, int rows, int dim) {
    layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, dim);
}
