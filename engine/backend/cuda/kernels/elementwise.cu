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

// cast_f32_bf16 over many tensors in one launch: table holds, per tensor, three 8-byte words,
// the addresses of out (bf16) and in (float32) and the element count. Grid (blocks per
// tensor, tensors). The model's bf16 copies of its LoRA factors, two per adapted linear,
// refreshed after every update: one launch instead of hundreds.
extern "C" __global__ void cast_multi_bf16(const u64* table) {
    const u64* e = table + 3 * (i64)blockIdx.y;
    bf16* out = (bf16*)e[0];
    const float* in = (const float*)e[1];
    i64 n = (i64)e[2];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = f32_to_bf16(in[i]);
}

// out = a + b (out may alias a or b): the residual stream (a, out: float32) plus a
// projection's output (b: bf16); or all bf16; or all float32.
template <typename TO, typename TA, typename TB>
__device__ void residual_fwd(TO* out, const TA* a, const TB* b, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) stf(out + i, ldf(a + i) + ldf(b + i));
}
extern "C" __global__ void residual_forward(float* out, const float* a, const bf16* b, i64 n) { residual_fwd(out, a, b, n); }
extern "C" __global__ void residual_forward_bf16(bf16* out, const bf16* a, const bf16* b, i64 n) { residual_fwd(out, a, b, n); }
extern "C" __global__ void residual_forward_f32(float* out, const float* a, const float* b, i64 n) { residual_fwd(out, a, b, n); }

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

// The kernels below come in two storage types, all operands alike: bf16 (the activations'
// own) and float32 (_f32; what a caller holding float32 activations passes).

template <typename T>
__device__ void gelu_fwd(T* out, const T* inp, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float x = ldf(inp + i);
        stf(out + i, 0.5f * x * (1.f + gelu_tanh_inner(x)));
    }
}
extern "C" __global__ void gelu_forward(bf16* out, const bf16* inp, i64 n) { gelu_fwd(out, inp, n); }
extern "C" __global__ void gelu_forward_f32(float* out, const float* inp, i64 n) { gelu_fwd(out, inp, n); }

template <typename T>
__device__ void gelu_bwd(T* dinp, const T* dout, const T* inp, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float x = ldf(inp + i), t = gelu_tanh_inner(x);
        float g = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x);
        stf(dinp + i, ldf(dinp + i) + ldf(dout + i) * g);
    }
}
extern "C" __global__ void gelu_backward(bf16* dinp, const bf16* dout, const bf16* inp, i64 n) { gelu_bwd(dinp, dout, inp, n); }
extern "C" __global__ void gelu_backward_f32(float* dinp, const float* dout, const float* inp, i64 n) { gelu_bwd(dinp, dout, inp, n); }

// SwiGLU: out = SiLU(gate)·up, SiLU(g) = g·σ(g).
template <typename T>
__device__ void swiglu_fwd(T* out, const T* gate, const T* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float g = ldf(gate + i);
        stf(out + i, g / (1.f + expf(-g)) * ldf(up + i));
    }
}
extern "C" __global__ void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, i64 n) { swiglu_fwd(out, gate, up, n); }
extern "C" __global__ void swiglu_forward_f32(float* out, const float* gate, const float* up, i64 n) { swiglu_fwd(out, gate, up, n); }

// dgate += dout·up·σ(g)·(1 + g·(1−σ(g))), dup += dout·SiLU(g)
template <typename T>
__device__ void swiglu_bwd(T* dgate, T* dup, const T* dout, const T* gate, const T* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float g = ldf(gate + i), u = ldf(up + i), d = ldf(dout + i);
        float s = 1.f / (1.f + expf(-g));
        stf(dgate + i, ldf(dgate + i) + d * u * s * (1.f + g * (1.f - s)));
        stf(dup + i, ldf(dup + i) + d * g * s);
    }
}
extern "C" __global__ void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, i64 n) {
    swiglu_bwd(dgate, dup, dout, gate, up, n);
}
extern "C" __global__ void swiglu_backward_f32(float* dgate, float* dup, const float* dout, const float* gate, const float* up, i64 n) {
    swiglu_bwd(dgate, dup, dout, gate, up, n);
}

// GeGLU: out = GELU(gate)·up, GELU's tanh approximation (gemma's MLP).
template <typename T>
__device__ void geglu_fwd(T* out, const T* gate, const T* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float g = ldf(gate + i);
        stf(out + i, 0.5f * g * (1.f + gelu_tanh_inner(g)) * ldf(up + i));
    }
}
extern "C" __global__ void geglu_forward(bf16* out, const bf16* gate, const bf16* up, i64 n) { geglu_fwd(out, gate, up, n); }
extern "C" __global__ void geglu_forward_f32(float* out, const float* gate, const float* up, i64 n) { geglu_fwd(out, gate, up, n); }

// dgate += dout·up·GELU'(g), dup += dout·GELU(g)
template <typename T>
__device__ void geglu_bwd(T* dgate, T* dup, const T* dout, const T* gate, const T* up, i64 n) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float x = ldf(gate + i), u = ldf(up + i), d = ldf(dout + i), t = gelu_tanh_inner(x);
        float g = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x);
        stf(dgate + i, ldf(dgate + i) + d * u * g);
        stf(dup + i, ldf(dup + i) + d * 0.5f * x * (1.f + t));
    }
}
extern "C" __global__ void geglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, i64 n) {
    geglu_bwd(dgate, dup, dout, gate, up, n);
}
extern "C" __global__ void geglu_backward_f32(float* dgate, float* dup, const float* dout, const float* gate, const float* up, i64 n) {
    geglu_bwd(dgate, dup, dout, gate, up, n);
}

