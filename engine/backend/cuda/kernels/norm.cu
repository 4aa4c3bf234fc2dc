// RMSNorm and LayerNorm: one warp per row (blocks of 8 warps), statistics in float32.
// Backward kernels add to dinp; the weight (and bias) gradients, when asked for, are summed
// per block in dynamic shared memory (dim floats each) and added to the float32 gradient
// with atomics, so their last bits depend on the order blocks finish.

// out = x·rstd·weight, rstd = 1/√(mean(x²)+eps)
extern "C" __global__ void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int rows, int dim, float eps) {
    int lane = threadIdx.x & 31;
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const bf16* x = inp + (i64)row * dim;
        float ss = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float v = bf16_to_f32(x[i]);
            ss += v * v;
        }
        ss = warp_sum(ss);
        float r = rsqrtf(ss / dim + eps);
        bf16* o = out + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) o[i] = f32_to_bf16(bf16_to_f32(x[i]) * r * weight[i]);
        if (lane == 0) rstd[row] = r;
    }
}

// dx += rstd·g − x·rstd³·mean(g·x), g = dout·weight; dweight += Σ_rows dout·x·rstd
extern "C" __global__ void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                                            const float* rstd, int rows, int dim) {
    DYNAMIC_SHARED(float, dw);
    int lane = threadIdx.x & 31;
    if (dweight) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dw[i] = 0.f;
        __syncthreads();
    }
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const bf16 *x = inp + (i64)row * dim, *d = dout + (i64)row * dim;
        float rs = rstd[row], sgx = 0.f;
        for (int i = lane; i < dim; i += 32) sgx += bf16_to_f32(d[i]) * weight[i] * bf16_to_f32(x[i]);
        sgx = warp_sum(sgx);
        float c = sgx / dim * rs * rs * rs;
        bf16* dx = dinp + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) {
            float xi = bf16_to_f32(x[i]), di = bf16_to_f32(d[i]);
            dx[i] = f32_to_bf16(bf16_to_f32(dx[i]) + di * weight[i] * rs - xi * c);
            if (dweight) atomicAdd(&dw[i], di * xi * rs);
        }
    }
    if (dweight) {
        __syncthreads();
        for (int i = threadIdx.x; i < dim; i += blockDim.x) atomicAdd(&dweight[i], dw[i]);
    }
}

// out = (x−mean)·rstd·weight + bias
extern "C" __global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                                             int rows, int dim, float eps) {
    int lane = threadIdx.x & 31;
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const bf16* x = inp + (i64)row * dim;
        float s = 0.f;
        for (int i = lane; i < dim; i += 32) s += bf16_to_f32(x[i]);
        float m = warp_sum(s) / dim;
        float ss = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float v = bf16_to_f32(x[i]) - m;
            ss += v * v;
        }
        float r = rsqrtf(warp_sum(ss) / dim + eps);
        bf16* o = out + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) o[i] = f32_to_bf16((bf16_to_f32(x[i]) - m) * r * weight[i] + bias[i]);
        if (lane == 0) {
            mean[row] = m;
            rstd[row] = r;
        }
    }
}

// dx += (g − mean(g) − n·mean(g·n))·rstd with g = dout·weight, n the normalised input;
// dweight += Σ dout·n, dbias += Σ dout (both null, or both given: 2·dim shared floats)
extern "C" __global__ void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                              const float* weight, const float* mean, const float* rstd, int rows, int dim) {
    DYNAMIC_SHARED(float, dw);
    float* db = dw + dim;
    int lane = threadIdx.x & 31;
    if (dweight) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dw[i] = db[i] = 0.f;
        __syncthreads();
    }
    for (int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += gridDim.x * (blockDim.x >> 5)) {
        const bf16 *x = inp + (i64)row * dim, *d = dout + (i64)row * dim;
        float m = mean[row], rs = rstd[row], sg = 0.f, sgn = 0.f;
        for (int i = lane; i < dim; i += 32) {
            float g = bf16_to_f32(d[i]) * weight[i];
            sg += g;
            sgn += g * (bf16_to_f32(x[i]) - m) * rs;
        }
        float mg = warp_sum(sg) / dim, mgn = warp_sum(sgn) / dim;
        bf16* dx = dinp + (i64)row * dim;
        for (int i = lane; i < dim; i += 32) {
            float n = (bf16_to_f32(x[i]) - m) * rs, di = bf16_to_f32(d[i]);
            dx[i] = f32_to_bf16(bf16_to_f32(dx[i]) + (di * weight[i] - mg - n * mgn) * rs);
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
