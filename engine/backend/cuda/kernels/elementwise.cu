// Element-wise ops over n values, grid-stride loops. Backward kernels accumulate (+=) into
// their gradient, as the CPU backward functions do.

extern "C" __global__ void cast_f32_bf16(bf16* out, const float* in, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16(in[i]);
}

extern "C" __global__ void cast_bf16_f32(float* out, const bf16* in, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = bf16_to_f32(in[i]);
}

// out = a + b (out may alias a or b): the residual stream (a, out: float32) plus a
// projection's output (b: bf16); or all bf16.
template <typename TO, typename TA, typename TB>
__device__ void residual_fwd(TO* out, const TA* a, const TB* b, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) stf(out + i, ldf(a + i) + ldf(b + i));
}
extern "C" __global__ void residual_forward(float* out, const float* a, const bf16* b, i64 n) { residual_fwd(out, a, b, n); }
extern "C" __global__ void residual_forward_bf16(bf16* out, const bf16* a, const bf16* b, i64 n) { residual_fwd(out, a, b, n); }

// acc += alpha·x between the two storage types (the residual's backward with alpha 1;
// gradients of float32 tensors).
template <typename TA, typename TX>
__device__ void add_scaled(TA* acc, const TX* x, float alpha, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        stf(acc + i, ldf(acc + i) + alpha * ldf(x + i));
}
extern "C" __global__ void add_scaled_f32(float* acc, const float* x, float alpha, i64 n) { add_scaled(acc, x, alpha, n); }
extern "C" __global__ void add_scaled_bf16(bf16* acc, const bf16* x, float alpha, i64 n) { add_scaled(acc, x, alpha, n); }
extern "C" __global__ void add_scaled_bf16_f32(bf16* acc, const float* x, float alpha, i64 n) { add_scaled(acc, x, alpha, n); }
extern "C" __global__ void add_scaled_f32_bf16(float* acc, const bf16* x, float alpha, i64 n) { add_scaled(acc, x, alpha, n); }

// GELU, tanh approximation (GPT-2's gelu_new): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// tanh through exp as the CPU does: 1 − 2/(e^{2u}+1).
__device__ __forceinline__ float gelu_tanh_inner(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 1.f - 2.f / (expf(2.f * u) + 1.f);
}

extern "C" __global__ void gelu_forward(bf16* out, const bf16* inp, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float x = bf16_to_f32(inp[i]);
        out[i] = f32_to_bf16(0.5f * x * (1.f + gelu_tanh_inner(x)));
    }
}

extern "C" __global__ void gelu_backward(bf16* dinp, const bf16* dout, const bf16* inp, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float x = bf16_to_f32(inp[i]), t = gelu_tanh_inner(x);
        float g = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x);
        dinp[i] = f32_to_bf16(bf16_to_f32(dinp[i]) + bf16_to_f32(dout[i]) * g);
    }
}

// SwiGLU: out = SiLU(gate)·up, SiLU(g) = g·σ(g).
extern "C" __global__ void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float g = bf16_to_f32(gate[i]);
        out[i] = f32_to_bf16(g / (1.f + expf(-g)) * bf16_to_f32(up[i]));
    }
}

// dgate += dout·up·σ(g)·(1 + g·(1−σ(g))), dup += dout·SiLU(g)
extern "C" __global__ void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float g = bf16_to_f32(gate[i]), u = bf16_to_f32(up[i]), d = bf16_to_f32(dout[i]);
        float s = 1.f / (1.f + expf(-g));
        dgate[i] = f32_to_bf16(bf16_to_f32(dgate[i]) + d * u * s * (1.f + g * (1.f - s)));
        dup[i] = f32_to_bf16(bf16_to_f32(dup[i]) + d * g * s);
    }
}

// out[r, :] += bias for rows r; grid (⌈cols/blockDim⌉, row groups), rows strided by gridDim.y.
extern "C" __global__ void bias_forward(bf16* out, const float* bias, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float b = bias[c];
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 i = (i64)r * cols + c;
        out[i] = f32_to_bf16(bf16_to_f32(out[i]) + b);
    }
}

// dbias += Σ_rows dout. Block (32, 8): a strip of 32 columns, 8 row lanes; grid.x over
// strips, grid.y splits the rows; partial sums meet in dbias by atomicAdd.
extern "C" __global__ void bias_backward(float* dbias, const bf16* dout, int rows, int cols) {
    __shared__ float part[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (c < cols)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < rows; r += gridDim.y * 8) s += bf16_to_f32(dout[(i64)r * cols + c]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < 8; k++) s += part[k][threadIdx.x];
        atomicAdd(&dbias[c], s);
    }
}

// dst[r, 0:cols] = src[r, 0:cols] with leading dimensions ldd and lds (split and merge of
// fused projections, strided views); grid (⌈cols/blockDim⌉, row groups).
extern "C" __global__ void copy2d_bf16(bf16* dst, int ldd, const bf16* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) dst[(i64)r * ldd + c] = src[(i64)r * lds + c];
}

// dst[r, :] += src[r, :] with leading dimensions (the backward of a 2-D copy).
extern "C" __global__ void add2d_bf16(bf16* dst, int ldd, const bf16* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 d = (i64)r * ldd + c;
        dst[d] = f32_to_bf16(bf16_to_f32(dst[d]) + bf16_to_f32(src[(i64)r * lds + c]));
    }
}

// Row gathers and scatters by index: dst row dst_rows[i] = src row src_rows[i] (a null index
// array means the identity), rows of cols values. One block row per i.
extern "C" __global__ void copy_rows_bf16(bf16* dst, const i64* dst_rows, int ldd, const bf16* src, const i64* src_rows, int lds, int n, int cols) {
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        i64 dr = dst_rows ? dst_rows[i] : i, sr = src_rows ? src_rows[i] : i;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
            dst[dr * ldd + c] = src[sr * lds + c];
    }
}

// dst[r, c] = bf16(src[r, c]) between strided row-major views; grid (⌈cols/blockDim⌉, row groups).
extern "C" __global__ void cast2d_f32_bf16(bf16* dst, int ldd, const float* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) dst[(i64)r * ldd + c] = f32_to_bf16(src[(i64)r * lds + c]);
}