// Soft-capping (float32 logits): out = cap·tanh(x/cap) (out may be x), tanh as
// 1 − 2/(e^{2u}+1) like the CPU; the backward from the output: dinp += dout·(1 − (out/cap)²).
extern "C" __global__ void softcap_forward_f32(float* out, const float* inp, i64 n, float cap) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) out[i] = softcapf(inp[i], cap);
}
extern "C" __global__ void softcap_backward_f32(float* dinp, const float* dout, const float* out, i64 n, float cap) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) dinp[i] += dout[i] * softcap_slope(out[i], cap);
}
// d ·= 1 − (y/cap)²: the gradient of capped values y turned into that of the raw ones, in
// place (the LM head's backward), d in float32 or bf16.
template <typename T>
__device__ void softcap_uncap(T* d, const float* y, i64 n, float cap) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) stf(d + i, ldf(d + i) * softcap_slope(y[i], cap));
}
extern "C" __global__ void softcap_uncap_f32(float* d, const float* y, i64 n, float cap) { softcap_uncap(d, y, n, cap); }
extern "C" __global__ void softcap_uncap_bf16(bf16* d, const float* y, i64 n, float cap) { softcap_uncap(d, y, n, cap); }

// out[r, :] += bias for rows r; grid (⌈cols/blockDim⌉, row groups), rows strided by gridDim.y.
template <typename T>
__device__ void bias_fwd(T* out, const float* bias, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float b = bias[c];
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 i = (i64)r * cols + c;
        stf(out + i, ldf(out + i) + b);
    }
}
extern "C" __global__ void bias_forward(bf16* out, const float* bias, int rows, int cols) { bias_fwd(out, bias, rows, cols); }
extern "C" __global__ void bias_forward_f32(float* out, const float* bias, int rows, int cols) { bias_fwd(out, bias, rows, cols); }

// dbias += Σ_rows dout. Block (32, 8): a strip of 32 columns, 8 row lanes; grid.x over
// strips, grid.y splits the rows; partial sums meet in dbias by atomicAdd. part is the
// kernel's shared [8][33] (declared in the kernel: the stand-in takes __shared__ there only).
template <typename T>
__device__ void bias_bwd(float (*part)[33], float* dbias, const T* dout, int rows, int cols) {
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (c < cols)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < rows; r += gridDim.y * 8) s += ldf(dout + (i64)r * cols + c);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        for (int k = 1; k < 8; k++) s += part[k][threadIdx.x];
        atomicAdd(&dbias[c], s);
    }
}
extern "C" __global__ void bias_backward(float* dbias, const bf16* dout, int rows, int cols) {
    __shared__ float part[8][33];
    bias_bwd(part, dbias, dout, rows, cols);
}
extern "C" __global__ void bias_backward_f32(float* dbias, const float* dout, int rows, int cols) {
    __shared__ float part[8][33];
    bias_bwd(part, dbias, dout, rows, cols);
}

// dst[r, 0:cols] = src[r, 0:cols] with leading dimensions ldd and lds (split and merge of
// fused projections, strided views); grid (⌈cols/blockDim⌉, row groups).
template <typename T>
__device__ void copy2d(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) dst[(i64)r * ldd + c] = src[(i64)r * lds + c];
}
extern "C" __global__ void copy2d_bf16(bf16* dst, int ldd, const bf16* src, int lds, int rows, int cols) { copy2d(dst, ldd, src, lds, rows, cols); }
extern "C" __global__ void copy2d_f32(float* dst, int ldd, const float* src, int lds, int rows, int cols) { copy2d(dst, ldd, src, lds, rows, cols); }

// dst[r, :] += src[r, :] with leading dimensions (the backward of a 2-D copy).
template <typename T>
__device__ void add2d(T* dst, int ldd, const T* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 d = (i64)r * ldd + c;
        stf(dst + d, ldf(dst + d) + ldf(src + (i64)r * lds + c));
    }
}
extern "C" __global__ void add2d_bf16(bf16* dst, int ldd, const bf16* src, int lds, int rows, int cols) { add2d(dst, ldd, src, lds, rows, cols); }
extern "C" __global__ void add2d_f32(float* dst, int ldd, const float* src, int lds, int rows, int cols) { add2d(dst, ldd, src, lds, rows, cols); }

// Row gathers and scatters by index: dst row dst_rows[i] = src row src_rows[i] (a null index
// array means the identity), rows of cols values. One block row per i.
template <typename T>
__device__ void copy_rows(T* dst, const i64* dst_rows, int ldd, const T* src, const i64* src_rows, int lds, int n, int cols) {
    for (int i = blockIdx.y; i < n; i += gridDim.y) {
        i64 dr = dst_rows ? dst_rows[i] : i, sr = src_rows ? src_rows[i] : i;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
            dst[dr * ldd + c] = src[sr * lds + c];
    }
}
extern "C" __global__ void copy_rows_bf16(bf16* dst, const i64* dst_rows, int ldd, const bf16* src, const i64* src_rows, int lds, int n, int cols) {
    copy_rows(dst, dst_rows, ldd, src, src_rows, lds, n, cols);
}
extern "C" __global__ void copy_rows_f32(float* dst, const i64* dst_rows, int ldd, const float* src, const i64* src_rows, int lds, int n, int cols) {
    copy_rows(dst, dst_rows, ldd, src, src_rows, lds, n, cols);
}

// dst[r, c] = bf16(src[r, c]) between strided row-major views; grid (⌈cols/blockDim⌉, row groups).
extern "C" __global__ void cast2d_f32_bf16(bf16* dst, int ldd, const float* src, int lds, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) dst[(i64)r * ldd + c] = f32_to_bf16(src[(i64)r * lds + c]);
}
